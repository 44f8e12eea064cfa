// Reference rows for the float types and the 32-element block formats (Q4_0 ... Q8_1).
//
// Element order inside a 32-element block: element j (0..15) sits in the low nibble of qs[j],
// element j+16 in the high nibble. For Q5_0/Q5_1, bit j of the little-endian uint32 in qh is
// element j's fifth bit. Q4_0/Q5_0 store q + 8 / q + 16 (x = d*q); Q4_1/Q5_1 store q (x = d*q + m).
//
// Quantizer accuracy, relative RMS error on Gaussian data (QuantizeTest in quant_test.cc):
// Q8_0 0.54%, Q5_1 3.4%, Q5_0 4.1%, Q4_1 7.0%, Q4_0 8.2% (llama.cpp's files of the reference
// model: Q5_1 3.8%, Q5_0 4.3%, Q4_1 7.9%, Q4_0 8.7%; see tests/quant_reference_test.cc).

#include <cmath>
#include <cstring>

#include "quant/fit.h"
#include "quant/ops.h"
#include "quant/quant.h"

namespace tandem::quant::internal {
namespace {

uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void StoreU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Stores the 32 biased values u[i] (< 16 for Q4, < 32 for Q5) into the nibble and qh layout.
void PackNibbles(const uint8_t* u, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((u[j] & 0xF) | (u[j + 16] & 0xF) << 4);
    high |= uint32_t{(u[j] >> 4) & 1u} << j;
    high |= uint32_t{(u[j + 16] >> 4) & 1u} << (j + 16);
  }
  if (qh != nullptr) StoreU32(qh, high);
}

// The biased values of a block back from the nibble and qh layout (qh null: four-bit formats).
void UnpackNibbles(const uint8_t* qs, const uint8_t* qh, int* u) {
  const uint32_t high = qh != nullptr ? LoadU32(qh) : 0;
  for (int j = 0; j < kQK / 2; ++j) {
    u[j] = (qs[j] & 0xF) | static_cast<int>((high >> j) & 1) << 4;
    u[j + 16] = (qs[j] >> 4) | static_cast<int>((high >> (j + 16)) & 1) << 4;
  }
}

// Symmetric block (Q4_0, Q5_0): fit d, store it as fp16, then requantize against the stored d.
uint16_t QuantizeSymmetricBlock(const float* x, int nmax, uint8_t* u) {
  int8_t q[kQK];
  const uint16_t d16 = Fp32ToFp16(FitSymmetric(x, kQK, nmax, q));
  const float d = Fp16ToFp32(d16);
  const float id = d != 0 ? 1 / d : 0;
  for (int i = 0; i < kQK; ++i) {
    u[i] = static_cast<uint8_t>(Clamp(RoundToInt(x[i] * id), -nmax, nmax - 1) + nmax);
  }
  return d16;
}

// Affine block (Q4_1, Q5_1).
void QuantizeAffineBlock(const float* x, int nmax, uint16_t* d16, uint16_t* m16, uint8_t* u) {
  float d, m;
  FitAffine(x, kQK, nmax, /*min_le_zero=*/false, &d, &m, u);
  *d16 = Fp32ToFp16(d);
  *m16 = Fp32ToFp16(m);
  const float dd = Fp16ToFp32(*d16), mm = Fp16ToFp32(*m16);
  const float id = dd != 0 ? 1 / dd : 0;
  for (int i = 0; i < kQK; ++i) {
    u[i] = static_cast<uint8_t>(Clamp(RoundToInt((x[i] - mm) * id), 0, nmax));
  }
}

// Absmax/127 quantization shared by the Q8_0 and Q8_1 activation formats. Returns sum(qs).
int QuantizeQ8Block(const float* x, uint16_t* d16, int8_t* qs) {
  float amax = 0;
  for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  *d16 = Fp32ToFp16(amax / 127);
  const float d = Fp16ToFp32(*d16);
  const float id = d != 0 ? 1 / d : 0;
  int sum = 0;
  for (int i = 0; i < kQK; ++i) {
    qs[i] = static_cast<int8_t>(Clamp(RoundToInt(x[i] * id), -127, 127));
    sum += qs[i];
  }
  return sum;
}

int DotQ8(const int* u, int bias, const int8_t* a) {
  int sum = 0;
  for (int i = 0; i < kQK; ++i) sum += (u[i] - bias) * a[i];
  return sum;
}

}  // namespace

// ---- F32, F16, BF16: weights widened to float; activations F32; accumulated in double ----

void DequantizeF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void QuantizeF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
float VecDotF32(int64_t n, const void* w, const void* a) {
  const float* x = static_cast<const float*>(w);
  const float* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(sum);
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(h[i]);
}
void QuantizeF16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(src[i]);
}
float VecDotF16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const float* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Fp16ToFp32(x[i])) * y[i];
  return static_cast<float>(sum);
}

void DequantizeBF16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(h[i]);
}
void QuantizeBF16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToBf16(src[i]);
}
float VecDotBF16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const float* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Bf16ToFp32(x[i])) * y[i];
  return static_cast<float>(sum);
}

// ---- Q4_0: x = d * (u - 8), u in [0, 15] ----

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = Fp16ToFp32(b[i].d);
    int u[kQK];
    UnpackNibbles(b[i].qs, nullptr, u);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(u[j] - 8);
  }
}
void QuantizeQ4_0(const float* src, void* dst, int64_t n) {
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    uint8_t u[kQK];
    b[i].d = QuantizeSymmetricBlock(src, 8, u);
    PackNibbles(u, b[i].qs, nullptr);
  }
}
float VecDotQ4_0(int64_t n, const void* w, const void* a) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int u[kQK];
    UnpackNibbles(x[i].qs, nullptr, u);
    sum += Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d) * static_cast<float>(DotQ8(u, 8, y[i].qs));
  }
  return sum;
}

// ---- Q4_1: x = d * u + m, u in [0, 15] ----

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = Fp16ToFp32(b[i].d), m = Fp16ToFp32(b[i].m);
    int u[kQK];
    UnpackNibbles(b[i].qs, nullptr, u);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(u[j]) + m;
  }
}
void QuantizeQ4_1(const float* src, void* dst, int64_t n) {
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    uint8_t u[kQK];
    QuantizeAffineBlock(src, 15, &b[i].d, &b[i].m, u);
    PackNibbles(u, b[i].qs, nullptr);
  }
}
// sum_j (d u_j + m) * da a_j = d*da*sum(u a) + m * (da * sum(a)), the last factor being Q8_1's s.
float VecDotQ4_1(int64_t n, const void* w, const void* a) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int u[kQK];
    UnpackNibbles(x[i].qs, nullptr, u);
    sum += Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d) * static_cast<float>(DotQ8(u, 0, y[i].qs)) +
           Fp16ToFp32(x[i].m) * Fp16ToFp32(y[i].s);
  }
  return sum;
}

// ---- Q5_0: x = d * (u - 16), u in [0, 31] ----

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = Fp16ToFp32(b[i].d);
    int u[kQK];
    UnpackNibbles(b[i].qs, b[i].qh, u);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(u[j] - 16);
  }
}
void QuantizeQ5_0(const float* src, void* dst, int64_t n) {
  BlockQ5_0* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    uint8_t u[kQK];
    b[i].d = QuantizeSymmetricBlock(src, 16, u);
    PackNibbles(u, b[i].qs, b[i].qh);
  }
}
float VecDotQ5_0(int64_t n, const void* w, const void* a) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int u[kQK];
    UnpackNibbles(x[i].qs, x[i].qh, u);
    sum += Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d) * static_cast<float>(DotQ8(u, 16, y[i].qs));
  }
  return sum;
}

// ---- Q5_1: x = d * u + m, u in [0, 31] ----

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = Fp16ToFp32(b[i].d), m = Fp16ToFp32(b[i].m);
    int u[kQK];
    UnpackNibbles(b[i].qs, b[i].qh, u);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(u[j]) + m;
  }
}
void QuantizeQ5_1(const float* src, void* dst, int64_t n) {
  BlockQ5_1* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    uint8_t u[kQK];
    QuantizeAffineBlock(src, 31, &b[i].d, &b[i].m, u);
    PackNibbles(u, b[i].qs, b[i].qh);
  }
}
float VecDotQ5_1(int64_t n, const void* w, const void* a) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int u[kQK];
    UnpackNibbles(x[i].qs, x[i].qh, u);
    sum += Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d) * static_cast<float>(DotQ8(u, 0, y[i].qs)) +
           Fp16ToFp32(x[i].m) * Fp16ToFp32(y[i].s);
  }
  return sum;
}

// ---- Q8_0 (weights and activations) and Q8_1 (activations): x = d * q ----

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = Fp16ToFp32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(b[i].qs[j]);
  }
}
void QuantizeQ8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) QuantizeQ8Block(src, &b[i].d, b[i].qs);
}
float VecDotQ8_0(int64_t n, const void* w, const void* a) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += x[i].qs[j] * y[i].qs[j];
    sum += Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d) * static_cast<float>(s);
  }
  return sum;
}

void DequantizeQ8_1(const void* src, float* dst, int64_t n) {
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = Fp16ToFp32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(b[i].qs[j]);
  }
}
void QuantizeQ8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const int sum = QuantizeQ8Block(src, &b[i].d, b[i].qs);
    b[i].s = Fp32ToFp16(Fp16ToFp32(b[i].d) * static_cast<float>(sum));
  }
}

}  // namespace tandem::quant::internal
