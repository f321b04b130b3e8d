// Training-step benchmark: median ms/step of a model config against this
// machine's measured peak and f32 (or bf16) GEMM rate at the step's precision, all in one run
// (each measured before and after the steps, the higher reading kept).
//   bench_step --config configs/m1.json --batch 8 --seq 256 --threads 2 --steps 10 [--dtype bf16]
//              [--gemm-alone 1]
// fp32 and fp16 (whose rounded operands run through the fp32 GEMM) are judged against
// the AVX-512 FMA peak and the f32 GEMM; bf16 against both the bf16 dot-product peak and
// the FMA peak, and the GEMM of its path (kernels/bf16_path.c: the bf16 GEMM, or the f32
// one on the fp32 path). --gemm-alone 1 records a warm-up step's GEMMs and, after each
// timed step, runs them alone (the same shapes in the same order), then flash
// attention's tile products alone: step time over those (medians) is the step's overhead
// beyond its GEMMs.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "bench_util.h"
#include "peak.h"
#include "train/adamw.h"
#include "train/grad_norm.h"


// The limits the step is judged against, at its precision.
static double instruction_peak(int bf16, int threads) {
    return bf16 ? peak_bf16_gflops(threads, 1.5) : peak_fma_gflops(threads, 1.5);
}
static double gemm_rate(int bf16) { return peak_gemm_gflops(2048, 5, bf16 ? BG_BF16 : BG_FP32); }

enum { TRACE_CAP = 1 << 16 };

static long page_faults(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt + r.ru_majflt;
}

// The step's attention tile products alone (flash attention's GEMMs: scores, P·V and
// their gradients), every layer's forward and backward, on zeros (qkv, dout and ws,
// allocated by attention_buffers). Seconds; *cpu_s the process's CPU seconds.
typedef struct {
    float *qkv, *dout, *ws;
} attention_buffers;

static attention_buffers attention_buffers_alloc(const model *m) {
    const model_config *c = &m->cfg;
    const int B = m->acts.B, T = m->acts.T, C = c->hidden_size, NH = c->num_attention_heads;
    const size_t ws_n = flash_attention_scratch_size(B, T, C, NH, model_kv_heads(c));
    return (attention_buffers){bg_calloc((size_t)B * T * model_qkv_width(c), sizeof(float)),
                               bg_calloc((size_t)B * T * C, sizeof(float)), bg_calloc(ws_n, sizeof(float))};
}

static double attention_products_alone(const model *m, const attention_buffers *z, double *cpu_s) {
    const model_config *c = &m->cfg;
    const int B = m->acts.B, T = m->acts.T, C = c->hidden_size, NH = c->num_attention_heads;
    const double t0 = bg_now(), c0 = bg_process_cpu_now();
    float sink = 0.0f;
    for (int pass = 0; pass < 2; pass++)
        for (int l = 0; l < c->num_hidden_layers; l++)
            sink += flash_attention_products_alone(m->kernels, z->ws, z->qkv, z->dout, B, T, C, NH,
                                                   model_kv_heads(c), pass);
    BG_ASSERT(sink == 0.0f);  // zeros in, zeros out: anything else is a broken product
    *cpu_s = bg_process_cpu_now() - c0;
    return bg_now() - t0;
}

int main(int argc, char **argv) {
    const char *config = "configs/m1.json";
    int B = 8, T = 256, threads = 2, steps = 10, warmup = 2;
    const char *dtype = "fp32";
    int gemm_profile = 0;  // 1: a table of the timed steps' GEMMs by shape
    int lm_chunk = -1;     // rows per fused LM-head chunk; -1: the model's default
    int gemm_alone = 0;    // 1: replay one step's GEMMs alone
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
        else if (!strcmp(argv[i], "--gemm-profile")) gemm_profile = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lm-chunk")) lm_chunk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gemm-alone")) gemm_alone = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_step: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    model_config cfg;
    if (model_config_load(&cfg, config) != BG_OK) {
        fprintf(stderr, "bench_step: %s\n", bg_last_error());
        return 2;
    }
    if (B <= 0 || T <= 0 || T > cfg.max_position_embeddings || steps <= 0 || threads <= 0) {
        fprintf(stderr, "bench_step: bad --batch/--seq/--steps/--threads\n");
        return 2;
    }
    bg_dtype prec;
    if (bg_dtype_parse(dtype, &prec) != 0) {
        fprintf(stderr, "bench_step: --dtype must be fp32, bf16 or fp16\n");
        return 2;
    }
    bg_threads_set(threads);
    int bf16 = prec == BG_BF16;
    double peak = instruction_peak(bf16, threads), gemm = gemm_rate(bf16);
    double fma = bf16 ? instruction_peak(0, threads) : peak;
    double fma_cpu = peak_fma_gflops_cpu(0.6);  // one thread, by its CPU time: load-proof

    model m;
    model_init(&m, &cfg, 1);
    kernel_ctx_set_precision(m.kernels, prec);
    if (lm_chunk >= 0) m.opt.lm_head_chunk = lm_chunk;
    model_prepare(&m, B, T);
    adamw_state opt;
    adamw_init(&opt, m.table.numel);
    adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 0.1f};
    int N = B * T;
    int *inputs = malloc(sizeof(int) * N), *targets = malloc(sizeof(int) * N);
    bg_rng rng;
    bg_rng_seed(&rng, 7);
    for (int i = 0; i < N; i++) {
        inputs[i] = (int)(bg_rng_u64(&rng) % cfg.vocab_size);
        targets[i] = (int)(bg_rng_u64(&rng) % cfg.vocab_size);
    }
    double *times = malloc(sizeof(double) * steps), fwd = 0, bwd = 0, opt_t = 0;
    double *cpu = malloc(sizeof(double) * steps);
    // --gemm-alone: the last warm-up step's GEMM calls are recorded, and after each timed
    // step they are replayed alone, then the attention products: medians against the
    // steps' medians, sampled over the same minutes (a shared host's slow spells reach
    // both alike).
    double *alone_t = calloc(steps, sizeof(double)), *alone_c = calloc(steps, sizeof(double));
    double *att_t = calloc(steps, sizeof(double)), *att_c = calloc(steps, sizeof(double));
    matmul_call *calls = gemm_alone ? malloc(sizeof *calls * TRACE_CAP) : NULL;
    attention_buffers att_z = {0};
    const int with_att = gemm_alone && m.acts.flash;
    if (with_att) att_z = attention_buffers_alloc(&m);
    if (gemm_alone && warmup < 1) warmup = 1;
    int traced = 0;
    matmul_replay_operands replay = {0};
    long faults = 0;  // over the timed steps alone
    for (int s = -warmup; s < steps; s++) {
        if (s == 0) matmul_profile(m.kernels, gemm_profile);
        if (gemm_alone && s == -1) matmul_trace(m.kernels, calls, TRACE_CAP);
        const long f0 = page_faults();
        double c0 = bg_process_cpu_now(), t0 = bg_now();
        model_forward(&m, inputs, targets);
        double t1 = bg_now();
        model_zero_grad(&m);
        model_backward(&m);
        double t2 = bg_now();
        if (gemm_alone && s == -1) {
            traced = matmul_trace_count(m.kernels);
            matmul_trace(m.kernels, NULL, 0);
            replay = matmul_replay_operands_alloc(calls, traced);
        }
        double norm = grad_global_norm(m.grads, m.table.numel);
        adamw_update(&opt, m.params, m.grads, &m.table, &hp, 1e-4f, norm > 1 ? (float)(1 / norm) : 1.0f);
        double t3 = bg_now();
        if (s >= 0) {
            faults += page_faults() - f0;
            times[s] = t3 - t0;
            cpu[s] = bg_process_cpu_now() - c0;
            fwd += t1 - t0, bwd += t2 - t1, opt_t += t3 - t2;
            if (gemm_alone) alone_t[s] = matmul_replay(m.kernels, calls, traced, &replay, &alone_c[s]);
            if (with_att) att_t[s] = attention_products_alone(&m, &att_z, &att_c[s]);
        }
    }
    if (gemm_profile) {
        printf("GEMMs of the %d timed steps:\n", steps);
        matmul_profile_print(m.kernels, stdout);
    }
    // The limits again, after the steps, keeping the higher readings: a burst of another
    // tenant's load during one measurement (seen: an FMA peak read at 185 instead of
    // ~225 GFLOP/s) would otherwise inflate the percentages below. The GEMM rate is left
    // alone while profiling, whose counters would take its calls in.
    free(calls);
    matmul_replay_operands_free(&replay);
    free(att_z.qkv), free(att_z.dout), free(att_z.ws);
    const double alone = bg_median(alone_t, steps), alone_cpu = bg_median(alone_c, steps);
    const double att_alone = bg_median(att_t, steps), att_alone_cpu = bg_median(att_c, steps);
    peak = fmax(peak, instruction_peak(bf16, threads));
    if (bf16) fma = fmax(fma, instruction_peak(0, threads));
    else fma = peak;
    fma_cpu = fmax(fma_cpu, peak_fma_gflops_cpu(0.6));
    if (!gemm_profile) gemm = fmax(gemm, gemm_rate(bf16));
    double med = bg_median(times, steps);
    bg_median(cpu, steps);  // sorted: cpu[steps / 2] and cpu[0] are read below
    double flops = model_flops_per_token(&cfg, T) * N;
    double achieved = flops / med / 1e9;
    const char *path = bf16 ? bf16_path_name(kernel_ctx_bf16_path(m.kernels)) : "-";
    if (bf16)
        printf("machine (%d threads): AVX512-BF16 dot-product peak %.1f GFLOP/s, %s peak %.1f GFLOP/s | "
               "oneDNN bf16 GEMM (path %s) 2048^3 %.1f GFLOP/s\n",
               threads, peak, peak_fma_name(), fma, path, gemm);
    else
        printf("machine (%d threads): %s peak %.1f GFLOP/s | f32 GEMM (%s) 2048^3 %.1f GFLOP/s\n",
               threads, peak_fma_name(), peak, gemm_f32_impl_name(kernel_ctx_gemm_f32(m.kernels)), gemm);
    printf("model %s (%s): %.1fM params, batch %d x %d, %.1f GFLOP per step\n", config, dtype,
           m.table.numel / 1e6, B, T, flops / 1e9);
    printf("train step: median %.1f ms (min %.1f, max %.1f, n=%d) | forward %.1f ms, backward %.1f ms, "
           "optimizer %.1f ms (means)\n",
           med * 1e3, times[0] * 1e3, times[steps - 1] * 1e3, steps, fwd / steps * 1e3,
           bwd / steps * 1e3, opt_t / steps * 1e3);
    printf("cpu time: median %.1f ms per step (all threads; min %.1f) | page faults per step %.0f\n",
           cpu[steps / 2] * 1e3, cpu[0] * 1e3, (double)faults / steps);
    // Work per CPU second against one core's peak: the step's efficiency whatever the load.
    printf("by cpu time: %.1f GFLOP/s per core | %.1f%% of the one-thread %s peak by CPU time (%.1f GFLOP/s)\n",
           flops / cpu[steps / 2] / 1e9, 100 * flops / cpu[steps / 2] / 1e9 / fma_cpu, peak_fma_name(), fma_cpu);
    printf("throughput: %.0f tokens/s | %.1f GFLOP/s | %.1f%% of %s peak | %.1f%% of GEMM rate",
           N / med, achieved, peak > 0 ? 100 * achieved / peak : 0.0, bf16 ? "bf16" : "FMA",
           100 * achieved / gemm);
    if (bf16) printf(" | %.1f%% of FMA peak", fma > 0 ? 100 * achieved / fma : 0.0);
    printf("\n");
    if (gemm_alone)
        printf("GEMMs alone: %.1f ms for one step's %d GEMMs | step / GEMMs alone %.3f | cpu time: "
               "%.1f ms, step / GEMMs alone %.3f\n",
               alone * 1e3, traced, med / alone, alone_cpu * 1e3, cpu[steps / 2] / alone_cpu);
    if (gemm_alone && att_alone > 0)
        printf("with attention products: %.1f ms more (flash attention's tile products alone, %d layers "
               "forward and backward) | step / GEMMs and attention products alone %.3f | cpu time: "
               "%.3f\n",
               att_alone * 1e3, cfg.num_hidden_layers, med / (alone + att_alone),
               cpu[steps / 2] / (alone_cpu + att_alone_cpu));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);  // ru_maxrss: KiB on Linux
    printf("peak memory (RSS of the process): %.0f MiB\n", ru.ru_maxrss / 1024.0);
    free(times), free(cpu), free(inputs), free(targets);
    free(alone_t), free(alone_c), free(att_t), free(att_c);
    adamw_free(&opt);
    model_free(&m);
    return 0;
}
