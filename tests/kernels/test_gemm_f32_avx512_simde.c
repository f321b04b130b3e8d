// The own AVX-512 GEMM's code on CPUs without AVX-512: compiled through SIMDe
// (gemm_f32_avx512_simde.c), it must give, bit for bit, the documented summation order
// (as test_gemm_f32 --own checks of the real one on AVX-512 CPUs) over odd shapes, every
// operand layout, C written and added, K past KC, N past NC, M past MC, A read
// transposed, and 1 to 3 threads. So a change to the blocking the two kernels share, or
// to the AVX-512 packing, is checked on whatever CPU a session draws. A skip (77) where
// the emulation's AVX2 and FMA do not run.
#include <stdio.h>
#include <string.h>

#include "kernels/gemm_f32_test_util.h"

#ifdef BG_NO_SIMDE
int main(void) {
    printf("skip: built without SIMDe (libsimde-dev), which make test installs\n");
    return 77;
}
#else
void gemm_f32_avx512_simde(const gemm_f32_args *g, float *const *scratch, int threads);
size_t gemm_f32_avx512_simde_scratch_floats(void);

enum { THREADS = 3 };

static void check(const spec *s, float *const *scratch) {
    spec_operands o = spec_operands_make(s);
    for (int threads = 1; threads <= THREADS; threads++) {
        const int row = fixed_order_first_bad_row(&o, gemm_f32_avx512_simde, scratch, threads);
        TU_CHECK(row < 0, "M %d N %d K %d A%s B%s pad %d %s, %d threads: row %d is not the documented order", s->M,
                 s->N, s->K, s->a_trans ? "T" : "", s->b_trans ? "T" : "", s->pad, s->accumulate ? "+=" : "=",
                 threads, row);
    }
    spec_operands_free(&o);
}

int main(void) {
    if (!gemm_f32_avx2_supported()) {
        printf("skip: the emulation runs on AVX2 with FMA, which this CPU lacks\n");
        return 77;
    }
    tu_seed(512);
    float *scratch[THREADS];
    for (int t = 0; t < THREADS; t++) scratch[t] = bg_aligned_alloc(gemm_f32_avx512_simde_scratch_floats() * sizeof(float));
    // Odd sizes around the kernel's MR (14) and NR (32, two 16-lane halves) in every
    // layout: padded strides, either operand transposed, C written or added.
    static const int sizes[] = {1, 2, 13, 14, 15, 16, 17, 31, 33, 47, 64, 97};
    const int ns = sizeof sizes / sizeof sizes[0];
    int n = 0;
    for (int layout_id = 0; layout_id < 16; layout_id++)
        for (int r = 0; r < 3; r++, n++)
            check(&(spec){sizes[(n * 7 + r) % ns], sizes[(n * 5 + 3 * r + 1) % ns], sizes[(n * 3 + r + 2) % ns],
                          layout_id & 1, (layout_id >> 1) & 1, (layout_id >> 2) & 1 ? 3 : 0, (layout_id >> 3) & 1},
                  scratch);
    check(&(spec){29, 45, 2 * GEMM_F32_KC + 5, 0, 1, 0, 1}, scratch);  // K past KC: C added to between blocks
    check(&(spec){15, 1600, 40, 1, 0, 0, 0}, scratch);                 // N past NC (1536)
    check(&(spec){350, 20, 19, 0, 0, 1, 1}, scratch);                  // M past MC (336)
    check(&(spec){350, 37, 70, 1, 0, 1, 1}, scratch);                  // A transposed past MC, k by k
    for (int t = 0; t < THREADS; t++) free(scratch[t]);
    return tu_finish("test_gemm_f32_avx512_simde");
}
#endif
