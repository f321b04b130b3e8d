// For the clang fuzz builds only (fuzz.mk): what the checkpoint readers' objects call on
// a live trainer, which needs the kernels, the gates and oneDNN. The fuzz targets only
// read files and never reach these; the CTest replays link the real ones.
#include "core/error.h"
#include "kernels/kernels.h"
#include "model/model.h"

// checkpoint_meta.c's writer: the bf16 path the trainer's kernels take.
bf16_path kernel_ctx_bf16_path(const kernel_ctx *kc) {
    (void)kc;
    BG_ASSERT(!"kernel_ctx_bf16_path is not linked into the fuzz targets");
    return BF16_PATH_NATIVE;
}

// checkpoint_index.c's writer: the names of the router's state tensors.
void model_router_state_table(param_table *t, const model_config *cfg) {
    (void)t, (void)cfg;
    BG_ASSERT(!"model_router_state_table is not linked into the fuzz targets");
}
