// libFuzzer target: a checkpoint's index files (train/checkpoint_index.c), read from a
// directory as a resume reads them. The input is model.safetensors.index.json, a NUL
// byte, then optimizer.index.json; both are linked into a temporary directory and
// read against a fixed small MoE config (with router state) and a trainer.json
// recording the checksums of the data files of a one- and a two-rank save.
// Invariants on indexes the reader accepts (its promise in checkpoint_index.h): every
// tensor of the config mapped once, to a file of the index; every optimizer piece of a
// file of the index, and the pieces of each tensor tiling it exactly; file names plain.
#include "fuzz_util.h"
#include "model/config.h"
#include "model/params.h"
#include "train/checkpoint_index.h"

static const char *config_json =
    "{\"vocab_size\": 32, \"max_position_embeddings\": 16, \"hidden_size\": 16, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 2, \"intermediate_size\": 32, \"num_local_experts\": 4,"
    " \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, \"router_type\": \"bias\","
    " \"router_score\": \"sigmoid\"}";
static const char *sums_json =
    "{\"model-00001-of-00001.safetensors\": \"a89fa5ff966003eb\","
    " \"optimizer-00001-of-00001.safetensors\": \"a1552fd557271891\","
    " \"model-00001-of-00002.safetensors\": \"eb8b76e2580da357\","
    " \"model-00002-of-00002.safetensors\": \"a62cfd070e61d735\","
    " \"optimizer-00001-of-00002.safetensors\": \"5c886b0d6dd4f5bd\","
    " \"optimizer-00002-of-00002.safetensors\": \"8b674824d634990e\"}";

static char dir[64];
static model_config cfg;
static param_table t, st;
static ckpt_meta meta;

// The router state the bias router keeps: one vector of expert biases per MoE layer
// (model_router_state_table's names; built here so the parser targets need no gates).
static void build_state_table(void) {
    st.tensors = calloc((size_t)cfg.num_hidden_layers, sizeof *st.tensors);
    for (int l = 0; l < cfg.num_hidden_layers; l++) {
        param_tensor *p = &st.tensors[st.count++];
        snprintf(p->name, sizeof p->name, "model.layers.%d.block_sparse_moe.gate.e_score_correction_bias", l);
        p->ndim = 1;
        p->shape[0] = cfg.num_local_experts;
        p->offset = (size_t)l * (size_t)cfg.num_local_experts;
        p->numel = (size_t)cfg.num_local_experts;
        p->expert = -1;
        p->layer = l;
    }
    st.numel = st.dense_numel = (size_t)st.count * (size_t)cfg.num_local_experts;
}

// The index files are links into fuzz_file's in-memory files: no disk write per input.
static void link_files(void) {
    const char *names[2] = {CKPT_MODEL_INDEX, CKPT_OPT_INDEX};
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FUZZ_CHECK(symlink(fuzz_file(i, "", 0), path) == 0);
    }
}

static void remove_dir(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MODEL_INDEX);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_OPT_INDEX);
    unlink(path);
    rmdir(dir);
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/bagualu_fuzz_ckpt_XXXXXX");
    FUZZ_CHECK(mkdtemp(dir));
    atexit(remove_dir);
    link_files();
    FUZZ_CHECK(model_config_parse(&cfg, config_json, "fuzz config") == BG_OK);
    param_table_build(&t, &cfg);
    build_state_table();
    meta.version = 2;
    meta.root = cJSON_Parse(sums_json);
    meta.sums = meta.root;
    FUZZ_CHECK(meta.sums);
}

static void check_accepted(const ckpt_index *x) {
    FUZZ_CHECK(x->n_files >= 1 && x->adam_step >= 0);
    for (int i = 0; i < x->n_files; i++) {
        FUZZ_CHECK(!strchr(x->files[i], '/') && strcmp(x->files[i], ".") && strcmp(x->files[i], ".."));
        FUZZ_CHECK(i == 0 || strcmp(x->files[i - 1], x->files[i]) < 0);
    }
    FUZZ_CHECK(x->n_model == t.count + st.count);
    for (int i = 0; i < x->n_model; i++) FUZZ_CHECK(x->model[i].file >= 0 && x->model[i].file < x->n_files);
    for (int i = 0; i < x->n_opt; i++) {
        FUZZ_CHECK(x->opt[i].file >= 0 && x->opt[i].file < x->n_files);
        FUZZ_CHECK(x->opt[i].key[0] && x->opt[i].key[1]);
    }
    for (int i = 0; i < t.count + st.count; i++) {
        const param_tensor *p = i < t.count ? &t.tensors[i] : &st.tensors[i - t.count];
        FUZZ_CHECK(ckpt_index_model_file(x, p->name) >= 0);
    }
    int pieces = 0;
    for (int i = 0; i < t.count; i++) {
        int first, n = ckpt_index_pieces(x, t.tensors[i].name, &first);
        uint64_t at = 0;
        for (int k = 0; k < n; k++) {
            FUZZ_CHECK(x->opt[first + k].offset == at && x->opt[first + k].count > 0);
            at += x->opt[first + k].count;
        }
        FUZZ_CHECK(at == t.tensors[i].numel);
        pieces += n;
    }
    FUZZ_CHECK(pieces == x->n_opt);  // no piece of a tensor outside the config
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 20)) return 0;
    if (!dir[0]) setup();
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    fuzz_file(0, data, n1);
    fuzz_file(1, nul ? nul + 1 : data, nul ? size - n1 - 1 : 0);
    ckpt_index x;
    bg_clear_error();
    if (ckpt_index_read(&x, dir, &meta, &t, &st) != BG_OK) {
        fuzz_check_error(dir);
        FUZZ_CHECK(x.n_files == 0 && x.files == NULL && x.model == NULL && x.opt == NULL);
        return 0;
    }
    check_accepted(&x);
    ckpt_index_free(&x);
    return 0;
}
