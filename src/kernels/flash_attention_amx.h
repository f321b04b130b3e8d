#ifndef BG_KERNELS_FLASH_ATTENTION_AMX_H
#define BG_KERNELS_FLASH_ATTENTION_AMX_H
// Flash attention's tile products on AMX tiles (flash_attention_amx.c), for the "amx"
// bf16 path: the contracts of tile_xyt_bf16 and tile_xtw_bf16 (flash_attention_tiles.h),
// words being bf16 pairs, for head sizes that are multiples of 32 (whole 16-pair tile
// columns). Called only where fa_amx_usable() said so.
#include <stddef.h>
#include <stdint.h>

enum { FA_AMX_B = 64, FA_AMX_MAX_HS = 256 };  // flash_attention.c's FA_B and FA_MAX_HS

// Whether this process may run tile instructions: the CPU has AMX-BF16, the OS saves
// tile state, and Linux granted the process the tile data (asked once, here).
int fa_amx_usable(void);

// A (n, 64) = X (n rows of hp pairs, row stride ldx words) · Y2 (hp rows of 64 pairs);
// n <= 64, hp a multiple of 16.
void fa_amx_xyt(float *A, const uint32_t *X, size_t ldx, const uint32_t *Y2, int n, int hp);
// Zt (hs, 64) += Xᵀ · W over np <= 32 token pairs: Xi (np rows of hs words, stride ldi),
// W2 (np rows of 64 pairs; its rows np.. up to the next multiple of 16 are zeroed);
// hs a multiple of 16.
void fa_amx_xtw(float *Zt, const uint32_t *Xi, size_t ldi, uint32_t *W2, int np, int hs);
#endif
