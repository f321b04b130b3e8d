// The own f32 GEMM's blocking and thread split, shared by its AVX-512 and AVX2 kernels
// (gemm_f32.h): included once by each, after it defines MR, NR, KC, MC, NC, A_FLOATS,
// TARGET, imin, pack_b_panel (one NR panel), pack_a_panel (one MR panel), pack_a_columns
// (an MC block of an A with contiguous k-columns) and MICRO_KERNEL (an MR x NR tile: C =
// or += the kc-long products of one A and one B panel). Internal to kernels/.
//
// B is packed KC x NC at a time and A MC x KC; an A micro-panel stays in L1 while the B
// panels of the block stream past it, so consecutive tiles write the same C rows left to
// right (the hardware prefetchers follow them; with tiles stacked down a wide C, as for
// the LM head's logits, every tile's rows were cold and pages apart). KC is fixed, never
// derived from the shape: it sets each element's summation order.

// The MC x KC block of A into its MR panels. When a k-column of A is contiguous (A read
// transposed: the LM head's logits gradient in its weights product, rows pages apart),
// the block is packed k by k across all its panels, so that each source row is read as
// one contiguous run, with the rows ahead prefetched, instead of MR floats of it per panel.
static TARGET void pack_a_block(float *apack, const gemm_f32_args *g, int ic, int mc, int pc, int kc) {
    if (g->a_rs == 1) {
        pack_a_columns(apack, g, ic, mc, pc, kc);
        return;
    }
    for (int i = 0; i < mc; i += MR) pack_a_panel(apack + (size_t)i * kc, g, ic + i, imin(MR, mc - i), pc, kc);
}

// The whole product on the calling thread, packing into its own scratch.
static TARGET void gemm_alone(const gemm_f32_args *g, float *scratch) {
    float *apack = scratch, *bpack = scratch + A_FLOATS;
    const int M = g->M, N = g->N, K = g->K;
    for (int jc = 0; jc < N; jc += NC) {
        const int nc = imin(NC, N - jc), npanels = (nc + NR - 1) / NR;
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = imin(KC, K - pc), add = pc > 0 || g->accumulate;
            for (int p = 0; p < npanels; p++)
                pack_b_panel(bpack + (size_t)p * kc * NR, g, pc, kc, jc + p * NR, imin(NR, nc - p * NR));
            for (int ic = 0; ic < M; ic += MC) {
                const int mc = imin(MC, M - ic);
                pack_a_block(apack, g, ic, mc, pc, kc);
                for (int i = 0; i < mc; i += MR)
                    for (int p = 0; p < npanels; p++) {
                        const int j = jc + p * NR;
                        MICRO_KERNEL(kc, apack + (size_t)i * kc, bpack + (size_t)p * kc * NR,
                                     g->c + (ptrdiff_t)(ic + i) * g->ldc + j, g->ldc, imin(MR, mc - i),
                                     imin(NR, nc - p * NR), add);
                    }
            }
        }
    }
}

// Thread t of T takes a contiguous share of C's rows (in MR panels) or columns (in NR
// panels), whichever repacks less: each thread packs the whole of the other operand.
// No barrier inside: on a shared machine a descheduled partner then costs only the
// final join. The split moves no element's summation order.
static void gemm_share(const gemm_f32_args *g, float *scratch, int t, int T) {
    gemm_f32_args s = *g;
    if (g->M >= g->N) {
        const int panels = (g->M + MR - 1) / MR;
        const int r0 = (int)((long)panels * t / T) * MR, r1 = imin(g->M, (int)((long)panels * (t + 1) / T) * MR);
        s.M = r1 - r0, s.a += r0 * g->a_rs, s.c += r0 * g->ldc;
    } else {
        const int panels = (g->N + NR - 1) / NR;
        const int c0 = (int)((long)panels * t / T) * NR, c1 = imin(g->N, (int)((long)panels * (t + 1) / T) * NR);
        s.N = c1 - c0, s.b += c0 * g->b_cs, s.c += c0;
    }
    if (s.M > 0 && s.N > 0) gemm_alone(&s, scratch);
}

// The entry point named `name` (gemm_f32.h's contract).
#define GEMM_F32_ENTRY(name)                                                                            \
    void name(const gemm_f32_args *g, float *const *scratch, int threads) {                             \
        BG_ASSERT(g->M >= 0 && g->N >= 0 && g->K > 0);                                                  \
        if (g->M == 0 || g->N == 0) return;                                                             \
        if (threads <= 1 || omp_in_parallel()) {                                                        \
            gemm_alone(g, scratch[0]);                                                                  \
            return;                                                                                     \
        }                                                                                               \
        _Pragma("omp parallel num_threads(threads)")                                                    \
        gemm_share(g, scratch[omp_get_thread_num()], omp_get_thread_num(), omp_get_num_threads());      \
    }
