// The model's GEMM shapes through both f32 GEMMs (BAGUALU_GEMM's own, AVX-512 or AVX2, and
// oneDNN as this CPU runs it: onednn, or onednn-t without AVX-512), by CPU time, against
// the one-thread FMA peak measured in the same run.
//   bench_gemm [--threads 1] [--reps 3] [--shapes m1|m3|gpt2|all]
// GFLOP/s per core = flops / process CPU seconds (every thread of the team, spinning
// included), so a 2-thread figure is per core too and % of peak compares directly.
// Runs alternate own/onednn and report medians.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "kernels/gemm_f32.h"
#include "kernels/kernels.h"
#include "bench_util.h"
#include "core/timer.h"
#include "peak.h"


typedef struct {
    const char *model, *name;
    int M, K, N;
} shape;

// (M,K,N) as matmul_forward's: M rows of activations, K inputs, N outputs.
static const shape SHAPES[] = {
    {"m1", "qkv", 2048, 256, 768},
    {"m1", "expert", 512, 256, 1024},
    {"m1", "expert-out", 512, 1024, 256},
    {"m1", "lm-head", 1024, 256, 50257},
    {"m3", "qkv", 4096, 512, 1536},
    {"m3", "expert", 384, 512, 512},
    {"m3", "expert-out", 384, 256, 512},
    {"m3", "lm-head", 1024, 512, 32768},
    {"gpt2", "qkv", 256, 768, 2304},
    {"gpt2", "attn-out", 256, 768, 768},
    {"gpt2", "fc", 256, 768, 3072},
    {"gpt2", "fc-out", 256, 3072, 768},
    {"gpt2", "lm-head", 256, 768, 50257},
    {"gpt2", "fc-out", 2048, 3072, 768},
};

enum { KIND_FWD, KIND_DATA, KIND_WEIGHTS };
static const char *KIND_NAMES[] = {"forward", "data grad", "weights grad"};

static void run(kernel_ctx *kc, int kind, const shape *s, float *x, float *w, float *y, float *o) {
    if (kind == KIND_FWD) matmul_forward(kc, o, x, w, s->M, s->K, s->N);
    else if (kind == KIND_DATA) matmul_backward_op(kc, o, MATMUL_WRITE, NULL, matmul_floats(y), matmul_floats(x), w, s->M, s->K, s->N);
    else matmul_backward_op(kc, NULL, MATMUL_ADD, o, matmul_floats(y), matmul_floats(x), w, s->M, s->K, s->N);
}

int main(int argc, char **argv) {
    int threads = 1, reps = 3;
    const char *which = "all";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shapes")) which = argv[i + 1];
        else {
            fprintf(stderr, "bench_gemm: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (threads <= 0 || reps <= 0) {
        fprintf(stderr, "bench_gemm: bad --threads/--reps\n");
        return 2;
    }
    if (!gemm_f32_supported()) {
        fprintf(stderr, "bench_gemm: this CPU has neither AVX-512F nor AVX2 with FMA: only oneDNN's GEMM runs here\n");
        return 2;
    }
    // oneDNN as the CPU's table runs it: weights products on a transposed dout without AVX-512.
    const gemm_f32_impl dnn_impl = gemm_f32_avx512_supported() ? GEMM_F32_ONEDNN : GEMM_F32_ONEDNN_T;
    omp_set_num_threads(threads);
    const double peak = peak_fma_gflops_cpu(0.6);
    printf("threads %d, one-thread FMA peak by CPU time %.1f GFLOP/s, own kernel %s, oneDNN as %s\n", threads, peak,
           gemm_f32_avx512_supported() ? "AVX-512" : "AVX2", gemm_f32_impl_name(dnn_impl));
    printf("%-3s %-10s %-18s %-6s %7s %7s   %5s %5s  %s\n", "", "shape", "M x K x N", "kind", "own", "onednn", "own%", "dnn%", "own/onednn");
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const shape *s = &SHAPES[si];
        if (strcmp(which, "all") && strcmp(which, s->model)) continue;
        const size_t M = s->M, K = s->K, N = s->N;
        float *x = bg_aligned_alloc(M * K * 4), *w = bg_aligned_alloc(N * K * 4), *y = bg_aligned_alloc(M * N * 4);
        size_t on = M * N > M * K ? M * N : M * K;
        on = on > N * K ? on : N * K;
        float *o = bg_aligned_alloc(on * 4);
        for (size_t i = 0; i < M * K; i++) x[i] = 1e-3f * (float)(i % 7);
        for (size_t i = 0; i < N * K; i++) w[i] = 1e-3f * (float)(i % 5);
        for (size_t i = 0; i < M * N; i++) y[i] = 1e-3f * (float)(i % 3);
        memset(o, 0, on * 4);
        const double flops = 2.0 * M * K * N;
        // Enough calls per timing for ~0.1 s of work at 100 GFLOP/s.
        int calls = (int)(1e10 / flops);
        calls = calls < 1 ? 1 : calls;
        for (int kind = 0; kind < 3; kind++) {
            double t[2][16];
            for (int r = 0; r < reps && r < 16; r++)
                for (int impl = 0; impl < 2; impl++) {
                    kernel_ctx_set_gemm_f32(kc, impl == 0 ? GEMM_F32_OWN : dnn_impl);
                    run(kc, kind, s, x, w, y, o);  // warm: primitive, caches
                    const double t0 = bg_process_cpu_now();
                    for (int c = 0; c < calls; c++) run(kc, kind, s, x, w, y, o);
                    t[impl][r] = (bg_process_cpu_now() - t0) / calls;
                }
            const int n = reps < 16 ? reps : 16;
            const double own = flops / bg_median(t[0], n) / 1e9, dnn = flops / bg_median(t[1], n) / 1e9;
            char dims[32];
            snprintf(dims, sizeof dims, "%dx%dx%d", s->M, s->K, s->N);
            printf("%-3s %-10s %-18s %-12s %7.1f %7.1f   %4.0f%% %4.0f%%  %.2f\n", s->model, s->name, dims,
                   KIND_NAMES[kind], own, dnn, 100 * own / peak, 100 * dnn / peak, own / dnn);
            fflush(stdout);
        }
        free(x), free(w), free(y), free(o);
    }
    kernel_ctx_free(kc);
    return 0;
}
