// The per-type reference functions behind ReferenceOps (internal to src/quant). Each has the
// signature and contract of DequantizeRowFn, QuantizeRowFn or VecDotFn in quant/quant.h.
#pragma once

#include <cstdint>

namespace tandem::quant::internal {

#define TANDEM_QUANT_DECLARE_OPS(name)                           \
  void Dequantize##name(const void* src, float* dst, int64_t n); \
  void Quantize##name(const float* src, void* dst, int64_t n);   \
  float VecDot##name(int64_t n, const void* w, const void* a)

TANDEM_QUANT_DECLARE_OPS(F32);
TANDEM_QUANT_DECLARE_OPS(F16);
TANDEM_QUANT_DECLARE_OPS(BF16);
TANDEM_QUANT_DECLARE_OPS(Q4_0);
TANDEM_QUANT_DECLARE_OPS(Q4_1);
TANDEM_QUANT_DECLARE_OPS(Q5_0);
TANDEM_QUANT_DECLARE_OPS(Q5_1);
TANDEM_QUANT_DECLARE_OPS(Q8_0);
TANDEM_QUANT_DECLARE_OPS(Q2_K);
TANDEM_QUANT_DECLARE_OPS(Q3_K);
TANDEM_QUANT_DECLARE_OPS(Q4_K);
TANDEM_QUANT_DECLARE_OPS(Q5_K);
TANDEM_QUANT_DECLARE_OPS(Q6_K);
#undef TANDEM_QUANT_DECLARE_OPS

// Activation-only formats: no dot product of their own.
void DequantizeQ8_1(const void* src, float* dst, int64_t n);
void QuantizeQ8_1(const float* src, void* dst, int64_t n);
void DequantizeQ8_K(const void* src, float* dst, int64_t n);
void QuantizeQ8_K(const float* src, void* dst, int64_t n);

}  // namespace tandem::quant::internal
