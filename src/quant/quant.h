// quant: GGUF tensor block formats and their always-compiled scalar reference.
//
// For every supported weight type there is one row of TypeOps: dequantize a row to float,
// quantize a float row (the project makes its own quantized test and benchmark models with it),
// and a dot product of one weight row with one activation row. The activation row is in the
// format named by `act_type` (the dot product quantizes activations, as the GGUF ecosystem does):
//
//   weight type                   activation format
//   F32, F16, BF16                F32 (weights are widened; no activation rounding)
//   Q4_0, Q5_0, Q8_0              Q8_0  (32-element blocks: f16 scale + 32 int8)
//   Q4_1, Q5_1                    Q8_1  (32-element blocks: f16 scale, f16 scale*sum, 32 int8)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K  Q8_K  (256-element blocks: f32 scale, 256 int8, 16 int16 sums)
//
// Block layouts match GGUF files bit for bit (see the structs below; sizes are static_asserted).
// The SIMD kernels in src/kernels are tested against these functions.
//
// Thread safety: all functions are pure; call from any thread.
// REQUIRES (all row functions): n is a multiple of the type's block size; buffers hold a row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/format.h"

namespace tandem::quant {

using gguf::TensorType;

// ---- scalar conversions ----
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);  // round to nearest even; overflow gives infinity
float Bf16ToFp32(uint16_t h);
uint16_t Fp32ToBf16(float f);  // round to nearest even; NaN stays NaN

// ---- block layouts (little-endian, no padding) ----
inline constexpr int kQK = 32;    // elements per block of the 32-element formats
inline constexpr int kQKK = 256;  // elements per super-block of the K formats
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[kQK]; };  // s = d * sum(qs)
struct BlockQ2_K { uint8_t scales[kQKK / 16]; uint8_t qs[kQKK / 4]; uint16_t d; uint16_t dmin; };
struct BlockQ3_K { uint8_t hmask[kQKK / 8]; uint8_t qs[kQKK / 4]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qs[kQKK / 2]; };
struct BlockQ5_K {
  uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qh[kQKK / 8]; uint8_t qs[kQKK / 2];
};
struct BlockQ6_K { uint8_t ql[kQKK / 2]; uint8_t qh[kQKK / 4]; int8_t scales[kQKK / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQKK]; int16_t bsums[kQKK / 16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
// The 6-bit scales sc[0..8) and mins mn[0..8) of a Q4_K / Q5_K super-block's 8 sub-blocks of
// 32, from its 12 packed bytes.
void UnpackScalesMinsK4(const uint8_t* packed, int* sc, int* mn);
// The stored six-bit value (q + 32, 0..63) of element e (0..255) of a Q6_K super-block, from its
// low-bit and high-bit arrays (BlockQ6_K::ql, ::qh).
int StoredQ6K(const uint8_t* ql, const uint8_t* qh, int e);

static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// ---- per-type reference operations ----
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of n elements: weight row `w` (this type) with activation row `a` (act_type).
// Null for the activation-only formats (Q8_1, Q8_K), whose act_type is themselves.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

struct TypeOps {
  TensorType type;
  TensorType act_type;
  DequantizeRowFn dequantize_row;
  QuantizeRowFn quantize_row;
  VecDotFn vec_dot;
};

// The reference row for `t`; nullptr if tandem cannot compute with that type.
const TypeOps* ReferenceOps(TensorType t);
// The types ReferenceOps supports, weight types first then activation-only types (Q8_1, Q8_K).
const TensorType* SupportedTypes(size_t* count);
// Bytes of a row of n elements of type t. REQUIRES: n is a multiple of the block size.
size_t RowBytes(TensorType t, int64_t n);

}  // namespace tandem::quant
