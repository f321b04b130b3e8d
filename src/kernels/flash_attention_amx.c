// Flash attention's two tile products on AMX (Intel's tile matrix unit), for the bf16
// path "amx": the same contracts and operand layouts as tile_xyt_bf16 and tile_xtw_bf16
// (flash_attention_tiles.h), whose channel pairs are AMX's bf16 pairs along the
// reduction. One tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16
// fp32 sums: 8192 multiply-adds, where an AVX-512 FMA does 16. Products add in fp32, as
// the other bf16 tiles; the order within a 32-term step is the hardware's.
//
// Tiles used (one configuration, every tile 16 rows of 64 bytes): tmm0-3 the sums of
// four 16 x 16 blocks side by side, tmm4 the row operand, tmm5 the column operand. The
// configuration is loaded at each call and the tiles released after it: oneDNN's AMX
// GEMMs configure the tiles their own way between two attention tiles.
#include "kernels/flash_attention_amx.h"

#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/vec16.h"

typedef uint32_t bf16x2;
#define FA_B FA_AMX_B

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__)
#define FA_AMX_BUILT 1
#else
#define FA_AMX_BUILT 0
#endif

// Linux hands the tile data state to a process only on request (arch_prctl, 5.16+);
// without it the first tile instruction faults.
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_request(void) {
    cpu_identity id;
    cpu_identity_detect(&id);  // amx_bf16: the CPU's AMX-BF16 tiles, their state saved by the OS
    return id.amx_bf16 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int fa_amx_usable(void) {
    // 0: not asked yet, 1: usable, 2: not. Racing first calls ask twice, harmlessly.
    static int state = 0;
    if (!FA_AMX_BUILT) return 0;
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s == 0) {
        s = amx_request() ? 1 : 2;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s == 1;
}

#if FA_AMX_BUILT
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) tile_config;

static const tile_config TILES = {.palette = 1,
                                  .colsb = {64, 64, 64, 64, 64, 64},
                                  .rows = {16, 16, 16, 16, 16, 16}};

static AMX_TARGET void tiles_configure(void) { _tile_loadconfig(&TILES); }

// tmm0-3 += tmm4 · tmm5 for the column operands at b + 16·j words (row stride ldb
// bytes), j = 0..3.
#define DP4(b, ldb)                                                  \
    do {                                                             \
        _tile_loadd(5, (b), (ldb));                                  \
        _tile_dpbf16ps(0, 4, 5);                                     \
        _tile_loadd(5, (b) + 16, (ldb));                             \
        _tile_dpbf16ps(1, 4, 5);                                     \
        _tile_loadd(5, (b) + 32, (ldb));                             \
        _tile_dpbf16ps(2, 4, 5);                                     \
        _tile_loadd(5, (b) + 48, (ldb));                             \
        _tile_dpbf16ps(3, 4, 5);                                     \
    } while (0)

#define STORE4(c, ldc)                          \
    do {                                        \
        _tile_stored(0, (c), (ldc));            \
        _tile_stored(1, (c) + 16, (ldc));       \
        _tile_stored(2, (c) + 32, (ldc));       \
        _tile_stored(3, (c) + 48, (ldc));       \
    } while (0)

AMX_TARGET void fa_amx_xyt(float *restrict A, const bf16x2 *restrict X, size_t ldx,
                           const bf16x2 *restrict Y2, int n, int hp) {
    tiles_configure();
    const size_t ldy = FA_B * sizeof(bf16x2), lda = FA_B * sizeof(float);
    bf16x2 Xpad[16 * (FA_AMX_MAX_HS / 2)];  // a last group of fewer than 16 rows, zero-padded
    float Apad[16 * FA_B];
    for (int i0 = 0; i0 < n; i0 += 16) {
        const int rows = n - i0 < 16 ? n - i0 : 16;
        const bf16x2 *x = X + (size_t)i0 * ldx;
        size_t ldxb = ldx * sizeof(bf16x2);
        if (rows < 16) {
            memset(Xpad, 0, sizeof(bf16x2) * 16 * (size_t)hp);
            for (int r = 0; r < rows; r++) memcpy(Xpad + (size_t)r * hp, x + (size_t)r * ldx, sizeof(bf16x2) * hp);
            x = Xpad, ldxb = hp * sizeof(bf16x2);
        }
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int k = 0; k < hp; k += 16) {
            _tile_loadd(4, x + k, ldxb);
            DP4(Y2 + (size_t)k * FA_B, ldy);
        }
        if (rows == 16) {
            STORE4(A + (size_t)i0 * FA_B, lda);
        } else {
            STORE4(Apad, lda);
            memcpy(A + (size_t)i0 * FA_B, Apad, sizeof(float) * FA_B * (size_t)rows);
        }
    }
    _tile_release();
}

AMX_TARGET void fa_amx_xtw(float *restrict Zt, const bf16x2 *restrict Xi, size_t ldi,
                           bf16x2 *restrict W2, int np, int hs) {
    // The row operand is Xᵀ: hs rows of np pairs, packed transposed (16 x 16 blocks of
    // words), the pairs past np zero in it and in W2 (whose stale rows could hold NaN).
    const int npad = (np + 15) & ~15;
    bf16x2 At[FA_AMX_MAX_HS * (FA_B / 2)];
    for (int u = np; u < npad; u++) memset(W2 + (size_t)u * FA_B, 0, sizeof(bf16x2) * FA_B);
    if (npad > np)
        for (int d = 0; d < hs; d++) memset(At + (size_t)d * npad + np, 0, sizeof(bf16x2) * (npad - np));
    int u0 = 0;
    for (; u0 + 16 <= np; u0 += 16)
        for (int d0 = 0; d0 < hs; d0 += 16)
            v16_transpose16((float *)(At + (size_t)d0 * npad + u0), npad,
                            (const float *)(Xi + (size_t)u0 * ldi + d0), ldi);
    for (int u = u0; u < np; u++)
        for (int d = 0; d < hs; d++) At[(size_t)d * npad + u] = Xi[(size_t)u * ldi + d];

    tiles_configure();
    const size_t ldw = FA_B * sizeof(bf16x2), ldz = FA_B * sizeof(float), lda = npad * sizeof(bf16x2);
    for (int d0 = 0; d0 < hs; d0 += 16) {
        float *z = Zt + (size_t)d0 * FA_B;
        _tile_loadd(0, z, ldz);
        _tile_loadd(1, z + 16, ldz);
        _tile_loadd(2, z + 32, ldz);
        _tile_loadd(3, z + 48, ldz);
        for (int k = 0; k < npad; k += 16) {
            _tile_loadd(4, At + (size_t)d0 * npad + k, lda);
            DP4(W2 + (size_t)k * FA_B, ldw);
        }
        STORE4(z, ldz);
    }
    _tile_release();
}
#else
void fa_amx_xyt(float *A, const bf16x2 *X, size_t ldx, const bf16x2 *Y2, int n, int hp) {
    (void)A, (void)X, (void)ldx, (void)Y2, (void)n, (void)hp;
}
void fa_amx_xtw(float *Zt, const bf16x2 *Xi, size_t ldi, bf16x2 *W2, int np, int hs) {
    (void)Zt, (void)Xi, (void)ldi, (void)W2, (void)np, (void)hs;
}
#endif
