#ifndef BG_CORE_DTYPE_H
#define BG_CORE_DTYPE_H
// The floating-point formats bagualu computes and stores in: the GEMMs' operand
// precision (train --dtype, trainer.json) and the element type of an export
// (export --dtype; io/safetensors.h maps it to the file's dtype).
//   BG_FP32  IEEE single precision;
//   BG_BF16  bfloat16: fp32's range, 8 significant bits;
//   BG_FP16  IEEE half precision: 11 significant bits, finite up to 65504.
typedef enum { BG_FP32 = 0, BG_BF16 = 1, BG_FP16 = 2 } bg_dtype;
enum { BG_DTYPE_COUNT = 3 };

// "fp32", "bf16", "fp16": the names train --dtype takes and trainer.json stores; "?"
// for an invalid value.
const char *bg_dtype_name(bg_dtype d);
// The dtype with that name, or its short spelling ("f32", "f16", as export --dtype
// has always taken them): 0, or -1 for an unknown name (*d untouched).
int bg_dtype_parse(const char *name, bg_dtype *d);
#endif
