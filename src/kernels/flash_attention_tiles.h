#ifndef BG_KERNELS_FLASH_ATTENTION_TILES_H
#define BG_KERNELS_FLASH_ATTENTION_TILES_H
// The tile products of flash attention (flash_attention.c, its only includer) and the
// packs that lay out their operands: fp32 FMAs on 16-float vectors, and under bf16
// pair dot products (vdpbf16ps) with fp32 accumulation. Every product is one of two
// register-blocked shapes whose vector dimension is a block dimension (FA_B = 4 vectors
// of 16 lanes), never the head size, so any hs runs at full vector width:
//   tile_xyt:  A (n, FA_B)  = X (n, hs) · Yt (hs, FA_B)
//   tile_xtw:  Zt (hs, FA_B) += X (n, hs)ᵀ · W (n, FA_B)
// X is read in place, one broadcast at a time; the operand read as vectors is packed.
#include <stddef.h>
#include <stdint.h>

#include "core/half.h"
#include "kernels/vec16.h"

// Queries per query block and keys per key block. 64: four 16-float vectors, and a
// thread's tiles (at most 4·hs·64 + 3·64² floats, 112 KiB for hs = 64) stay in L2
// while the operand tile of a micro-kernel call (16 KiB) stays in L1.
enum { FA_B = 64 };

// ---- micro-kernels ----------------------------------------------------------------

// a[r][j] += xs[r] · row[16j .. 16j+15] for r < 4, j < V16_TILE_VECS: one rank-1 update
// of a register tile, the inner step of both tile products below. The row's vectors are
// loaded once and pinned in registers (v16_keep) for the four broadcasts.
enum { FA_TV = V16_TILE_VECS, FA_TW = 16 * V16_TILE_VECS };  // a tile row: vectors, floats
static inline __attribute__((always_inline)) void tile_rank1(v16 a[4][FA_TV], const float *xs,
                                                             const float *row) {
    v16 w[FA_TV];
    for (int j = 0; j < FA_TV; j++) {
        w[j] = v16_load(row + 16 * j);
        v16_keep(w[j]);
    }
    for (int r = 0; r < 4; r++) {
        const v16 b = v16_set1(xs[r]);
        for (int j = 0; j < FA_TV; j++) a[r][j] = v16_fma(b, w[j], a[r][j]);
    }
}

// A (n, FA_B) = X (n, hs; row stride ldx) · Yt (hs, FA_B). Writes.
// Blocks of 4 rows × FA_TV vectors: per step of d, FA_TV vector loads and 4 broadcasts
// feed 4·FA_TV FMAs into accumulators that live in registers for the whole reduction.
static void tile_xyt(float *restrict A, const float *restrict X, size_t ldx,
                     const float *restrict Yt, int n, int hs) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *x0 = X + (size_t)i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        for (int c = 0; c < FA_B; c += FA_TW) {
            v16 a[4][FA_TV];
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < FA_TV; j++) a[r][j] = v16_zero();
            for (int d = 0; d < hs; d++) {
                const float xs[4] = {x0[d], x1[d], x2[d], x3[d]};
                tile_rank1(a, xs, Yt + (size_t)d * FA_B + c);
            }
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < FA_TV; j++) v16_store(A + (size_t)(i + r) * FA_B + c + 16 * j, a[r][j]);
        }
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
// Blocks of 4 values of d × FA_TV vectors, accumulated over all n rows in registers.
static void tile_xtw(float *restrict Zt, const float *restrict X, size_t ldx,
                     const float *restrict W, int n, int hs) {
    int d = 0;
    for (; d + 4 <= hs; d += 4) {
        for (int c = 0; c < FA_B; c += FA_TW) {
            v16 a[4][FA_TV];
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < FA_TV; j++) a[r][j] = v16_load(Zt + (size_t)(d + r) * FA_B + c + 16 * j);
            for (int u = 0; u < n; u++) tile_rank1(a, X + (size_t)u * ldx + d, W + (size_t)u * FA_B + c);
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < FA_TV; j++) v16_store(Zt + (size_t)(d + r) * FA_B + c + 16 * j, a[r][j]);
        }
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

// Packs n rows of hs floats (row stride ld), transposed, into Yt (hs, FA_B); columns
// n..FA_B-1 are zero, so padded lanes compute harmless zeros.
static void pack_transposed(float *restrict Yt, const float *restrict src, size_t ld, int n,
                            int hs) {
    for (int d = 0; d < hs; d++) {
        float *y = Yt + (size_t)d * FA_B;
        for (int r = n; r < FA_B; r++) y[r] = 0.0f;
    }
    v16_transpose_block(Yt, FA_B, src, ld, n, hs);
}

// ---- bf16 tile products ---------------------------------------------------------

// Two bf16 of consecutive reduction indices in one 32-bit word, the lower index in
// the low half: the operand unit of vdpbf16ps.
typedef uint32_t bf16x2;

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define FA_HAVE_BF16 1  // a macro, for the #if around the code that calls these

// a[r][j] += xs[r] · row[16j .. 16j+15] as pair dot products: tile_rank1 over two
// reduction indices at once.
static inline __attribute__((always_inline)) void tile_rank2_4x4(v16 a[4][4], const bf16x2 *xs,
                                                                 const bf16x2 *row) {
    __m512i w0 = _mm512_loadu_si512(row), w1 = _mm512_loadu_si512(row + 16),
            w2 = _mm512_loadu_si512(row + 32), w3 = _mm512_loadu_si512(row + 48);
    v16_keep(w0);
    v16_keep(w1);
    v16_keep(w2);
    v16_keep(w3);
    for (int r = 0; r < 4; r++) {
        const __m512bh b = (__m512bh)_mm512_set1_epi32((int)xs[r]);
        a[r][0] = _mm512_dpbf16_ps(a[r][0], b, (__m512bh)w0);
        a[r][1] = _mm512_dpbf16_ps(a[r][1], b, (__m512bh)w1);
        a[r][2] = _mm512_dpbf16_ps(a[r][2], b, (__m512bh)w2);
        a[r][3] = _mm512_dpbf16_ps(a[r][3], b, (__m512bh)w3);
    }
}

// tile_xyt on pairs: A (n, FA_B) = X (n rows of hp pairs; row stride ldx pairs) ·
// Y2 (hp rows of FA_B pairs).
static void tile_xyt_bf16(float *restrict A, const bf16x2 *restrict X, size_t ldx,
                          const bf16x2 *restrict Y2, int n, int hp) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const bf16x2 *x0 = X + (size_t)i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        v16 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) a[r][j] = v16_zero();
        for (int d = 0; d < hp; d++) {
            const bf16x2 xs[4] = {x0[d], x1[d], x2[d], x3[d]};
            tile_rank2_4x4(a, xs, Y2 + (size_t)d * FA_B);
        }
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) v16_store(A + (size_t)(i + r) * FA_B + 16 * j, a[r][j]);
    }
    for (; i < n; i++) {
        const bf16x2 *x = X + (size_t)i * ldx;
        v16 a[4] = {v16_zero(), v16_zero(), v16_zero(), v16_zero()};
        for (int d = 0; d < hp; d++) {
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)x[d]);
            for (int j = 0; j < 4; j++)
                a[j] = _mm512_dpbf16_ps(a[j], b, (__m512bh)_mm512_loadu_si512(Y2 + (size_t)d * FA_B + 16 * j));
        }
        for (int j = 0; j < 4; j++) v16_store(A + (size_t)i * FA_B + 16 * j, a[j]);
    }
}

// tile_xtw on pairs: Zt (hs, FA_B) += Xᵀ · W over np pairs of rows, with Xi the rows
// interleaved in pairs (row pair u: hs words of stride 1, pairs at stride ldi) and W2
// (np rows of FA_B pairs).
static void tile_xtw_bf16(float *restrict Zt, const bf16x2 *restrict Xi, size_t ldi,
                          const bf16x2 *restrict W2, int np, int hs) {
    int d = 0;
    for (; d + 4 <= hs; d += 4) {
        v16 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) a[r][j] = v16_load(Zt + (size_t)(d + r) * FA_B + 16 * j);
        for (int u = 0; u < np; u++) tile_rank2_4x4(a, Xi + (size_t)u * ldi + d, W2 + (size_t)u * FA_B);
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) v16_store(Zt + (size_t)(d + r) * FA_B + 16 * j, a[r][j]);
    }
    for (; d < hs; d++) {
        float *z = Zt + (size_t)d * FA_B;
        v16 a[4] = {v16_load(z), v16_load(z + 16), v16_load(z + 32), v16_load(z + 48)};
        for (int u = 0; u < np; u++) {
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)Xi[(size_t)u * ldi + d]);
            for (int j = 0; j < 4; j++)
                a[j] = _mm512_dpbf16_ps(a[j], b, (__m512bh)_mm512_loadu_si512(W2 + (size_t)u * FA_B + 16 * j));
        }
        for (int j = 0; j < 4; j++) v16_store(z + 16 * j, a[j]);
    }
}

// 16 words (lo[k], hi[k]) rounded to bf16: vcvtne2ps2bf16 puts lo in the low 16
// halves and hi in the high ones, vpermw interleaves them. Round to nearest even as
// bg_f32_to_bf16 (subnormals read as zero).
static inline __m512i round_pairs16(__m512 lo, __m512 hi) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// W2 (ceil(n/2) rows of FA_B pairs) = rows 2u and 2u+1 of W (n, FA_B) rounded and
// interleaved; an odd n's last pair has 0 for its missing row.
static void round_row_pairs(bf16x2 *restrict W2, const float *restrict W, int n) {
    for (int u = 0; 2 * u < n; u++) {
        const float *lo = W + (size_t)2 * u * FA_B, *hi = lo + FA_B;
        const int has_hi = 2 * u + 1 < n;
        for (int j = 0; j < FA_B; j += 16)
            _mm512_storeu_si512(W2 + (size_t)u * FA_B + j,
                                round_pairs16(v16_load(lo + j), has_hi ? v16_load(hi + j) : v16_zero()));
    }
}

// The two rounded copies of a (B, T, width) tensor (width even):
//   x2 (B·T rows of width/2 pairs): each row's channels in pairs;
//   xi (B·ceil(T/2) rows of width words): tokens 2u and 2u+1 interleaved channel by
//      channel, token T (past the end, for odd T) as 0.
// Inside the caller's parallel region (an omp for).
static void round_copies(bf16x2 *x2, bf16x2 *xi, const float *x, int B, int T, int width) {
    const int Tp = (T + 1) / 2, w2 = width / 2;
    #pragma omp for schedule(static)
    for (long bu = 0; bu < (long)B * Tp; bu++) {
        const int b = (int)(bu / Tp), t = 2 * (int)(bu % Tp);
        const float *lo = x + ((size_t)b * T + t) * width, *hi = lo + width;
        const int has_hi = t + 1 < T;
        bf16x2 *row_lo = x2 + ((size_t)b * T + t) * w2, *row_hi = row_lo + w2, *il = xi + (size_t)bu * width;
        int c = 0;
        for (; c + 32 <= width; c += 32) {
            _mm512_storeu_si512(row_lo + c / 2, (__m512i)_mm512_cvtne2ps_pbh(v16_load(lo + c + 16), v16_load(lo + c)));
            if (has_hi)
                _mm512_storeu_si512(row_hi + c / 2, (__m512i)_mm512_cvtne2ps_pbh(v16_load(hi + c + 16), v16_load(hi + c)));
        }
        for (; c < width; c += 2) {
            row_lo[c / 2] = bg_f32_to_bf16(lo[c]) | (uint32_t)bg_f32_to_bf16(lo[c + 1]) << 16;
            if (has_hi) row_hi[c / 2] = bg_f32_to_bf16(hi[c]) | (uint32_t)bg_f32_to_bf16(hi[c + 1]) << 16;
        }
        c = 0;
        for (; c + 16 <= width; c += 16)
            _mm512_storeu_si512(il + c, round_pairs16(v16_load(lo + c), has_hi ? v16_load(hi + c) : v16_zero()));
        for (; c < width; c++)
            il[c] = bg_f32_to_bf16(lo[c]) | (uint32_t)(has_hi ? bg_f32_to_bf16(hi[c]) : 0) << 16;
    }
}
#else
#define FA_HAVE_BF16 0
#endif

// Y2 (hp rows of FA_B pairs) = n rows of hp pairs (row stride ld), transposed; pairs
// n..FA_B-1 are zero. 16 × 16 blocks of words go through v16_transpose16 (data
// movement only: the bits are kept).
static void pack_pairs_transposed(bf16x2 *restrict Y2, const bf16x2 *restrict src, size_t ld,
                                  int n, int hp) {
    for (int d = 0; d < hp; d++)
        for (int r = n; r < FA_B; r++) Y2[(size_t)d * FA_B + r] = 0;
    int r0 = 0;
    for (; r0 + 16 <= n; r0 += 16) {
        int c0 = 0;
        for (; c0 + 16 <= hp; c0 += 16)
            v16_transpose16((float *)(Y2 + (size_t)c0 * FA_B + r0), FA_B,
                            (const float *)(src + (size_t)r0 * ld + c0), ld);
        for (int r = r0; r < r0 + 16; r++)
            for (int c = c0; c < hp; c++) Y2[(size_t)c * FA_B + r] = src[(size_t)r * ld + c];
    }
    for (int r = r0; r < n; r++)
        for (int c = 0; c < hp; c++) Y2[(size_t)c * FA_B + r] = src[(size_t)r * ld + c];
}

#endif
