// Memory-efficient causal self-attention: the FlashAttention algorithm on CPU cores.
//
// The forward walks the keys in blocks of FA_B with an online softmax (running row
// max m and row sum l, the partial output rescaled by e^{m_old - m_new} when the max
// grows), so no T×T matrix exists; it keeps only lse = m + log l per query row. The
// backward (FlashAttention-2) recomputes P = exp(S - lse) tile by tile, with
// D = rowsum(dO ∘ O) and dS = P ∘ (dP - D):
//   dV = Pᵀ dO,  dK = scale · dSᵀ Q,  dQ = scale · dS K.
//
// Tiles are laid out so that every product is one of two register-blocked
// micro-kernels whose vector dimension is a block dimension (FA_B = 4 vectors of 16
// floats), never the head size: any hs runs at full vector width without tails.
//   tile_xyt:  A (n, FA_B)  = X (n, hs) · Yt (hs, FA_B)      scores S and dP
//   tile_xtw:  Zt (hs, FA_B) += X (n, hs)ᵀ · W (n, FA_B)     O, dQ, dK, dV
// X is always read in place from qkv or dout (rows of stride 3C or C, one scalar
// broadcast at a time); only the operand read as vectors is packed, transposed, into
// a small tile on the stack. Softmax statistics are then vectors over query rows (the
// forward keeps Sᵀ, keys × queries), so the online softmax has no horizontal sums.
//
// Work is split into tasks that each write disjoint outputs (no atomics), so results
// are deterministic:
//   forward:  one task per (b, h, query block).
//   backward: dK and dV of a key block sum over the query blocks at or after it, dQ
//             of a query block over the key blocks up to it. Two schedules:
//     per head:  one task per (b, h) walks its key blocks and, for each, the query
//                blocks after it: 5 tile products per (query, key) block pair, dQ
//                collected in the caller's scratch. B·NH tasks.
//     two pass:  one task per (b, h, key block) for dK, dV, then one per (b, h,
//                query block) for dQ, which recomputes P and dP: 7 products per
//                pair, but B·NH·T/64 tasks.
//   The per-head schedule runs when B·NH tasks keep the threads about as busy as
//   the finer one would (see flash_attention_backward). Both add the same numbers in
//   the same order, so the results are bitwise equal and do not depend on the thread
//   count either (tested).
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <omp.h>

#include "core/error.h"
#include "kernels/vec16.h"
#include "kernels/vecmath.h"

// Queries per query block and keys per key block. 64: four 16-float vectors, and a
// thread's tiles (at most 4·hs·64 + 3·64² floats, 112 KiB for hs = 64) stay in L2
// while the operand tile of a micro-kernel call (16 KiB) stays in L1.
enum { FA_B = 64 };

// The tiles live on the stack (the kernels allocate nothing) and scale with hs: at
// this bound 304 KiB per thread, well inside the 2 MiB or more that OpenMP threads
// get by default.
enum { FA_MAX_HS = 256 };

// ---- micro-kernels ----------------------------------------------------------------

// a[r][j] += xs[r] · row[16j .. 16j+15] for r, j < 4: one rank-1 update of a 4 × 64
// register tile, the inner step of both tile products below. The row's four vectors
// are loaded once and pinned in registers (v16_keep) for the four broadcasts.
static inline __attribute__((always_inline)) void tile_rank1_4x4(v16 a[4][4], const float *xs,
                                                                 const float *row) {
    v16 w0 = v16_load(row), w1 = v16_load(row + 16), w2 = v16_load(row + 32), w3 = v16_load(row + 48);
    v16_keep(w0);
    v16_keep(w1);
    v16_keep(w2);
    v16_keep(w3);
    for (int r = 0; r < 4; r++) {
        const v16 b = v16_set1(xs[r]);
        a[r][0] = v16_fma(b, w0, a[r][0]);
        a[r][1] = v16_fma(b, w1, a[r][1]);
        a[r][2] = v16_fma(b, w2, a[r][2]);
        a[r][3] = v16_fma(b, w3, a[r][3]);
    }
}

// A (n, FA_B) = X (n, hs; row stride ldx) · Yt (hs, FA_B). Writes.
// Blocks of 4 rows × 4 vectors: per step of d, 4 vector loads and 4 broadcasts feed
// 16 FMAs into 16 accumulators that live in registers for the whole reduction.
static void tile_xyt(float *restrict A, const float *restrict X, size_t ldx,
                     const float *restrict Yt, int n, int hs) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *x0 = X + (size_t)i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        v16 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) a[r][j] = v16_zero();
        for (int d = 0; d < hs; d++) {
            const float xs[4] = {x0[d], x1[d], x2[d], x3[d]};
            tile_rank1_4x4(a, xs, Yt + (size_t)d * FA_B);
        }
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) v16_store(A + (size_t)(i + r) * FA_B + 16 * j, a[r][j]);
    }
    for (; i < n; i++) {
        const float *x = X + (size_t)i * ldx;
        v16 a0 = v16_zero(), a1 = v16_zero(), a2 = v16_zero(), a3 = v16_zero();
        for (int d = 0; d < hs; d++) {
            const float *y = Yt + (size_t)d * FA_B;
            const v16 b = v16_set1(x[d]);
            a0 = v16_fma(b, v16_load(y), a0);
            a1 = v16_fma(b, v16_load(y + 16), a1);
            a2 = v16_fma(b, v16_load(y + 32), a2);
            a3 = v16_fma(b, v16_load(y + 48), a3);
        }
        float *o = A + (size_t)i * FA_B;
        v16_store(o, a0), v16_store(o + 16, a1), v16_store(o + 32, a2), v16_store(o + 48, a3);
    }
}

// Zt (hs, FA_B) += X (n, hs; row stride ldx)ᵀ · W (n, FA_B).
// Blocks of 4 values of d × 4 vectors, accumulated over all n rows in registers.
static void tile_xtw(float *restrict Zt, const float *restrict X, size_t ldx,
                     const float *restrict W, int n, int hs) {
    int d = 0;
    for (; d + 4 <= hs; d += 4) {
        v16 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) a[r][j] = v16_load(Zt + (size_t)(d + r) * FA_B + 16 * j);
        for (int u = 0; u < n; u++) {
            tile_rank1_4x4(a, X + (size_t)u * ldx + d, W + (size_t)u * FA_B);
        }
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) v16_store(Zt + (size_t)(d + r) * FA_B + 16 * j, a[r][j]);
    }
    for (; d < hs; d++) {
        float *z = Zt + (size_t)d * FA_B;
        v16 a0 = v16_load(z), a1 = v16_load(z + 16), a2 = v16_load(z + 32), a3 = v16_load(z + 48);
        for (int u = 0; u < n; u++) {
            const float *w = W + (size_t)u * FA_B;
            const v16 b = v16_set1(X[(size_t)u * ldx + d]);
            a0 = v16_fma(b, v16_load(w), a0);
            a1 = v16_fma(b, v16_load(w + 16), a1);
            a2 = v16_fma(b, v16_load(w + 32), a2);
            a3 = v16_fma(b, v16_load(w + 48), a3);
        }
        v16_store(z, a0), v16_store(z + 16, a1), v16_store(z + 32, a2), v16_store(z + 48, a3);
    }
}

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

// dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols: 16 × 16 blocks in registers,
// the edges one by one. The tiles change between row-major and transposed layouts at
// every pack and write-back; done one float at a time, the strided side misses L1.
static void transpose_block(float *restrict dst, size_t ldd, const float *restrict src,
                            size_t lds, int rows, int cols) {
    int r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        int c0 = 0;
        for (; c0 + 16 <= cols; c0 += 16)
            v16_transpose16(dst + (size_t)c0 * ldd + r0, ldd, src + (size_t)r0 * lds + c0, lds);
        for (int r = r0; r < r0 + 16; r++)
            for (int c = c0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
    }
    for (int r = r0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}

// Packs n rows of hs floats (row stride ld), transposed, into Yt (hs, FA_B); columns
// n..FA_B-1 are zero, so padded lanes compute harmless zeros.
static void pack_transposed(float *restrict Yt, const float *restrict src, size_t ld, int n,
                            int hs) {
    for (int d = 0; d < hs; d++) {
        float *y = Yt + (size_t)d * FA_B;
        for (int r = n; r < FA_B; r++) y[r] = 0.0f;
    }
    transpose_block(Yt, FA_B, src, ld, n, hs);
}

static inline int imin(int a, int b) { return a < b ? a : b; }

// ---- forward ----------------------------------------------------------------------

// One (b, h, query block): out rows q0..q0+nq-1 of head h, and their lse.
static void fa_forward_block(float *out, float *lse, const float *qkv, int b, int h, int qb,
                             int T, int C, int NH) {
    const int hs = C / NH, q0 = qb * FA_B, nq = imin(FA_B, T - q0);
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *Q = qkv + ((size_t)b * T + q0) * C3 + (size_t)h * hs;
    const float *K = qkv + (size_t)b * T * C3 + C + (size_t)h * hs;
    const float *V = K + C;

    float Qt[hs * FA_B], Ot[hs * FA_B], St[FA_B * FA_B];
    float m[FA_B], l[FA_B], mnew[FA_B], corr[FA_B];
    pack_transposed(Qt, Q, C3, nq, hs);
    for (int i = 0; i < hs * FA_B; i++) Ot[i] = 0.0f;
    for (int r = 0; r < FA_B; r++) m[r] = -FLT_MAX, l[r] = 0.0f;

    const int kend = q0 + nq;  // the last row sees keys 0..q0+nq-1
    for (int k0 = 0; k0 < kend; k0 += FA_B) {
        const int nk = imin(FA_B, kend - k0);
        const int diag = k0 + nk - 1 > q0;  // some key lies after some query
        tile_xyt(St, K + (size_t)k0 * C3, C3, Qt, nk, hs);  // St[c][r] = k·q
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
        for (int c = 0; c < nk; c++) {
            float *s = St + (size_t)c * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) s[r] = bg_expf(s[r] * scale - m[r]);
        }
        // Masked scores gave e^{-big} = 1e-38 through bg_expf's clamp, not 0: zero
        // them so that keys after the query contribute exactly nothing.
        if (diag) mask_keys_by_query(St, nk, k0, q0, 0.0f);
        for (int c = 0; c < nk; c++) {
            const float *s = St + (size_t)c * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) l[r] += s[r];
        }
        for (int d = 0; d < hs; d++) {
            float *o = Ot + (size_t)d * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) o[r] *= corr[r];
        }
        tile_xtw(Ot, V + (size_t)k0 * C3, C3, St, nk, hs);  // O += Pᵀ-weighted values
    }
    float *lrow = lse + ((size_t)b * NH + h) * T + q0;
    float *O = Qt;  // Qt is done with: it takes O row-major, (nq, hs)
    transpose_block(O, hs, Ot, FA_B, hs, nq);
    for (int r = 0; r < nq; r++) {
        lrow[r] = m[r] + logf(l[r]);
        const float inv = 1.0f / l[r];
        float *o = out + ((size_t)b * T + q0 + r) * C + (size_t)h * hs;
        const float *orow = O + (size_t)r * hs;
        #pragma omp simd
        for (int d = 0; d < hs; d++) o[d] = orow[d] * inv;
    }
}

// qkv (B,T,3C), out (B,T,C) writes, lse (B,NH,T) writes
void flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                             int NH) {
    BG_ASSERT(C % NH == 0 && C / NH <= FA_MAX_HS);
    const int nb = (T + FA_B - 1) / FA_B;
    const long BH = (long)B * NH;
    // Later query blocks see more keys: they are handed out first, dynamically, so the
    // threads finish together. The order cannot change results (tasks are disjoint).
    #pragma omp parallel for schedule(dynamic, 1)
    for (long task = 0; task < BH * nb; task++) {
        const int qb = nb - 1 - (int)(task / BH);
        const long bh = task % BH;
        fa_forward_block(out, lse, qkv, (int)(bh / NH), (int)(bh % NH), qb, T, C, NH);
    }
}

// ---- backward ---------------------------------------------------------------------

// Rows 0..n-1 of dst (hs floats each, row stride ld) += scale · Gt (hs, FA_B) transposed,
// through G ((n, hs) workspace): how every gradient tile (dQᵀ, dKᵀ, dVᵀ) reaches dqkv.
// Both backward schedules end with it, so they add the same numbers the same way.
static void add_transposed(float *dst, size_t ld, float *G, const float *Gt, int n, int hs,
                           float scale) {
    transpose_block(G, hs, Gt, FA_B, hs, n);
    for (int r = 0; r < n; r++) {
        float *y = dst + (size_t)r * ld;
        const float *g = G + (size_t)r * hs;
        #pragma omp simd
        for (int d = 0; d < hs; d++) y[d] += g[d] * scale;
    }
}

// Head h's dQ slice of token t0 in dqkv (B,T,3C); its dK and dV follow at +C and +2C.
static float *dq_rows(float *dqkv, int b, int h, int t0, int T, int C, int hs) {
    return dqkv + ((size_t)b * T + t0) * 3 * (size_t)C + (size_t)h * hs;
}

// One (b, h, key block): dK and dV of keys k0..k0+nk-1, from every query at or after
// them. Tiles are row-major here (queries × keys): the vectors run over keys, so dKᵀ
// and dVᵀ accumulate in registers over the queries. With dq_acc (the head's dQᵀ
// accumulators, one (hs, FA_B) tile per query block), also adds this key block's
// part of dQ there, exactly as fa_backward_q_block would.
static void fa_backward_kv_block(float *dqkv, float *dq_acc, const float *delta,
                                 const float *dout, const float *qkv, const float *lse, int b,
                                 int h, int kb, int T, int C, int NH) {
    const int hs = C / NH, k0 = kb * FA_B, nk = imin(FA_B, T - k0);
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *Q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *K = Q + C, *V = Q + 2 * (size_t)C;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
    const float *lrow = lse + ((size_t)b * NH + h) * T, *drow = delta + ((size_t)b * NH + h) * T;

    float Kt[hs * FA_B], Vt[hs * FA_B], dKt[hs * FA_B], dVt[hs * FA_B];
    float P[FA_B * FA_B], dS[FA_B * FA_B], dSt[FA_B * FA_B];
    pack_transposed(Kt, K + (size_t)k0 * C3, C3, nk, hs);
    pack_transposed(Vt, V + (size_t)k0 * C3, C3, nk, hs);
    for (int i = 0; i < hs * FA_B; i++) dKt[i] = 0.0f, dVt[i] = 0.0f;

    for (int q0 = k0; q0 < T; q0 += FA_B) {
        const int nq = imin(FA_B, T - q0);
        tile_xyt(P, Q + (size_t)q0 * C3, C3, Kt, nq, hs);  // S[r][c] = q·k
        tile_xyt(dS, dO + (size_t)q0 * C, C, Vt, nq, hs);  // dP[r][c] = dO·v
        for (int r = 0; r < nq; r++) {
            float *p = P + (size_t)r * FA_B, *ds = dS + (size_t)r * FA_B;
            const float L = lrow[q0 + r], D = drow[q0 + r];
            #pragma omp simd
            for (int c = 0; c < FA_B; c++) {
                p[c] = bg_expf(p[c] * scale - L);
                ds[c] = p[c] * (ds[c] - D);
            }
            // Keys after this query, and the padding past the last key, contribute
            // nothing: P (and so dS) is exactly 0 there.
            for (int c = imin(nk, q0 + r - k0 + 1); c < FA_B; c++) p[c] = 0.0f, ds[c] = 0.0f;
        }
        tile_xtw(dVt, dO + (size_t)q0 * C, C, P, nq, hs);   // dVᵀ += dOᵀ P
        tile_xtw(dKt, Q + (size_t)q0 * C3, C3, dS, nq, hs);  // dKᵀ += Qᵀ dS
        if (dq_acc) {
            // dQᵀ += Kᵀ dSᵀ. dS equals, bit for bit, the dSᵀ fa_backward_q_block
            // computes (the same products, sums and exps), and padded queries get 0
            // there too.
            pack_transposed(dSt, dS, FA_B, nq, nk);
            tile_xtw(dq_acc + (size_t)(q0 / FA_B) * hs * FA_B, K + (size_t)k0 * C3, C3, dSt, nk,
                     hs);
        }
    }
    // Kt and Vt are done with: they take dK and dV row-major.
    float *dk = dq_rows(dqkv, b, h, k0, T, C, hs) + C;
    add_transposed(dk, C3, Kt, dKt, nk, hs, scale);
    add_transposed(dk + C, C3, Vt, dVt, nk, hs, 1.0f);  // g·1 + y: the plain sum, exactly
}

// One (b, h, query block): dQ of queries q0..q0+nq-1 over keys 0..q0+nq-1, in the
// forward's transposed layout (keys × queries, vectors over queries).
static void fa_backward_q_block(float *dqkv, const float *delta, const float *dout,
                                const float *qkv, const float *lse, int b, int h, int qb,
                                int T, int C, int NH) {
    const int hs = C / NH, q0 = qb * FA_B, nq = imin(FA_B, T - q0);
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *Q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *K = Q + C, *V = Q + 2 * (size_t)C;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
    const float *lrow = lse + ((size_t)b * NH + h) * T, *drow = delta + ((size_t)b * NH + h) * T;

    float Qt[hs * FA_B], dOt[hs * FA_B], dQt[hs * FA_B];
    float St[FA_B * FA_B], dSt[FA_B * FA_B], L[FA_B], D[FA_B];
    pack_transposed(Qt, Q + (size_t)q0 * C3, C3, nq, hs);
    pack_transposed(dOt, dO + (size_t)q0 * C, C, nq, hs);
    for (int i = 0; i < hs * FA_B; i++) dQt[i] = 0.0f;
    // Padding lanes: q = dO = 0 and L = D = 0 give P = 1, dS = 1·(0 - 0) = 0.
    for (int r = 0; r < FA_B; r++) {
        L[r] = r < nq ? lrow[q0 + r] : 0.0f;
        D[r] = r < nq ? drow[q0 + r] : 0.0f;
    }
    const int kend = q0 + nq;
    for (int k0 = 0; k0 < kend; k0 += FA_B) {
        const int nk = imin(FA_B, kend - k0);
        tile_xyt(St, K + (size_t)k0 * C3, C3, Qt, nk, hs);    // Sᵀ[c][r] = k·q
        tile_xyt(dSt, V + (size_t)k0 * C3, C3, dOt, nk, hs);  // dPᵀ[c][r] = v·dO
        for (int c = 0; c < nk; c++) {
            const float *s = St + (size_t)c * FA_B;
            float *ds = dSt + (size_t)c * FA_B;
            #pragma omp simd
            for (int r = 0; r < FA_B; r++) ds[r] = bg_expf(s[r] * scale - L[r]) * (ds[r] - D[r]);
        }
        if (k0 + nk - 1 > q0) mask_keys_by_query(dSt, nk, k0, q0, 0.0f);
        tile_xtw(dQt, K + (size_t)k0 * C3, C3, dSt, nk, hs);  // dQᵀ += Kᵀ dSᵀ
    }
    add_transposed(dq_rows(dqkv, b, h, q0, T, C, hs), C3, Qt, dQt, nq, hs, scale);
}

// One (b, h), the per-head schedule: every key block in turn, its dQ parts collected
// in dq_acc (nb tiles of (hs, FA_B)) in the order fa_backward_q_block adds them.
static void fa_backward_head(float *dqkv, float *dq_acc, const float *delta, const float *dout,
                             const float *qkv, const float *lse, int b, int h, int T, int C,
                             int NH) {
    const int hs = C / NH, nb = (T + FA_B - 1) / FA_B;
    const float scale = 1.0f / sqrtf((float)hs);
    for (size_t i = 0; i < (size_t)nb * hs * FA_B; i++) dq_acc[i] = 0.0f;
    for (int kb = 0; kb < nb; kb++)
        fa_backward_kv_block(dqkv, dq_acc, delta, dout, qkv, lse, b, h, kb, T, C, NH);
    float dQ[hs * FA_B];
    for (int qb = 0; qb < nb; qb++) {
        const int q0 = qb * FA_B, nq = imin(FA_B, T - q0);
        add_transposed(dq_rows(dqkv, b, h, q0, T, C, hs), 3 * (size_t)C, dQ,
                       dq_acc + (size_t)qb * hs * FA_B, nq, hs, scale);
    }
}

size_t flash_attention_scratch_size(int B, int T, int C, int NH) {
    const size_t nb = ((size_t)T + FA_B - 1) / FA_B;
    // delta (B,NH,T), then dQᵀ tiles for every (b, h): (B,NH,nb,hs,FA_B)
    return (size_t)B * NH * T + (size_t)B * NH * nb * (C / NH) * FA_B;
}

// dout (B,T,C), out (B,T,C) and lse (B,NH,T) from the forward; dqkv (B,T,3C) +=;
// scratch (flash_attention_scratch_size floats) is workspace.
void flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int NH) {
    BG_ASSERT(C % NH == 0 && C / NH <= FA_MAX_HS);
    const int hs = C / NH, nb = (T + FA_B - 1) / FA_B;
    const long BH = (long)B * NH;
    float *delta = scratch, *dq_acc = scratch + (size_t)B * NH * T;
    // Per head, each thread gets ceil(BH/P) of B·NH equal tasks, 5 products per block
    // pair; in two passes about BH/P heads' worth of 7 products (the tasks are small
    // enough to balance). The per-head schedule wins when 5·ceil(BH/P) <= 7·BH/P.
    const long P = omp_get_max_threads();
    const int per_head = 5 * ((BH + P - 1) / P) * P <= 7 * BH;
    #pragma omp parallel
    {
        // D = rowsum(dO ∘ O) per (b, h, t): the Σ_c P·dP term of the softmax backward,
        // computed once from the output instead of once per key block.
        #pragma omp for schedule(static)
        for (long bt = 0; bt < (long)B * T; bt++) {
            const int b = (int)(bt / T), t = (int)(bt % T);
            for (int h = 0; h < NH; h++) {
                const float *o = out + (size_t)bt * C + (size_t)h * hs;
                const float *g = dout + (size_t)bt * C + (size_t)h * hs;
                float s = 0.0f;
                #pragma omp simd reduction(+ : s)
                for (int d = 0; d < hs; d++) s += o[d] * g[d];
                delta[((size_t)b * NH + h) * T + t] = s;
            }
        }
        if (per_head) {
            #pragma omp for schedule(dynamic, 1)
            for (long bh = 0; bh < BH; bh++)
                fa_backward_head(dqkv, dq_acc + (size_t)bh * nb * hs * FA_B, delta, dout, qkv,
                                 lse, (int)(bh / NH), (int)(bh % NH), T, C, NH);
        } else {
            // Early key blocks are seen by the most queries: they go first.
            #pragma omp for schedule(dynamic, 1)
            for (long task = 0; task < BH * nb; task++) {
                const long bh = task % BH;
                fa_backward_kv_block(dqkv, NULL, delta, dout, qkv, lse, (int)(bh / NH),
                                     (int)(bh % NH), (int)(task / BH), T, C, NH);
            }
            #pragma omp for schedule(dynamic, 1)
            for (long task = 0; task < BH * nb; task++) {
                const long bh = task % BH;
                fa_backward_q_block(dqkv, delta, dout, qkv, lse, (int)(bh / NH), (int)(bh % NH),
                                    nb - 1 - (int)(task / BH), T, C, NH);
            }
        }
    }
}
