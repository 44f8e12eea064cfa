// Reference rows for the K formats (Q2_K ... Q6_K) and their activation format Q8_K.
//
// A super-block holds 256 elements in sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K), each
// with its own quantized scale (and min) relative to the fp16 super-block scale d (and dmin).
// Element e of a super-block is found at (all indices derived from the GGUF layout):
//   Q2_K  2 bits: qs[32*(e/128) + e%32] >> 2*((e%128)/32); scales[e/16]: low nibble scale, high min
//   Q3_K  2 bits as Q2_K, plus bit e/32 of hmask[e%32] (set: +0, clear: -4); signed 6-bit scales
//         (stored +32): low 4 bits in scales[j] (j < 8) or scales[j-8] >> 4, high 2 bits at
//         scales[8 + j%4] >> 2*(j/4)
//   Q4_K  4 bits: qs[32*(e/64) + e%32], low nibble if e%64 < 32 else high; 6-bit scale and min
//         per 32 elements packed in 12 bytes (see UnpackScaleMinK4)
//   Q5_K  as Q4_K, plus bit e/32 of qh[e%32] as the fifth bit
//   Q6_K  low 4 bits: ql[64*(e/128) + e%64], low nibble if e%128 < 64 else high; high 2 bits:
//         qh[32*(e/128) + e%32] >> 2*((e%128)/32); stored q+32; int8 scales[e/16]
//
// Quantizers: per sub-block a small scale search (quant/fit.h), then the sub-block scales (and
// mins) are quantized against the super-block scale and every element is requantized against the
// stored, rounded scales. Relative RMS error on Gaussian data (quant_test): Q6_K 1.74%,
// Q5_K 3.6%, Q4_K 7.2%, Q3_K 14.4%, Q2_K 27.0% (llama.cpp's files of the reference model:
// Q6_K 1.8%, Q5_K 3.6%, Q4_K 7.2%, Q3_K 15.2%, Q2_K 30.0%).

#include <cmath>
#include <cstring>

#include "quant/fit.h"
#include "quant/ops.h"
#include "quant/quant.h"

namespace tandem::quant::internal {
namespace {

// ---- element positions ----

// Q2_K / Q3_K: the two low bits of element e.
inline int Low2(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
inline void SetLow2(uint8_t* qs, int e, int v) {
  qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(v << (2 * ((e % 128) / 32)));
}

// Q2_K...Q5_K: bit e/32 of mask[e%32] (Q3_K hmask, Q5_K qh).
inline int HighBit(const uint8_t* mask, int e) {
  return (mask[e % 32] >> (e / 32)) & 1;
}
inline void SetHighBit(uint8_t* mask, int e, int v) {
  mask[e % 32] |= static_cast<uint8_t>(v << (e / 32));
}

// Q4_K / Q5_K: the four low bits of element e.
inline int Nibble4K(const uint8_t* qs, int e) {
  const uint8_t b = qs[32 * (e / 64) + e % 32];
  return e % 64 < 32 ? (b & 0xF) : (b >> 4);
}
inline void SetNibble4K(uint8_t* qs, int e, int v) {
  qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(e % 64 < 32 ? v : v << 4);
}

// Q6_K: the six-bit stored value (q + 32) of element e.
inline int Six(const uint8_t* ql, const uint8_t* qh, int e) {
  const int n = e / 128, r = e % 128;
  const uint8_t lo = ql[64 * n + r % 64];
  const int low4 = r < 64 ? (lo & 0xF) : (lo >> 4);
  const int high2 = (qh[32 * n + r % 32] >> (2 * (r / 32))) & 3;
  return low4 | high2 << 4;
}
inline void SetSix(uint8_t* ql, uint8_t* qh, int e, int v) {
  const int n = e / 128, r = e % 128;
  ql[64 * n + r % 64] |= static_cast<uint8_t>(r < 64 ? (v & 0xF) : (v & 0xF) << 4);
  qh[32 * n + r % 32] |= static_cast<uint8_t>((v >> 4) << (2 * (r / 32)));
}

// ---- packed sub-block scales ----

// Q4_K / Q5_K: 8 six-bit scales sc[j] and mins mn[j] in 12 bytes. Bytes 0-3 hold sc[0..3] and the
// top two bits of sc[4..7]; bytes 4-7 hold mn[0..3] and the top two bits of mn[4..7]; bytes 8-11
// hold the low nibbles of sc[4..7] (low) and mn[4..7] (high).
void UnpackScaleMinK4(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0xF) | (s[j] >> 6) << 4;
    mn[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
  }
}
void PackScaleMinK4(const int* sc, const int* mn, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    s[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
  }
}

// Q3_K: 16 six-bit values u[j] (scale + 32) in 12 bytes.
void UnpackScalesQ3K(const uint8_t* s, int* sc) {
  for (int j = 0; j < 16; ++j) {
    const int low4 = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int high2 = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = (low4 | high2 << 4) - 32;
  }
}
void PackScalesQ3K(const int* sc, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int u = sc[j] + 32;
    s[j < 8 ? j : j - 8] |= static_cast<uint8_t>(j < 8 ? (u & 0xF) : (u & 0xF) << 4);
    s[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
  }
}

// ---- quantizer building blocks ----

// Affine K formats (Q2_K, Q4_K, Q5_K): fits each of the n_sub sub-blocks (x ~ d_j*q - mn_j with
// mn_j >= 0), quantizes d_j and mn_j to [0, scale_max] against fp16 super-block scales, and writes
// the requantized q (in [0, nmax]) for all 256 elements.
void QuantizeAffineK(const float* x, int sub, int nmax, int scale_max, uint16_t* d16,
                     uint16_t* dmin16, int* sc, int* mn, uint8_t* q) {
  const int n_sub = kQKK / sub;
  float d[16], m[16], max_d = 0, max_m = 0;
  for (int j = 0; j < n_sub; ++j) {
    FitAffine(x + j * sub, sub, nmax, /*min_le_zero=*/true, &d[j], &m[j], q + j * sub);
    m[j] = -m[j];
    max_d = std::fmax(max_d, d[j]);
    max_m = std::fmax(max_m, m[j]);
  }
  *d16 = Fp32ToFp16(max_d / static_cast<float>(scale_max));
  *dmin16 = Fp32ToFp16(max_m / static_cast<float>(scale_max));
  const float dd = Fp16ToFp32(*d16), dm = Fp16ToFp32(*dmin16);
  const float idd = dd > 0 ? 1 / dd : 0, idm = dm > 0 ? 1 / dm : 0;
  for (int j = 0; j < n_sub; ++j) {
    sc[j] = Clamp(RoundToInt(d[j] * idd), 0, scale_max);
    mn[j] = Clamp(RoundToInt(m[j] * idm), 0, scale_max);
    const float dl = dd * static_cast<float>(sc[j]), ml = dm * static_cast<float>(mn[j]);
    const float idl = dl > 0 ? 1 / dl : 0;
    for (int i = j * sub; i < (j + 1) * sub; ++i) {
      q[i] = static_cast<uint8_t>(Clamp(RoundToInt((x[i] + ml) * idl), 0, nmax));
    }
  }
}

// Symmetric K formats (Q3_K, Q6_K): sub-blocks of 16 fitted with q in [-nmax, nmax-1]; the signed
// sub-block scales are quantized to [-scale_max, scale_max-1] against the fp16 super-block scale.
void QuantizeSymmetricK(const float* x, int nmax, int scale_max, uint16_t* d16, int* sc, int* q) {
  float d[16], vmax = 0;
  int8_t q8[16];
  for (int j = 0; j < 16; ++j) {
    d[j] = FitSymmetric(x + 16 * j, 16, nmax, q8);
    if (std::fabs(d[j]) > std::fabs(vmax)) vmax = d[j];
  }
  *d16 = Fp32ToFp16(-vmax / static_cast<float>(scale_max));
  const float dd = Fp16ToFp32(*d16);
  const float idd = dd != 0 ? 1 / dd : 0;
  for (int j = 0; j < 16; ++j) {
    sc[j] = Clamp(RoundToInt(d[j] * idd), -scale_max, scale_max - 1);
    const float dl = dd * static_cast<float>(sc[j]);
    const float idl = dl != 0 ? 1 / dl : 0;
    for (int i = 16 * j; i < 16 * (j + 1); ++i) {
      q[i] = Clamp(RoundToInt(x[i] * idl), -nmax, nmax - 1);
    }
  }
}

}  // namespace

// ---- Q2_K: x = d*sc*q - dmin*mn, q in [0, 3], 4-bit sc and mn per 16 ----

void DequantizeQ2_K(const void* src, float* dst, int64_t n) {
  const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = Fp16ToFp32(b[i].d), dmin = Fp16ToFp32(b[i].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t s = b[i].scales[e / 16];
      dst[e] =
          d * static_cast<float>((s & 0xF) * Low2(b[i].qs, e)) - dmin * static_cast<float>(s >> 4);
    }
  }
}
void QuantizeQ2_K(const float* src, void* dst, int64_t n) {
  BlockQ2_K* b = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    int sc[16], mn[16];
    uint8_t q[kQKK];
    QuantizeAffineK(src, 16, 3, 15, &b[i].d, &b[i].dmin, sc, mn, q);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    for (int j = 0; j < 16; ++j) b[i].scales[j] = static_cast<uint8_t>(sc[j] | mn[j] << 4);
    for (int e = 0; e < kQKK; ++e) SetLow2(b[i].qs, e, q[e]);
  }
}
float VecDotQ2_K(int64_t n, const void* w, const void* a) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0, mins = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * (j + 1); ++e) s += Low2(x[i].qs, e) * y[i].qs[e];
      scaled += (x[i].scales[j] & 0xF) * s;
      mins += (x[i].scales[j] >> 4) * y[i].bsums[j];
    }
    sum += y[i].d * (Fp16ToFp32(x[i].d) * static_cast<float>(scaled) -
                     Fp16ToFp32(x[i].dmin) * static_cast<float>(mins));
  }
  return sum;
}

// ---- Q3_K: x = d*sc*q, q in [-4, 3], signed 6-bit sc per 16 ----

void DequantizeQ3_K(const void* src, float* dst, int64_t n) {
  const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = Fp16ToFp32(b[i].d);
    int sc[16];
    UnpackScalesQ3K(b[i].scales, sc);
    for (int e = 0; e < kQKK; ++e) {
      const int q = Low2(b[i].qs, e) - (HighBit(b[i].hmask, e) ? 0 : 4);
      dst[e] = d * static_cast<float>(sc[e / 16] * q);
    }
  }
}
void QuantizeQ3_K(const float* src, void* dst, int64_t n) {
  BlockQ3_K* b = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    int sc[16], q[kQKK];
    QuantizeSymmetricK(src, 4, 32, &b[i].d, sc, q);
    PackScalesQ3K(sc, b[i].scales);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    std::memset(b[i].hmask, 0, sizeof(b[i].hmask));
    for (int e = 0; e < kQKK; ++e) {
      const int u = q[e] + 4;
      SetLow2(b[i].qs, e, u & 3);
      SetHighBit(b[i].hmask, e, u >> 2);
    }
  }
}
float VecDotQ3_K(int64_t n, const void* w, const void* a) {
  const BlockQ3_K* x = static_cast<const BlockQ3_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sc[16];
    UnpackScalesQ3K(x[i].scales, sc);
    int total = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * (j + 1); ++e) {
        s += (Low2(x[i].qs, e) - (HighBit(x[i].hmask, e) ? 0 : 4)) * y[i].qs[e];
      }
      total += sc[j] * s;
    }
    sum += y[i].d * Fp16ToFp32(x[i].d) * static_cast<float>(total);
  }
  return sum;
}

// ---- Q4_K: x = d*sc*q - dmin*mn, q in [0, 15], 6-bit sc and mn per 32 ----

void DequantizeQ4_K(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = Fp16ToFp32(b[i].d), dmin = Fp16ToFp32(b[i].dmin);
    int sc[8], mn[8];
    UnpackScaleMinK4(b[i].scales, sc, mn);
    for (int e = 0; e < kQKK; ++e) {
      dst[e] = d * static_cast<float>(sc[e / 32] * Nibble4K(b[i].qs, e)) -
               dmin * static_cast<float>(mn[e / 32]);
    }
  }
}
void QuantizeQ4_K(const float* src, void* dst, int64_t n) {
  BlockQ4_K* b = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    int sc[8], mn[8];
    uint8_t q[kQKK];
    QuantizeAffineK(src, 32, 15, 63, &b[i].d, &b[i].dmin, sc, mn, q);
    PackScaleMinK4(sc, mn, b[i].scales);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    for (int e = 0; e < kQKK; ++e) SetNibble4K(b[i].qs, e, q[e]);
  }
}
float VecDotQ4_K(int64_t n, const void* w, const void* a) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sc[8], mn[8];
    UnpackScaleMinK4(x[i].scales, sc, mn);
    int scaled = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      int s = 0;
      for (int e = 32 * j; e < 32 * (j + 1); ++e) s += Nibble4K(x[i].qs, e) * y[i].qs[e];
      scaled += sc[j] * s;
      mins += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += y[i].d * (Fp16ToFp32(x[i].d) * static_cast<float>(scaled) -
                     Fp16ToFp32(x[i].dmin) * static_cast<float>(mins));
  }
  return sum;
}

// ---- Q5_K: as Q4_K with q in [0, 31] ----

void DequantizeQ5_K(const void* src, float* dst, int64_t n) {
  const BlockQ5_K* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = Fp16ToFp32(b[i].d), dmin = Fp16ToFp32(b[i].dmin);
    int sc[8], mn[8];
    UnpackScaleMinK4(b[i].scales, sc, mn);
    for (int e = 0; e < kQKK; ++e) {
      const int q = Nibble4K(b[i].qs, e) | HighBit(b[i].qh, e) << 4;
      dst[e] = d * static_cast<float>(sc[e / 32] * q) - dmin * static_cast<float>(mn[e / 32]);
    }
  }
}
void QuantizeQ5_K(const float* src, void* dst, int64_t n) {
  BlockQ5_K* b = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    int sc[8], mn[8];
    uint8_t q[kQKK];
    QuantizeAffineK(src, 32, 31, 63, &b[i].d, &b[i].dmin, sc, mn, q);
    PackScaleMinK4(sc, mn, b[i].scales);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int e = 0; e < kQKK; ++e) {
      SetNibble4K(b[i].qs, e, q[e] & 0xF);
      SetHighBit(b[i].qh, e, q[e] >> 4);
    }
  }
}
float VecDotQ5_K(int64_t n, const void* w, const void* a) {
  const BlockQ5_K* x = static_cast<const BlockQ5_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sc[8], mn[8];
    UnpackScaleMinK4(x[i].scales, sc, mn);
    int scaled = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      int s = 0;
      for (int e = 32 * j; e < 32 * (j + 1); ++e) {
        s += (Nibble4K(x[i].qs, e) | HighBit(x[i].qh, e) << 4) * y[i].qs[e];
      }
      scaled += sc[j] * s;
      mins += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += y[i].d * (Fp16ToFp32(x[i].d) * static_cast<float>(scaled) -
                     Fp16ToFp32(x[i].dmin) * static_cast<float>(mins));
  }
  return sum;
}

// ---- Q6_K: x = d*sc*q, q in [-32, 31], int8 sc per 16 ----

void DequantizeQ6_K(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = Fp16ToFp32(b[i].d);
    for (int e = 0; e < kQKK; ++e) {
      dst[e] = d * static_cast<float>(b[i].scales[e / 16] * (Six(b[i].ql, b[i].qh, e) - 32));
    }
  }
}
void QuantizeQ6_K(const float* src, void* dst, int64_t n) {
  BlockQ6_K* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    int sc[16], q[kQKK];
    QuantizeSymmetricK(src, 32, 128, &b[i].d, sc, q);
    for (int j = 0; j < 16; ++j) b[i].scales[j] = static_cast<int8_t>(sc[j]);
    std::memset(b[i].ql, 0, sizeof(b[i].ql));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int e = 0; e < kQKK; ++e) SetSix(b[i].ql, b[i].qh, e, q[e] + 32);
  }
}
float VecDotQ6_K(int64_t n, const void* w, const void* a) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int total = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * (j + 1); ++e) s += (Six(x[i].ql, x[i].qh, e) - 32) * y[i].qs[e];
      total += x[i].scales[j] * s;
    }
    sum += y[i].d * Fp16ToFp32(x[i].d) * static_cast<float>(total);
  }
  return sum;
}

// ---- Q8_K (activations): x = d*q, f32 d = absmax/127, bsums of each 16 ----

void DequantizeQ8_K(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    for (int e = 0; e < kQKK; ++e) dst[e] = b[i].d * static_cast<float>(b[i].qs[e]);
  }
}
void QuantizeQ8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    float amax = 0;
    for (int e = 0; e < kQKK; ++e) amax = std::fmax(amax, std::fabs(src[e]));
    b[i].d = amax / 127;
    const float id = amax > 0 ? 127 / amax : 0;
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int e = 16 * j; e < 16 * (j + 1); ++e) {
        b[i].qs[e] = static_cast<int8_t>(Clamp(RoundToInt(src[e] * id), -127, 127));
        sum += b[i].qs[e];
      }
      b[i].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace tandem::quant::internal

namespace tandem::quant {
void UnpackScalesMinsK4(const uint8_t* packed, int* sc, int* mn) { internal::UnpackScaleMinK4(packed, sc, mn); }
int StoredQ6K(const uint8_t* ql, const uint8_t* qh, int e) { return internal::Six(ql, qh, e); }
}  // namespace tandem::quant
