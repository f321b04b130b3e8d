// Memory-efficient causal self-attention: the FlashAttention algorithm on CPU cores.
//
// The forward walks the keys in blocks of FA_B with an online softmax (running row
// max m and row sum l, the partial output rescaled by e^{m_old - m_new} when the max
// grows), so no T×T matrix exists; it keeps only lse = m + log l per query row. The
// backward (FlashAttention-2) recomputes P = exp(S - lse) tile by tile, with
// D = rowsum(dO ∘ O) and dS = P ∘ (dP - D):
//   dV = Pᵀ dO,  dK = scale · dSᵀ Q,  dQ = scale · dS K.
//
// Every product is one of two register-blocked tile products (flash_attention_tiles.h):
//   tile_xyt:  A (n, FA_B)  = X (n, hs) · Yt (hs, FA_B)      scores S and dP
//   tile_xtw:  Zt (hs, FA_B) += X (n, hs)ᵀ · W (n, FA_B)     O, dQ, dK, dV
// X is always read in place from qkv or dout (rows of stride C+2·KV or C, one scalar
// broadcast at a time); only the operand read as vectors is packed, transposed, into
// a small tile on the stack. Softmax statistics are then vectors over query rows (the
// forward keeps Sᵀ, keys × queries), so the online softmax has no horizontal sums.
//
// Mixed precision (kc's precision BG_BF16 on the native bf16 path, on CPUs with AVX512-BF16
// and an even hs; otherwise bf16 runs the fp32 tiles on bf16-rounded copies): the tile
// products read their operands as bf16 pairs along the reduction dimension and add in
// fp32 (vdpbf16ps: two multiply-adds per lane and instruction, twice the FMA rate), as
// the GEMMs do under autocast; scores, softmax statistics, P and dS are computed in
// fp32 and rounded only as product operands. Rounded copies of qkv and dout are made
// once per call in the workspace, in the two layouts the products read: rows of
// channel pairs (the broadcast operand of tile_xyt, and the rows packed transposed
// into its vector operand) and token pairs interleaved channel by channel (the
// broadcast operand of tile_xtw, whose reduction runs over tokens).
//
// Work is split into tasks that each write disjoint outputs (no atomics), so results
// are deterministic:
// Grouped-query attention: query head h reads key/value head h / G (G = NH/NKV), so
// the dK and dV of a key/value head sum over its G query heads, head by head.
//   forward:  one task per (b, h, query block).
//   backward: dK and dV of a key block sum over the group's query blocks at or after
//             it, dQ of a query block over the key blocks up to it. Two schedules:
//     per head:  one task per (b, kv head) walks its key blocks and, for each, the
//                group's query blocks after it: 5 tile products per (query, key)
//                block pair, dQ collected in the caller's scratch. B·NKV tasks.
//     two pass:  one task per (b, kv head, key block) for dK, dV, then one per (b, h,
//                query block) for dQ, which recomputes P and dP: 7 products per
//                pair, but B·NH·T/64 tasks.
//   The per-head schedule runs when B·NKV tasks keep the threads about as busy as
//   the finer one would (see flash_attention_backward). Both add the same numbers in
//   the same order, so the results are bitwise equal and do not depend on the thread
//   count either (tested).
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "core/error.h"
#include "core/half.h"
#include "kernels/flash_attention_amx.h"
#include "kernels/flash_attention_tiles.h"
#include "kernels/vecmath.h"

// The tiles live on the stack (the kernels allocate nothing) and scale with hs: at
// this bound 304 KiB per thread, 376 KiB with the bf16 operand tiles, well inside the
// 2 MiB or more that OpenMP threads get by default.
enum { FA_MAX_HS = 256 };
_Static_assert((int)FA_AMX_B == (int)FA_B && (int)FA_AMX_MAX_HS == (int)FA_MAX_HS, "flash_attention_amx.h's sizes");

// Sets to `value` the entries of an Sᵀ tile (n keys × FA_B queries: key k0+c, query
// q0+r) whose key comes after its query.
static void mask_keys_by_query(float *St, int n, int k0, int q0, float value) {
    for (int c = 0; c < n; c++) {
        float *s = St + (size_t)c * FA_B;
        // key k0+c is visible to queries r >= k0+c-q0
        int first = k0 + c - q0;
        for (int r = 0; r < FA_B && r < first; r++) s[r] = value;
    }
}

static inline int imin(int a, int b) { return a < b ? a : b; }

// y[i] = bg_expf(s[i]·scale - shift_i) for i < FA_B, shift_i = shift[i] (a vector) or
// shift1 (shift NULL): the softmax's exponentials, in vf_exp where the build has AVX-512
// or AVX2 (the same bits; GCC's vectorisation of bg_expf takes ~24 instructions a vector
// against 15). The product and the difference are rounded separately, as in the scalar
// expression.
static inline void fa_exp_scaled(float *y, const float *s, float scale, const float *shift,
                                 float shift1) {
#if defined(VF_LANES)
    _Static_assert(FA_B % VF_LANES == 0, "whole vectors of keys");
    const vf sc = vf_set1(scale), s1 = vf_set1(shift1);
    for (int i = 0; i < FA_B; i += VF_LANES) {
        const vf sh = shift ? vf_load(shift + i) : s1;
        vf_store(y + i, vf_exp(vf_sub(vf_mul(vf_load(s + i), sc), sh)));
    }
#else
    #pragma omp simd
    for (int i = 0; i < FA_B; i++) y[i] = bg_expf(s[i] * scale - (shift ? shift[i] : shift1));
#endif
}

// ---- operands ---------------------------------------------------------------------

// Where the tile products read Q, K, V (in qkv) and dO (in dout).
typedef enum { FA_Q = 0, FA_K = 1, FA_V = 2, FA_DO = 3 } fa_src;

// A call's inputs: fp32, and with bf16 products their rounded copies (round_copies);
// with bf16 on the fp32 path (round), fp32 copies holding bf16 values, which the fp32
// products read instead of the inputs (qkv_p, dout_p).
typedef struct {
    const float *qkv, *dout, *qkv_p, *dout_p;
    int T, C, NH, hs;
    int G, KV, W;  // query heads per key/value head, k's width NKV·hs, qkv's C+2·KV
    int bf16, round, amx;  // amx: the bf16 products on AMX tiles (flash_attention_amx.c)
    bf16x2 *qkv2, *qkvi, *dout2, *douti;
    float *qkv_r, *dout_r;
} fa_ops;

// The row width of src's tensor (C+2·KV for qkv, C for dout) and the column where head
// h's slice of src starts (a key/value head for FA_K and FA_V): the same for the fp32
// rows and both rounded copies.
static size_t fa_width(const fa_ops *o, fa_src s) { return s == FA_DO ? (size_t)o->C : (size_t)o->W; }
static size_t fa_col(const fa_ops *o, fa_src s, int h) {
    const size_t start = s == FA_K ? (size_t)o->C : s == FA_V ? (size_t)o->C + o->KV : 0;
    return start + (size_t)h * o->hs;
}

// Rows r0.. of src for head h of batch b: fp32 (stride *ld floats).
static const float *fa_rows(const fa_ops *o, fa_src s, int b, int h, int r0, size_t *ld) {
    *ld = fa_width(o, s);
    return (s == FA_DO ? o->dout_p : o->qkv_p) + ((size_t)b * o->T + r0) * *ld + fa_col(o, s, h);
}

// The same rows as channel pairs (stride *ld pairs).
static const bf16x2 *fa_rows2(const fa_ops *o, fa_src s, int b, int h, int r0, size_t *ld) {
    *ld = fa_width(o, s) / 2;
    return (s == FA_DO ? o->dout2 : o->qkv2) + ((size_t)b * o->T + r0) * *ld + fa_col(o, s, h) / 2;
}

#if FA_HAVE_BF16
// The same rows interleaved in token pairs (r0 even; stride *ld words per pair).
static const bf16x2 *fa_rows_interleaved(const fa_ops *o, fa_src s, int b, int h, int r0, size_t *ld) {
    *ld = fa_width(o, s);
    return (s == FA_DO ? o->douti : o->qkvi) + ((size_t)b * ((o->T + 1) / 2) + r0 / 2) * *ld +
           fa_col(o, s, h);
}
#endif

// A packed vector operand: Yt (hs, FA_B) floats, or Y2 (hs/2, FA_B) pairs under bf16.
typedef struct {
    float *f;
    bf16x2 *p;
} fa_tile;

// The tile's operand = n rows of src from r0, transposed (pack_transposed).
static void fa_pack(const fa_ops *o, fa_tile y, fa_src s, int b, int h, int r0, int n) {
    size_t ld;
    if (o->bf16) {
        const bf16x2 *x = fa_rows2(o, s, b, h, r0, &ld);
        pack_pairs_transposed(y.p, x, ld, n, o->hs / 2);
    } else {
        const float *x = fa_rows(o, s, b, h, r0, &ld);
        pack_transposed(y.f, x, ld, n, o->hs);
    }
}

// A (n, FA_B) = rows r0..r0+n-1 of src · y (tile_xyt).
static void fa_xyt(const fa_ops *o, float *A, fa_src s, int b, int h, int r0, int n, fa_tile y) {
    size_t ld;
    if (o->bf16) {
#if FA_HAVE_BF16
        const bf16x2 *x = fa_rows2(o, s, b, h, r0, &ld);
        if (o->amx) fa_amx_xyt(A, x, ld, y.p, n, o->hs / 2);
        else tile_xyt_bf16(A, x, ld, y.p, n, o->hs / 2);
#endif
        return;
    }
    const float *x = fa_rows(o, s, b, h, r0, &ld);
    tile_xyt(A, x, ld, y.f, n, o->hs);
}

// Zt (hs, FA_B) += (rows r0..r0+n-1 of src)ᵀ · W (n, FA_B) (tile_xtw); under bf16, W
// is rounded into w2 (FA_B/2 rows of FA_B pairs) first; on the fp32 path with rounding,
// into w2 read as n rows of FA_B floats (fa_w2_words).
static void fa_xtw(const fa_ops *o, float *Zt, fa_src s, int b, int h, int r0, int n,
                   const float *W, bf16x2 *w2) {
    size_t ld;
    if (o->bf16) {
#if FA_HAVE_BF16
        round_row_pairs(w2, W, n);
        const bf16x2 *x = fa_rows_interleaved(o, s, b, h, r0, &ld);
        if (o->amx) fa_amx_xtw(Zt, x, ld, w2, (n + 1) / 2, o->hs);
        else tile_xtw_bf16(Zt, x, ld, w2, (n + 1) / 2, o->hs);
#else
        (void)w2;
#endif
        return;
    }
    const float *x = fa_rows(o, s, b, h, r0, &ld);
    if (o->round) {
        float *wr = (float *)w2;
        for (size_t i = 0; i < (size_t)n * FA_B; i++) wr[i] = bg_bf16_to_f32(bg_f32_to_bf16(W[i]));
        W = wr;
    }
    tile_xtw(Zt, x, ld, W, n, o->hs);
}

// The words of the w2 tile fa_xtw takes.
static int fa_w2_words(const fa_ops *o) {
    return o->bf16 ? FA_B / 2 * FA_B : o->round ? FA_B * FA_B : 1;
}

// Sets up o for a call; under bf16 (when built with AVX512-BF16 and hs is even) the
// rounded copies live in ws, and are made by fa_round_inputs inside the call's
// parallel region.
// The tile products' operands: OPERAND_BF16 (bf16 pairs), OPERAND_BF16_IN_F32 (fp32
// tiles on rounded copies) or OPERAND_F32, from kc's precision and bf16 path.
static operand_format fa_tiles(const kernel_ctx *kc) {
    if (kernel_ctx_precision(kc) != BG_BF16) return OPERAND_F32;
    const bf16_path path = kernel_ctx_bf16_path(kc);
    return path == BF16_PATH_NATIVE || path == BF16_PATH_AMX ? OPERAND_BF16 : OPERAND_BF16_IN_F32;
}

// The amx path's pairs go to AMX tiles where hs fills whole tile columns (a multiple of
// 32) and the process may use them; other head sizes take the fp32 tiles on rounded
// copies, as native-gemm: the CPUs of this path run vdpbf16ps at half the FMA rate.
static void fa_ops_init(fa_ops *o, const float *qkv, const float *dout, int B, int T, int C,
                        int NH, int NKV, const kernel_ctx *kc, float *ws) {
    const operand_format p = fa_tiles(kc);
    const int want_amx = p == OPERAND_BF16 && kernel_ctx_bf16_path(kc) == BF16_PATH_AMX;
    o->qkv = qkv, o->dout = dout, o->T = T, o->C = C, o->NH = NH, o->hs = C / NH;
    o->G = NH / NKV, o->KV = NKV * o->hs, o->W = C + 2 * o->KV;
    o->amx = want_amx && FA_HAVE_BF16 && o->hs % 32 == 0 && fa_amx_usable();
    o->bf16 = FA_HAVE_BF16 && p == OPERAND_BF16 && o->hs % 2 == 0 && (!want_amx || o->amx);
    o->round = (p == OPERAND_BF16 || p == OPERAND_BF16_IN_F32) && !o->bf16;
    // The fp32 copies take B·T·(W+C) floats of the same workspace (fa_copies_words).
    o->qkv_r = ws, o->dout_r = ws + (size_t)B * T * (size_t)o->W;
    o->qkv_p = o->round ? o->qkv_r : qkv;
    o->dout_p = o->round && dout ? o->dout_r : dout;
    const size_t rows = (size_t)B * (size_t)(T + 1);  // pairs of T rounded up, and T rows
    bf16x2 *w = (bf16x2 *)ws;
    o->qkv2 = w, w += rows * (size_t)o->W / 2;
    o->qkvi = w, w += rows * (size_t)o->W / 2;
    o->dout2 = w, w += rows * (size_t)C / 2;
    o->douti = w;
}

// The words fa_ops_init may use: (B·(T+1))·(W/2 + W/2 + C/2 + C/2) = B·(T+1)·(W+C),
// W = C + 2·NKV·hs.
static size_t fa_copies_words(int B, int T, int C, int NH, int NKV) {
    return (size_t)B * (T + 1) * ((size_t)C + 2 * (size_t)NKV * (C / NH) + C);
}

// The backward rounds qkv again although its layer's forward did: the workspace is
// shared by all layers, and keeping each layer's copies would hold a second qkv per
// layer; the second rounding costs far less than that memory (BENCHMARKS.md).
static void fa_round_inputs(const fa_ops *o, int B, int with_dout) {
    if (o->round) {
        const size_t nq = (size_t)B * o->T * o->W, nd = (size_t)B * o->T * o->C;
        #pragma omp for simd schedule(static)
        for (size_t i = 0; i < nq; i++) o->qkv_r[i] = bg_bf16_to_f32(bg_f32_to_bf16(o->qkv[i]));
        if (with_dout) {
            #pragma omp for simd schedule(static)
            for (size_t i = 0; i < nd; i++) o->dout_r[i] = bg_bf16_to_f32(bg_f32_to_bf16(o->dout[i]));
        }
        return;
    }
#if FA_HAVE_BF16
    if (!o->bf16) return;
    round_copies(o->qkv2, o->qkvi, o->qkv, B, o->T, o->W);
    if (with_dout) round_copies(o->dout2, o->douti, o->dout, B, o->T, o->C);
#else
    (void)o, (void)B, (void)with_dout;
#endif
}

// ---- forward ----------------------------------------------------------------------

// One (b, h, query block): out rows q0..q0+nq-1 of head h, and their lse.
static void fa_forward_block(float *out, float *lse, const fa_ops *o, int b, int h, int qb) {
    const int T = o->T, C = o->C, NH = o->NH, hs = o->hs, q0 = qb * FA_B, nq = imin(FA_B, T - q0);
    const float scale = 1.0f / sqrtf((float)hs);
    const int hp = o->bf16 ? hs / 2 : 1;

    float Qt[hs * FA_B], Ot[hs * FA_B], St[FA_B * FA_B];
    bf16x2 Q2[hp * FA_B], W2[fa_w2_words(o)];
    float m[FA_B], l[FA_B], mnew[FA_B], corr[FA_B];
    const fa_tile q = {Qt, Q2};
    fa_pack(o, q, FA_Q, b, h, q0, nq);
    for (int i = 0; i < hs * FA_B; i++) Ot[i] = 0.0f;
    for (int r = 0; r < FA_B; r++) m[r] = -FLT_MAX, l[r] = 0.0f;

    const int kend = q0 + nq;  // the last row sees keys 0..q0+nq-1
    for (int k0 = 0; k0 < kend; k0 += FA_B) {
        const int nk = imin(FA_B, kend - k0);
        const int diag = k0 + nk - 1 > q0;  // some key lies after some query
        fa_xyt(o, St, FA_K, b, h / o->G, k0, nk, q);  // St[c][r] = k·q
        if (diag) mask_keys_by_query(St, nk, k0, q0, -FLT_MAX);
        // Online softmax, vectorised over the block's query rows.
        for (int r = 0; r < FA_B; r++) mnew[r] = m[r];
        for (int c = 0; c < nk; c++) {
            const float *s = St + (size_t)c * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) {
                const float x = s[r] * scale;
                mnew[r] = x > mnew[r] ? x : mnew[r];
            }
        }
        // The first block contains key 0, visible to every query, so mnew is finite
        // from then on and e^{m - mnew} is e^{-FLT_MAX} → 0 (clamped by bg_expf to
        // 1e-38, times l = 0 and O = 0) for the first block, as it should be.
        #pragma omp simd
        for (int r = 0; r < FA_B; r++) {
            corr[r] = bg_expf(m[r] - mnew[r]);
            l[r] *= corr[r];
            m[r] = mnew[r];
        }
        for (int c = 0; c < nk; c++) fa_exp_scaled(St + (size_t)c * FA_B, St + (size_t)c * FA_B, scale, m, 0.0f);
        // Masked scores gave e^{-big} = 1e-38 through bg_expf's clamp, not 0: zero
        // them so that keys after the query contribute exactly nothing.
        if (diag) mask_keys_by_query(St, nk, k0, q0, 0.0f);
        for (int c = 0; c < nk; c++) {
            const float *s = St + (size_t)c * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) l[r] += s[r];
        }
        for (int d = 0; d < hs; d++) {
            float *o_ = Ot + (size_t)d * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) o_[r] *= corr[r];
        }
        fa_xtw(o, Ot, FA_V, b, h / o->G, k0, nk, St, W2);  // O += Pᵀ-weighted values
    }
    float *lrow = lse + ((size_t)b * NH + h) * T + q0;
    float *O = Qt;  // Qt is done with: it takes O row-major, (nq, hs)
    v16_transpose_block(O, hs, Ot, FA_B, hs, nq);
    for (int r = 0; r < nq; r++) {
        lrow[r] = m[r] + logf(l[r]);
        const float inv = 1.0f / l[r];
        float *y = out + ((size_t)b * T + q0 + r) * C + (size_t)h * hs;
        const float *orow = O + (size_t)r * hs;
        #pragma omp simd
        for (int d = 0; d < hs; d++) y[d] = orow[d] * inv;
    }
}

// qkv (B,T,C+2·KV), out (B,T,C) writes, lse (B,NH,T) writes
void flash_attention_forward(const kernel_ctx *kc, float *out, float *lse, float *scratch,
                             const float *qkv, int B, int T, int C, int NH, int NKV) {
    BG_ASSERT(C % NH == 0 && C / NH <= FA_MAX_HS && NKV > 0 && NH % NKV == 0);
    const int nb = (T + FA_B - 1) / FA_B;
    const long BH = (long)B * NH;
    fa_ops o;
    fa_ops_init(&o, qkv, NULL, B, T, C, NH, NKV, kc, scratch);
    #pragma omp parallel
    {
        fa_round_inputs(&o, B, 0);
        // Later query blocks see more keys: they are handed out first, dynamically, so
        // the threads finish together. The order cannot change results (tasks are
        // disjoint).
        #pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < BH * nb; task++) {
            const int qb = nb - 1 - (int)(task / BH);
            const long bh = task % BH;
            fa_forward_block(out, lse, &o, (int)(bh / NH), (int)(bh % NH), qb);
        }
    }
}

// ---- backward ---------------------------------------------------------------------

// Rows 0..n-1 of dst (hs floats each, row stride ld) += scale · Gt (hs, FA_B) transposed,
// through G ((n, hs) workspace): how every gradient tile (dQᵀ, dKᵀ, dVᵀ) reaches dqkv.
// Both backward schedules end with it, so they add the same numbers the same way.
static void add_transposed(float *dst, size_t ld, float *G, const float *Gt, int n, int hs,
                           float scale) {
    v16_transpose_block(G, hs, Gt, FA_B, hs, n);
    for (int r = 0; r < n; r++) {
        float *y = dst + (size_t)r * ld;
        const float *g = G + (size_t)r * hs;
        #pragma omp simd
        for (int d = 0; d < hs; d++) y[d] += g[d] * scale;
    }
}

// Head h's slice of token t0 in dqkv (B,T,W), from column col (0: dQ; C + kh·hs: dK of
// key/value head kh, whose dV follows at +KV).
static float *dqkv_rows(const fa_ops *o, float *dqkv, int b, size_t col, int t0) {
    return dqkv + ((size_t)b * o->T + t0) * (size_t)o->W + col;
}
static float *dq_rows(const fa_ops *o, float *dqkv, int b, int h, int t0) {
    return dqkv_rows(o, dqkv, b, (size_t)h * o->hs, t0);
}

// One (b, kv head kh, key block): dK and dV of keys k0..k0+nk-1, from every query of
// the group's heads at or after them. Tiles are row-major here (queries × keys): the
// vectors run over keys, so dKᵀ and dVᵀ accumulate in registers over the heads and
// queries. With dq_acc (the group's dQᵀ accumulators, head by head one (hs, FA_B) tile
// per query block), also adds this key block's part of dQ there, exactly as
// fa_backward_q_block would.
static void fa_backward_kv_block(float *dqkv, float *dq_acc, const float *delta, const fa_ops *o,
                                 const float *lse, int b, int kh, int kb) {
    const int T = o->T, C = o->C, NH = o->NH, hs = o->hs, k0 = kb * FA_B, nk = imin(FA_B, T - k0);
    const int nb = (T + FA_B - 1) / FA_B;
    const float scale = 1.0f / sqrtf((float)hs);
    const int hp = o->bf16 ? hs / 2 : 1;

    float Kt[hs * FA_B], Vt[hs * FA_B], dKt[hs * FA_B], dVt[hs * FA_B];
    float P[FA_B * FA_B], dS[FA_B * FA_B], dSt[FA_B * FA_B];
    bf16x2 K2[hp * FA_B], V2[hp * FA_B], W2[fa_w2_words(o)];
    const fa_tile k = {Kt, K2}, v = {Vt, V2};
    fa_pack(o, k, FA_K, b, kh, k0, nk);
    fa_pack(o, v, FA_V, b, kh, k0, nk);
    for (int i = 0; i < hs * FA_B; i++) dKt[i] = 0.0f, dVt[i] = 0.0f;

    for (int h = kh * o->G; h < (kh + 1) * o->G; h++) {
        const float *lrow = lse + ((size_t)b * NH + h) * T, *drow = delta + ((size_t)b * NH + h) * T;
        float *dq_head = dq_acc ? dq_acc + (size_t)(h - kh * o->G) * nb * hs * FA_B : NULL;
        for (int q0 = k0; q0 < T; q0 += FA_B) {
            const int nq = imin(FA_B, T - q0);
            fa_xyt(o, P, FA_Q, b, h, q0, nq, k);    // S[r][c] = q·k
            fa_xyt(o, dS, FA_DO, b, h, q0, nq, v);  // dP[r][c] = dO·v
            for (int r = 0; r < nq; r++) {
                float *p = P + (size_t)r * FA_B, *ds = dS + (size_t)r * FA_B;
                const float L = lrow[q0 + r], D = drow[q0 + r];
                fa_exp_scaled(p, p, scale, NULL, L);
                #pragma omp simd
                for (int c = 0; c < FA_B; c++) ds[c] = p[c] * (ds[c] - D);
                // Keys after this query, and the padding past the last key, contribute
                // nothing: P (and so dS) is exactly 0 there.
                for (int c = imin(nk, q0 + r - k0 + 1); c < FA_B; c++) p[c] = 0.0f, ds[c] = 0.0f;
            }
            fa_xtw(o, dVt, FA_DO, b, h, q0, nq, P, W2);  // dVᵀ += dOᵀ P
            fa_xtw(o, dKt, FA_Q, b, h, q0, nq, dS, W2);  // dKᵀ += Qᵀ dS
            if (dq_head) {
                // dQᵀ += Kᵀ dSᵀ. dS equals, bit for bit, the dSᵀ fa_backward_q_block
                // computes (the same products, sums and exps), and padded queries get 0
                // there too.
                pack_transposed(dSt, dS, FA_B, nq, nk);
                fa_xtw(o, dq_head + (size_t)(q0 / FA_B) * hs * FA_B, FA_K, b, kh, k0, nk, dSt, W2);
            }
        }
    }
    // Kt and Vt are done with: they take dK and dV row-major.
    float *dk = dqkv_rows(o, dqkv, b, (size_t)C + (size_t)kh * hs, k0);
    add_transposed(dk, o->W, Kt, dKt, nk, hs, scale);
    add_transposed(dk + o->KV, o->W, Vt, dVt, nk, hs, 1.0f);  // g·1 + y: the plain sum, exactly
}

// One (b, h, query block): dQ of queries q0..q0+nq-1 over keys 0..q0+nq-1, in the
// forward's transposed layout (keys × queries, vectors over queries).
static void fa_backward_q_block(float *dqkv, const float *delta, const fa_ops *o,
                                const float *lse, int b, int h, int qb) {
    const int T = o->T, NH = o->NH, hs = o->hs, q0 = qb * FA_B, nq = imin(FA_B, T - q0);
    const int kh = h / o->G;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *lrow = lse + ((size_t)b * NH + h) * T, *drow = delta + ((size_t)b * NH + h) * T;
    const int hp = o->bf16 ? hs / 2 : 1;

    float Qt[hs * FA_B], dOt[hs * FA_B], dQt[hs * FA_B];
    float St[FA_B * FA_B], dSt[FA_B * FA_B], L[FA_B], D[FA_B];
    bf16x2 Q2[hp * FA_B], dO2[hp * FA_B], W2[fa_w2_words(o)];
    const fa_tile q = {Qt, Q2}, dout = {dOt, dO2};
    fa_pack(o, q, FA_Q, b, h, q0, nq);
    fa_pack(o, dout, FA_DO, b, h, q0, nq);
    for (int i = 0; i < hs * FA_B; i++) dQt[i] = 0.0f;
    // Padding lanes: q = dO = 0 and L = D = 0 give P = 1, dS = 1·(0 - 0) = 0.
    for (int r = 0; r < FA_B; r++) {
        L[r] = r < nq ? lrow[q0 + r] : 0.0f;
        D[r] = r < nq ? drow[q0 + r] : 0.0f;
    }
    const int kend = q0 + nq;
    for (int k0 = 0; k0 < kend; k0 += FA_B) {
        const int nk = imin(FA_B, kend - k0);
        fa_xyt(o, St, FA_K, b, kh, k0, nk, q);      // Sᵀ[c][r] = k·q
        fa_xyt(o, dSt, FA_V, b, kh, k0, nk, dout);  // dPᵀ[c][r] = v·dO
        for (int c = 0; c < nk; c++) {
            float *ds = dSt + (size_t)c * FA_B, e[FA_B];
            fa_exp_scaled(e, St + (size_t)c * FA_B, scale, L, 0.0f);
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) ds[r] = e[r] * (ds[r] - D[r]);
        }
        if (k0 + nk - 1 > q0) mask_keys_by_query(dSt, nk, k0, q0, 0.0f);
        fa_xtw(o, dQt, FA_K, b, kh, k0, nk, dSt, W2);  // dQᵀ += Kᵀ dSᵀ
    }
    add_transposed(dq_rows(o, dqkv, b, h, q0), o->W, Qt, dQt, nq, hs, scale);
}

// One (b, kv head kh), the per-head schedule: every key block in turn, the dQ parts of
// the group's heads collected in dq_acc (G·nb tiles of (hs, FA_B)) in the order
// fa_backward_q_block adds them.
static void fa_backward_head(float *dqkv, float *dq_acc, const float *delta, const fa_ops *o,
                             const float *lse, int b, int kh) {
    const int T = o->T, hs = o->hs, nb = (T + FA_B - 1) / FA_B;
    const float scale = 1.0f / sqrtf((float)hs);
    for (size_t i = 0; i < (size_t)o->G * nb * hs * FA_B; i++) dq_acc[i] = 0.0f;
    for (int kb = 0; kb < nb; kb++) fa_backward_kv_block(dqkv, dq_acc, delta, o, lse, b, kh, kb);
    float dQ[hs * FA_B];
    for (int j = 0; j < o->G; j++)
        for (int qb = 0; qb < nb; qb++) {
            const int q0 = qb * FA_B, nq = imin(FA_B, T - q0);
            add_transposed(dq_rows(o, dqkv, b, kh * o->G + j, q0), o->W, dQ,
                           dq_acc + ((size_t)j * nb + qb) * hs * FA_B, nq, hs, scale);
        }
}

// The backward's own part of the workspace: delta (B,NH,T), then dQᵀ tiles for every
// (b, h): (B,NH,nb,hs,FA_B). The rounded copies follow it.
static size_t fa_backward_floats(int B, int T, int C, int NH) {
    const size_t nb = ((size_t)T + FA_B - 1) / FA_B;
    return (size_t)B * NH * T + (size_t)B * NH * nb * (C / NH) * FA_B;
}

size_t flash_attention_scratch_size(int B, int T, int C, int NH, int NKV) {
    // Words of the rounded copies counted as floats (both are 4 bytes).
    return fa_backward_floats(B, T, C, NH) + fa_copies_words(B, T, C, NH, NKV);
}

// Per head, each thread gets ceil(BK/P) of BK = B·NKV equal tasks, 5 products per block
// pair; in two passes about BK/P heads' worth of 7 products (the tasks are small
// enough to balance). The per-head schedule wins when 5·ceil(BK/P) <= 7·BK/P.
static int fa_backward_per_head(long BK) {
    const long P = omp_get_max_threads();
    return 5 * ((BK + P - 1) / P) * P <= 7 * BK;
}

// dout (B,T,C), out (B,T,C) and lse (B,NH,T) from the forward; dqkv (B,T,C+2·KV) +=;
// scratch (flash_attention_scratch_size floats) is workspace.
void flash_attention_backward(const kernel_ctx *kc, float *dqkv, float *scratch,
                              const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int C, int NH, int NKV) {
    BG_ASSERT(C % NH == 0 && C / NH <= FA_MAX_HS && NKV > 0 && NH % NKV == 0);
    const int hs = C / NH, nb = (T + FA_B - 1) / FA_B, G = NH / NKV;
    const long BH = (long)B * NH, BK = (long)B * NKV;
    float *delta = scratch, *dq_acc = scratch + (size_t)B * NH * T;
    fa_ops o;
    fa_ops_init(&o, qkv, dout, B, T, C, NH, NKV, kc,
                scratch + fa_backward_floats(B, T, C, NH));
    const int per_head = fa_backward_per_head(BK);
    #pragma omp parallel
    {
        fa_round_inputs(&o, B, 1);
        // D = rowsum(dO ∘ O) per (b, h, t): the Σ_c P·dP term of the softmax backward,
        // computed once from the output instead of once per key block.
        #pragma omp for schedule(static)
        for (long bt = 0; bt < (long)B * T; bt++) {
            const int b = (int)(bt / T), t = (int)(bt % T);
            for (int h = 0; h < NH; h++) {
                const float *y = out + (size_t)bt * C + (size_t)h * hs;
                const float *g = dout + (size_t)bt * C + (size_t)h * hs;
                float s = 0.0f;
                #pragma omp simd reduction(+ : s)
                for (int d = 0; d < hs; d++) s += y[d] * g[d];
                delta[((size_t)b * NH + h) * T + t] = s;
            }
        }
        if (per_head) {
            // (b, kh)'s query heads are b·NH + kh·G.., so its dQ tiles are contiguous.
            #pragma omp for schedule(dynamic, 1)
            for (long bk = 0; bk < BK; bk++)
                fa_backward_head(dqkv, dq_acc + (size_t)bk * G * nb * hs * FA_B, delta, &o, lse,
                                 (int)(bk / NKV), (int)(bk % NKV));
        } else {
            // Early key blocks are seen by the most queries: they go first.
            #pragma omp for schedule(dynamic, 1)
            for (long task = 0; task < BK * nb; task++) {
                const long bk = task % BK;
                fa_backward_kv_block(dqkv, NULL, delta, &o, lse, (int)(bk / NKV), (int)(bk % NKV),
                                     (int)(task / BK));
            }
            #pragma omp for schedule(dynamic, 1)
            for (long task = 0; task < BH * nb; task++) {
                const long bh = task % BH;
                fa_backward_q_block(dqkv, delta, &o, lse, (int)(bh / NH), (int)(bh % NH),
                                    nb - 1 - (int)(task / BH));
            }
        }
    }
}

// ---- the tile products alone ---------------------------------------------------------
// What bench_step --gemm-alone counts as the attention's GEMMs: every task's tile
// products at their shapes, in the call's schedule, without the softmax, the masks, the
// packing and the write-back around them. Operand tiles are zeros (no subnormals); each
// task's last accumulator goes to sink so that no product is dead code.

static void fa_zero_tiles(float *f, size_t nf, bf16x2 *p, size_t np) {
    for (size_t i = 0; i < nf; i++) f[i] = 0.0f;
    for (size_t i = 0; i < np; i++) p[i] = 0;
}

// A query block's products per key block: fa_forward_block's S and P·V (backward 0),
// or fa_backward_q_block's S, dP and dQ.
static float fa_products_q_block(const fa_ops *o, int b, int h, int qb, int backward) {
    const int hs = o->hs, q0 = qb * FA_B, kend = q0 + imin(FA_B, o->T - q0), hp = o->bf16 ? hs / 2 : 1;
    float Qt[hs * FA_B], Zt[hs * FA_B], St[FA_B * FA_B], dSt[FA_B * FA_B];
    bf16x2 Q2[hp * FA_B], W2[fa_w2_words(o)];
    fa_zero_tiles(Qt, (size_t)hs * FA_B, Q2, (size_t)hp * FA_B);
    fa_zero_tiles(Zt, (size_t)hs * FA_B, W2, (size_t)fa_w2_words(o));
    const fa_tile q = {Qt, Q2};
    for (int k0 = 0; k0 < kend; k0 += FA_B) {
        const int nk = imin(FA_B, kend - k0);
        fa_xyt(o, St, FA_K, b, h / o->G, k0, nk, q);
        if (backward) fa_xyt(o, dSt, FA_V, b, h / o->G, k0, nk, q);
        fa_xtw(o, Zt, backward ? FA_K : FA_V, b, h / o->G, k0, nk, backward ? dSt : St, W2);
    }
    return Zt[0];
}

// fa_backward_kv_block's products: S, dP, dV, dK and, per head, dQ per block pair.
static float fa_products_kv_block(const fa_ops *o, int b, int kh, int kb, int with_dq) {
    const int hs = o->hs, k0 = kb * FA_B, nk = imin(FA_B, o->T - k0), hp = o->bf16 ? hs / 2 : 1;
    float Kt[hs * FA_B], dKt[hs * FA_B], dVt[hs * FA_B], dQt[hs * FA_B];
    float P[FA_B * FA_B], dS[FA_B * FA_B];
    bf16x2 K2[hp * FA_B], W2[fa_w2_words(o)];
    fa_zero_tiles(Kt, (size_t)hs * FA_B, K2, (size_t)hp * FA_B);
    fa_zero_tiles(dKt, (size_t)hs * FA_B, W2, (size_t)fa_w2_words(o));
    fa_zero_tiles(dVt, (size_t)hs * FA_B, NULL, 0);
    fa_zero_tiles(dQt, (size_t)hs * FA_B, NULL, 0);
    const fa_tile k = {Kt, K2};
    for (int h = kh * o->G; h < (kh + 1) * o->G; h++)
        for (int q0 = k0; q0 < o->T; q0 += FA_B) {
            const int nq = imin(FA_B, o->T - q0);
            fa_xyt(o, P, FA_Q, b, h, q0, nq, k);
            fa_xyt(o, dS, FA_DO, b, h, q0, nq, k);
            fa_xtw(o, dVt, FA_DO, b, h, q0, nq, P, W2);
            fa_xtw(o, dKt, FA_Q, b, h, q0, nq, dS, W2);
            if (with_dq) fa_xtw(o, dQt, FA_K, b, kh, k0, nk, dS, W2);
        }
    return dKt[0] + dVt[0] + dQt[0];
}

float flash_attention_products_alone(const kernel_ctx *kc, float *scratch, const float *qkv,
                                     const float *dout, int B, int T, int C, int NH, int NKV,
                                     int backward) {
    BG_ASSERT(C % NH == 0 && C / NH <= FA_MAX_HS && NKV > 0 && NH % NKV == 0);
    const int nb = (T + FA_B - 1) / FA_B;
    const long BH = (long)B * NH, BK = (long)B * NKV;
    fa_ops o;
    fa_ops_init(&o, qkv, dout, B, T, C, NH, NKV, kc, scratch + fa_backward_floats(B, T, C, NH));
    const int per_head = fa_backward_per_head(BK);
    float sink = 0.0f;
    // The forward's tasks are query blocks; the backward's key blocks (per head, dQ with
    // them), then, on the two-pass schedule, query blocks again for dQ.
    #pragma omp parallel reduction(+ : sink)
    {
        if (backward && per_head) {
            #pragma omp for schedule(dynamic, 1)
            for (long bk = 0; bk < BK; bk++)
                for (int kb = 0; kb < nb; kb++)
                    sink += fa_products_kv_block(&o, (int)(bk / NKV), (int)(bk % NKV), kb, 1);
        } else if (backward) {
            #pragma omp for schedule(dynamic, 1)
            for (long task = 0; task < BK * nb; task++)
                sink += fa_products_kv_block(&o, (int)(task % BK / NKV), (int)(task % BK % NKV),
                                             (int)(task / BK), 0);
        }
        if (!backward || !per_head) {
            #pragma omp for schedule(dynamic, 1)
            for (long task = 0; task < BH * nb; task++)
                sink += fa_products_q_block(&o, (int)(task % BH / NH), (int)(task % BH % NH),
                                            nb - 1 - (int)(task / BH), backward);
        }
    }
    return sink;
}
