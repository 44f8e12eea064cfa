// The NEON kernel table (AArch64 Advanced SIMD, ARMv8-A base; compiled with -march=armv8-a).
//
// This file is also the source of the dot-product table: kernels_neondot.cc defines
// TANDEM_NEON_SDOT and includes it, compiled with -march=armv8.2-a+dotprod. The integer dot
// kernels are written once over Dot16 (16 int8 products added into an int32x4 accumulator),
// which is SDOT there and a widening multiply with pairwise accumulation here; everything else
// (float dots, float ops, activation quantizers) exists only in the base NEON build, and the
// dot-product table inherits it. All code sits in an unnamed namespace, so each build gets its
// own copy compiled with its own flags.
//
// Dot products: each weight type has a struct with Run<NA>, one weight row against NA activation
// rows; vec_dot is Run<1>, vec_dot_multi dispatches na to Run<na> (up to kRowsPerPass rows a
// pass). Each weight block is loaded and unpacked once and used for all NA rows of a pass.
// Integer sums stay in vector registers for a block (32-element formats) or super-block (K
// formats), are scaled in float into a vector accumulator per row, and are reduced horizontally
// once at the end of the row. With one row, alternate
// accumulators break the dependency chains. Only the total of the four lanes of a Dot16 result
// is ever used, so the two Dot16 forms (which spread the partial sums differently over the
// lanes) give identical results.
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "kernels/internal.h"
#include "quant/quant.h"

namespace tandem::kernels::internal {
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

// ---- helpers ----

// acc + the 16 products a[i]*b[i], spread over the four lanes.
inline int32x4_t Dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(TANDEM_NEON_SDOT)
  return vdotq_s32(acc, a, b);
#else
  // |a*b| <= 128*128 fits int16; pairs of products are added into the int32 lanes.
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

// a0 . b0 + a1 . b1 over 32 int8 values.
inline int32x4_t Dot32(int8x16_t a0, int8x16_t b0, int8x16_t a1, int8x16_t b1) {
  return Dot16(Dot16(vdupq_n_s32(0), a0, b0), a1, b1);
}

inline float F16(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, sizeof f);
  return static_cast<float>(f);
}

inline int8x16_t S8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

// Activation row r of a multi-row call.
template <class B>
inline const B* Row(const void* a, size_t stride, int r) {
  const uint8_t* p = static_cast<const uint8_t*>(a) + static_cast<size_t>(r) * stride;
  return reinterpret_cast<const B*>(p);
}

// The fifth bits of a 32-element block (Q5_0, Q5_1): bit j of the little-endian qh is element
// j's; returns 0x10 in the bytes whose bit is set, for elements 0..15 (*lo) and 16..31 (*hi).
inline void FifthBits(const uint8_t* qh, uint8x16_t* lo, uint8x16_t* hi) {
  static const uint8_t kIdxLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const uint8_t kIdxHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  uint32_t h;
  std::memcpy(&h, qh, sizeof h);
  const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(h));
  const uint8x16_t bit = vld1q_u8(kBit), sixteen = vdupq_n_u8(0x10);
  *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kIdxLo)), bit), sixteen);
  *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kIdxHi)), bit), sixteen);
}

// Q4_K / Q5_K: the eight 6-bit scales and mins from their 12 packed bytes (layout in
// quant/quant_k.cc): bytes 0-3 low 6 bits sc[0..3], bytes 4-7 mn[0..3], bytes 8-11 the low
// nibbles of sc[4..7] and mn[4..7], whose top two bits are bits 6-7 of bytes 0-3 and 4-7.
inline void ScaleMinK4(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  uint32_t w[3];
  std::memcpy(w, s, sizeof w);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu, mn_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(mn, &mn_lo, 4);
  std::memcpy(mn + 4, &mn_hi, 4);
}

// Q3_K: the sixteen signed 6-bit scales (stored +32) from their 12 packed bytes: low nibbles of
// sc[0..7] in bytes 0-7, high nibbles of bytes 0-7 for sc[8..15]; top two bits of sc[j] at bit
// 2*(j/4) of byte 8 + j%4.
inline void ScalesQ3K(const uint8_t* s, int8_t* sc) {
  uint32_t w[3];
  std::memcpy(w, s, sizeof w);
  uint32_t u[4];
  u[0] = (w[0] & 0x0f0f0f0fu) | ((w[2] & 0x03030303u) << 4);
  u[1] = (w[1] & 0x0f0f0f0fu) | (((w[2] >> 2) & 0x03030303u) << 4);
  u[2] = ((w[0] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 4) & 0x03030303u) << 4);
  u[3] = ((w[1] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 6) & 0x03030303u) << 4);
  uint8_t b[16];
  std::memcpy(b, u, sizeof b);
  vst1q_s8(sc, vsubq_s8(S8(vld1q_u8(b)), vdupq_n_s8(32)));
}

// The K kernels sum the sub-blocks of a super-block into isum[r][0] and isum[r][kHi]: two
// independent chains when there is one row, one chain per row otherwise (registers are then
// better spent on rows).
template <int NA>
inline constexpr int kHi = NA == 1 ? 1 : 0;

template <int NA>
inline int32x4_t IsumTotal(const int32x4_t* isum) {
  return kHi<NA> ? vaddq_s32(isum[0], isum[1]) : isum[0];
}

// vec_dot and vec_dot_multi from a kernel struct K with Run<NA>.
template <class K>
float Single(int64_t n, const void* w, const void* a) {
  float out;
  K::template Run<1>(n, w, a, 0, &out);
  return out;
}

// Rows per pass of vec_dot_multi. Without SDOT each Dot16 needs two more registers, and eight
// rows of accumulators no longer fit the 32 vector registers with the unpacked weights; unpacking
// a block twice costs less than spilling accumulators.
#if defined(TANDEM_NEON_SDOT)
inline constexpr int kRowsPerPass = 8;
#else
inline constexpr int kRowsPerPass = 4;
#endif
static_assert(kRowsPerPass <= kMaxMultiRows);

// Run<na> for 1 <= na <= kRowsPerPass.
template <class K, int NA = 1>
void RunRows(int na, int64_t n, const void* w, const void* a, size_t stride, float* out) {
  if constexpr (NA < kRowsPerPass) {
    if (na > NA) return RunRows<K, NA + 1>(na, n, w, a, stride, out);
  }
  K::template Run<NA>(n, w, a, stride, out);
}

template <class K>
void Multi(int64_t n, const void* w, const void* a, size_t stride, int na, float* out) {
  for (; na > kRowsPerPass; na -= kRowsPerPass, out += kRowsPerPass) {
    K::template Run<kRowsPerPass>(n, w, a, stride, out);
    a = static_cast<const uint8_t*>(a) + kRowsPerPass * stride;
  }
  RunRows<K>(na, n, w, a, stride, out);
}

template <class K>
void Set(KernelTable* t, TensorType type) {
  TypeKernels& k = t->types[static_cast<uint32_t>(type)];
  k.vec_dot = Single<K>;
  k.vec_dot_multi = Multi<K>;
}

// ---- 32-element block formats ----

// Shared loop of the 32-element formats: Unpack(block, &w0, &w1) gives the weights of elements
// 0..15 and 16..31 as int8; d(block) the weight scale; Offset (Q4_1, Q5_1) adds m * s.
template <class WB, class AB, int NA, class Unpack, bool kOffset>
void Dot32Blocks(int64_t n, const void* w, const void* a, size_t stride, float* out,
                 Unpack unpack) {
  const WB* x = static_cast<const WB*>(w);
  const int64_t nb = n / kQK;
  float32x4_t acc0[NA], acc1[NA];
  float off[NA];
  for (int r = 0; r < NA; ++r) {
    acc0[r] = vdupq_n_f32(0);
    acc1[r] = vdupq_n_f32(0);
    off[r] = 0;
  }
  auto block = [&](int64_t i, float32x4_t* acc) {
    int8x16_t w0, w1;
    unpack(x[i], &w0, &w1);
    const float dw = F16(x[i].d);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const AB& y = Row<AB>(a, stride, r)[i];
      const int32x4_t s = Dot32(w0, vld1q_s8(y.qs), w1, vld1q_s8(y.qs + 16));
      acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), dw * F16(y.d));
      if constexpr (kOffset) off[r] += F16(x[i].m) * F16(y.s);
    }
  };
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    block(i, acc0);
    // One chain per row whatever NA: a row's result must not depend on how many rows share the
    // call (batch invariance, as in x86_common.h); acc1 stays zero and adds exactly.
    block(i + 1, acc0);
  }
  if (i < nb) block(i, acc0);
  for (int r = 0; r < NA; ++r) out[r] = vaddvq_f32(vaddq_f32(acc0[r], acc1[r])) + off[r];
}

struct KQ8_0 {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    Dot32Blocks<BlockQ8_0, BlockQ8_0, NA, decltype(&Unpack), false>(n, w, a, stride, out, Unpack);
  }
  static void Unpack(const BlockQ8_0& b, int8x16_t* w0, int8x16_t* w1) {
    *w0 = vld1q_s8(b.qs);
    *w1 = vld1q_s8(b.qs + 16);
  }
};

struct KQ4_0 {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    Dot32Blocks<BlockQ4_0, BlockQ8_0, NA, decltype(&Unpack), false>(n, w, a, stride, out, Unpack);
  }
  static void Unpack(const BlockQ4_0& b, int8x16_t* w0, int8x16_t* w1) {
    const uint8x16_t q = vld1q_u8(b.qs);
    *w0 = vsubq_s8(S8(vandq_u8(q, vdupq_n_u8(0xF))), vdupq_n_s8(8));
    *w1 = vsubq_s8(S8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
  }
};

struct KQ4_1 {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    Dot32Blocks<BlockQ4_1, BlockQ8_1, NA, decltype(&Unpack), true>(n, w, a, stride, out, Unpack);
  }
  static void Unpack(const BlockQ4_1& b, int8x16_t* w0, int8x16_t* w1) {
    const uint8x16_t q = vld1q_u8(b.qs);
    *w0 = S8(vandq_u8(q, vdupq_n_u8(0xF)));
    *w1 = S8(vshrq_n_u8(q, 4));
  }
};

struct KQ5_0 {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    Dot32Blocks<BlockQ5_0, BlockQ8_0, NA, decltype(&Unpack), false>(n, w, a, stride, out, Unpack);
  }
  static void Unpack(const BlockQ5_0& b, int8x16_t* w0, int8x16_t* w1) {
    uint8x16_t h0, h1;
    FifthBits(b.qh, &h0, &h1);
    const uint8x16_t q = vld1q_u8(b.qs);
    *w0 = vsubq_s8(S8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0xF)), h0)), vdupq_n_s8(16));
    *w1 = vsubq_s8(S8(vorrq_u8(vshrq_n_u8(q, 4), h1)), vdupq_n_s8(16));
  }
};

struct KQ5_1 {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    Dot32Blocks<BlockQ5_1, BlockQ8_1, NA, decltype(&Unpack), true>(n, w, a, stride, out, Unpack);
  }
  static void Unpack(const BlockQ5_1& b, int8x16_t* w0, int8x16_t* w1) {
    uint8x16_t h0, h1;
    FifthBits(b.qh, &h0, &h1);
    const uint8x16_t q = vld1q_u8(b.qs);
    *w0 = S8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0xF)), h0));
    *w1 = S8(vorrq_u8(vshrq_n_u8(q, 4), h1));
  }
};

// ---- K formats (256-element super-blocks, activations Q8_K) ----

// Q4_K and Q5_K: x = d*sc*q - dmin*mn per 32 elements. Each 64-element chunk k holds sub-block
// 2k in the low nibbles of qs[32k..32k+31] and 2k+1 in the high nibbles; Q5_K's fifth bit of
// sub-block j is bit j of qh[e%32].
template <class WB, bool kFive, int NA>
void DotQ45K(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  const WB* x = static_cast<const WB*>(w);
  float32x4_t acc[NA];
  for (int r = 0; r < NA; ++r) acc[r] = vdupq_n_f32(0);
  const uint8x16_t m4 = vdupq_n_u8(0xF), m16 = vdupq_n_u8(0x10);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[8], mn[8];
    ScaleMinK4(x[i].scales, sc, mn);
    const int16x8_t mn16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    int32x4_t isum[NA][2];  // [r][kHi]: two chains with one row, one with several
    for (int r = 0; r < NA; ++r) isum[r][0] = isum[r][1] = vdupq_n_s32(0);
    uint8x16_t hb0 = vdupq_n_u8(0), hb1 = vdupq_n_u8(0);
    if constexpr (kFive) {
      hb0 = vld1q_u8(x[i].qh);
      hb1 = vld1q_u8(x[i].qh + 16);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * k), q1 = vld1q_u8(x[i].qs + 32 * k + 16);
      uint8x16_t l0 = vandq_u8(q0, m4), l1 = vandq_u8(q1, m4);
      uint8x16_t h0 = vshrq_n_u8(q0, 4), h1 = vshrq_n_u8(q1, 4);
      if constexpr (kFive) {
        // hb holds qh >> 2k: bit 0 is sub-block 2k's fifth bit, bit 1 sub-block 2k+1's.
        l0 = vorrq_u8(l0, vandq_u8(vshlq_n_u8(hb0, 4), m16));
        l1 = vorrq_u8(l1, vandq_u8(vshlq_n_u8(hb1, 4), m16));
        h0 = vorrq_u8(h0, vandq_u8(vshlq_n_u8(hb0, 3), m16));
        h1 = vorrq_u8(h1, vandq_u8(vshlq_n_u8(hb1, 3), m16));
        hb0 = vshrq_n_u8(hb0, 2);
        hb1 = vshrq_n_u8(hb1, 2);
      }
#pragma GCC unroll 8
      for (int r = 0; r < NA; ++r) {
        const int8_t* y = Row<BlockQ8_K>(a, stride, r)[i].qs + 64 * k;
        const int32x4_t sl = Dot32(S8(l0), vld1q_s8(y), S8(l1), vld1q_s8(y + 16));
        const int32x4_t sh = Dot32(S8(h0), vld1q_s8(y + 32), S8(h1), vld1q_s8(y + 48));
        isum[r][0] = vmlaq_n_s32(isum[r][0], sl, sc[2 * k]);
        int32x4_t& hi = isum[r][kHi<NA>];
        hi = vmlaq_n_s32(hi, sh, sc[2 * k + 1]);
      }
    }
    const float d = F16(x[i].d), dmin = F16(x[i].dmin);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      // Sums of the activations of each 32-element sub-block, times its min.
      const int16x8_t bs = vpaddq_s16(vld1q_s16(y.bsums), vld1q_s16(y.bsums + 8));
      const int32x4_t mins =
          vmlal_high_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(mn16)), bs, mn16);
      acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(IsumTotal<NA>(isum[r])), d * y.d);
      acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(mins), -dmin * y.d);
    }
  }
  for (int r = 0; r < NA; ++r) out[r] = vaddvq_f32(acc[r]);
}

struct KQ4_K {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    DotQ45K<BlockQ4_K, false, NA>(n, w, a, stride, out);
  }
};

struct KQ5_K {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    DotQ45K<BlockQ5_K, true, NA>(n, w, a, stride, out);
  }
};

// Q6_K: x = d*sc*(u - 32) with int8 sc per 16. A 128-element half h has its low nibbles in
// ql[64h..64h+63] (elements 0..63 low, 64..127 high) and its top two bits in qh[32h..32h+31]
// (element e at bits 2*(e/32) of qh[e%32]).
struct KQ6_K {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    const BlockQ6_K* x = static_cast<const BlockQ6_K*>(w);
    float32x4_t acc[NA];
    for (int r = 0; r < NA; ++r) acc[r] = vdupq_n_f32(0);
    const uint8x16_t m4 = vdupq_n_u8(0xF), m3 = vdupq_n_u8(0x30);
    const int8x16_t bias = vdupq_n_s8(32);
    for (int64_t i = 0; i < n / kQKK; ++i) {
      int32x4_t isum[NA][2];  // [r][kHi]: two chains with one row, one with several
      for (int r = 0; r < NA; ++r) isum[r][0] = isum[r][1] = vdupq_n_s32(0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = x[i].ql + 64 * h;
        const uint8_t* qh = x[i].qh + 32 * h;
        const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
        const uint8x16_t l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
        const uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
        int8x16_t q[8];  // elements 16v .. 16v+15 of the half
        q[0] = S8(vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(h0, 4), m3)));
        q[1] = S8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(h1, 4), m3)));
        q[2] = S8(vorrq_u8(vandq_u8(l2, m4), vandq_u8(vshlq_n_u8(h0, 2), m3)));
        q[3] = S8(vorrq_u8(vandq_u8(l3, m4), vandq_u8(vshlq_n_u8(h1, 2), m3)));
        q[4] = S8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h0, m3)));
        q[5] = S8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(h1, m3)));
        q[6] = S8(vorrq_u8(vshrq_n_u8(l2, 4), vandq_u8(vshrq_n_u8(h0, 2), m3)));
        q[7] = S8(vorrq_u8(vshrq_n_u8(l3, 4), vandq_u8(vshrq_n_u8(h1, 2), m3)));
        for (int v = 0; v < 8; ++v) q[v] = vsubq_s8(q[v], bias);
        const int8_t* sc = x[i].scales + 8 * h;
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) {
          const int8_t* y = Row<BlockQ8_K>(a, stride, r)[i].qs + 128 * h;
          const int32x4_t zero = vdupq_n_s32(0);
#pragma GCC unroll 4
          for (int v = 0; v < 8; v += 2) {
            isum[r][0] =
                vmlaq_n_s32(isum[r][0], Dot16(zero, q[v], vld1q_s8(y + 16 * v)), sc[v]);
            int32x4_t& hi = isum[r][kHi<NA>];
            hi = vmlaq_n_s32(hi, Dot16(zero, q[v + 1], vld1q_s8(y + 16 * v + 16)), sc[v + 1]);
          }
        }
      }
      const float d = F16(x[i].d);
#pragma GCC unroll 8
      for (int r = 0; r < NA; ++r) {
        const float dy = Row<BlockQ8_K>(a, stride, r)[i].d;
        acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(IsumTotal<NA>(isum[r])), d * dy);
      }
    }
    for (int r = 0; r < NA; ++r) out[r] = vaddvq_f32(acc[r]);
  }
};

// Q3_K: x = d*sc*(low2 - 4 + 4*hbit) with signed 6-bit sc per 16. Within a 128-element half h,
// group j (32 elements) takes bits 2j..2j+1 of qs[32h..32h+31] and bit 4h+j of hmask[0..31].
struct KQ3_K {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    const BlockQ3_K* x = static_cast<const BlockQ3_K*>(w);
    float32x4_t acc[NA];
    for (int r = 0; r < NA; ++r) acc[r] = vdupq_n_f32(0);
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(4);
    const int8x16_t four = vdupq_n_s8(4);
    for (int64_t i = 0; i < n / kQKK; ++i) {
      int8_t sc[16];
      ScalesQ3K(x[i].scales, sc);
      int32x4_t isum[NA][2];  // [r][kHi]: two chains with one row, one with several
      for (int r = 0; r < NA; ++r) isum[r][0] = isum[r][1] = vdupq_n_s32(0);
      // hm: hmask >> g, so bit 0 is the high bit of group g (advanced by one per group).
      uint8x16_t hm0 = vld1q_u8(x[i].hmask), hm1 = vld1q_u8(x[i].hmask + 16);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * h), q1 = vld1q_u8(x[i].qs + 32 * h + 16);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int8x16_t w0 = vsubq_s8(
              S8(vorrq_u8(vandq_u8(q0, m3), vandq_u8(vshlq_n_u8(hm0, 2), m4))), four);
          const int8x16_t w1 = vsubq_s8(
              S8(vorrq_u8(vandq_u8(q1, m3), vandq_u8(vshlq_n_u8(hm1, 2), m4))), four);
          q0 = vshrq_n_u8(q0, 2);
          q1 = vshrq_n_u8(q1, 2);
          hm0 = vshrq_n_u8(hm0, 1);
          hm1 = vshrq_n_u8(hm1, 1);
          const int g = 4 * h + j;
#pragma GCC unroll 8
          for (int r = 0; r < NA; ++r) {
            const int8_t* y = Row<BlockQ8_K>(a, stride, r)[i].qs + 32 * g;
            const int32x4_t zero = vdupq_n_s32(0);
            isum[r][0] = vmlaq_n_s32(isum[r][0], Dot16(zero, w0, vld1q_s8(y)), sc[2 * g]);
            int32x4_t& hi = isum[r][kHi<NA>];
            hi = vmlaq_n_s32(hi, Dot16(zero, w1, vld1q_s8(y + 16)), sc[2 * g + 1]);
          }
        }
      }
      const float d = F16(x[i].d);
#pragma GCC unroll 8
      for (int r = 0; r < NA; ++r) {
        const float dy = Row<BlockQ8_K>(a, stride, r)[i].d;
        acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(IsumTotal<NA>(isum[r])), d * dy);
      }
    }
    for (int r = 0; r < NA; ++r) out[r] = vaddvq_f32(acc[r]);
  }
};

// Q2_K: x = d*sc*q - dmin*mn, q in [0, 3], 4-bit sc (low nibble) and mn (high) per 16. Group j
// of half h (32 elements) takes bits 2j..2j+1 of qs[32h..32h+31].
struct KQ2_K {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    const BlockQ2_K* x = static_cast<const BlockQ2_K*>(w);
    float32x4_t acc[NA];
    for (int r = 0; r < NA; ++r) acc[r] = vdupq_n_f32(0);
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const uint8x16_t s = vld1q_u8(x[i].scales);
      uint8_t sc[16];
      vst1q_u8(sc, vandq_u8(s, vdupq_n_u8(0xF)));
      const uint8x16_t mn = vshrq_n_u8(s, 4);
      const int16x8_t mn_lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
      const int16x8_t mn_hi = vreinterpretq_s16_u16(vmovl_high_u8(mn));
      int32x4_t isum[NA][2];  // [r][kHi]: two chains with one row, one with several
      for (int r = 0; r < NA; ++r) isum[r][0] = isum[r][1] = vdupq_n_s32(0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * h), q1 = vld1q_u8(x[i].qs + 32 * h + 16);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int8x16_t w0 = S8(vandq_u8(q0, m3)), w1 = S8(vandq_u8(q1, m3));
          q0 = vshrq_n_u8(q0, 2);
          q1 = vshrq_n_u8(q1, 2);
          const int g = 4 * h + j;
#pragma GCC unroll 8
          for (int r = 0; r < NA; ++r) {
            const int8_t* y = Row<BlockQ8_K>(a, stride, r)[i].qs + 32 * g;
            const int32x4_t zero = vdupq_n_s32(0);
            isum[r][0] = vmlaq_n_s32(isum[r][0], Dot16(zero, w0, vld1q_s8(y)), sc[2 * g]);
            int32x4_t& hi = isum[r][kHi<NA>];
            hi = vmlaq_n_s32(hi, Dot16(zero, w1, vld1q_s8(y + 16)), sc[2 * g + 1]);
          }
        }
      }
      const float d = F16(x[i].d), dmin = F16(x[i].dmin);
#pragma GCC unroll 8
      for (int r = 0; r < NA; ++r) {
        const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
        const int16x8_t b0 = vld1q_s16(y.bsums), b1 = vld1q_s16(y.bsums + 8);
        int32x4_t mins = vmull_s16(vget_low_s16(b0), vget_low_s16(mn_lo));
        mins = vmlal_high_s16(mins, b0, mn_lo);
        mins = vmlal_s16(mins, vget_low_s16(b1), vget_low_s16(mn_hi));
        mins = vmlal_high_s16(mins, b1, mn_hi);
        acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(IsumTotal<NA>(isum[r])), d * y.d);
        acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(mins), -dmin * y.d);
      }
    }
    for (int r = 0; r < NA; ++r) out[r] = vaddvq_f32(acc[r]);
  }
};

// The integer dot kernels, the part of the table the dot-product build replaces.
void FillIntegerDots(KernelTable* t) {
  Set<KQ4_0>(t, TensorType::kQ4_0);
  Set<KQ4_1>(t, TensorType::kQ4_1);
  Set<KQ5_0>(t, TensorType::kQ5_0);
  Set<KQ5_1>(t, TensorType::kQ5_1);
  Set<KQ8_0>(t, TensorType::kQ8_0);
  Set<KQ2_K>(t, TensorType::kQ2_K);
  Set<KQ3_K>(t, TensorType::kQ3_K);
  Set<KQ4_K>(t, TensorType::kQ4_K);
  Set<KQ5_K>(t, TensorType::kQ5_K);
  Set<KQ6_K>(t, TensorType::kQ6_K);
}

#if !defined(TANDEM_NEON_SDOT)

// ---- float weights (F32, F16, BF16) against F32 activations ----

// Load(w, i, v) gives weights i + 4v .. i + 4v + 3 as float; Scalar(w, i) one weight (tail).
// Each row gets two accumulators whatever NA (batch invariance: the same additions in the same
// order for a row alone and in a group; two chains overlap, and 8 rows x 2 fit the registers).
template <class Weights, int NA>
void DotFloat(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int kAcc = 2;
  float32x4_t acc[NA][kAcc];
  for (int r = 0; r < NA; ++r) {
    for (int c = 0; c < kAcc; ++c) acc[r][c] = vdupq_n_f32(0);
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t x[4];
    Weights::Load16(w, i, x);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const float* y = Row<float>(a, stride, r) + i;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        acc[r][v % kAcc] = vfmaq_f32(acc[r][v % kAcc], x[v], vld1q_f32(y + 4 * v));
      }
    }
  }
  for (int r = 0; r < NA; ++r) {
    for (int c = 1; c < kAcc; ++c) acc[r][0] = vaddq_f32(acc[r][0], acc[r][c]);
    float s = vaddvq_f32(acc[r][0]);
    const float* y = Row<float>(a, stride, r);
    for (int64_t j = i; j < n; ++j) s += Weights::One(w, j) * y[j];
    out[r] = s;
  }
}

struct WF32 {
  static void Load16(const void* w, int64_t i, float32x4_t* x) {
    const float* p = static_cast<const float*>(w) + i;
    for (int v = 0; v < 4; ++v) x[v] = vld1q_f32(p + 4 * v);
  }
  static float One(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};

struct WF16 {
  static void Load16(const void* w, int64_t i, float32x4_t* x) {
    const uint16_t* p = static_cast<const uint16_t*>(w) + i;
    const float16x8_t h0 = vreinterpretq_f16_u16(vld1q_u16(p));
    const float16x8_t h1 = vreinterpretq_f16_u16(vld1q_u16(p + 8));
    x[0] = vcvt_f32_f16(vget_low_f16(h0));
    x[1] = vcvt_high_f32_f16(h0);
    x[2] = vcvt_f32_f16(vget_low_f16(h1));
    x[3] = vcvt_high_f32_f16(h1);
  }
  static float One(const void* w, int64_t i) { return F16(static_cast<const uint16_t*>(w)[i]); }
};

// bf16 is the top half of an f32: widening by a 16-bit shift is exact.
struct WBF16 {
  static void Load16(const void* w, int64_t i, float32x4_t* x) {
    const uint16_t* p = static_cast<const uint16_t*>(w) + i;
    const uint16x8_t h0 = vld1q_u16(p), h1 = vld1q_u16(p + 8);
    x[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
    x[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
    x[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
    x[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
  }
  static float One(const void* w, int64_t i) {
    return quant::Bf16ToFp32(static_cast<const uint16_t*>(w)[i]);
  }
};

template <class Weights>
struct KFloat {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    DotFloat<Weights, NA>(n, w, a, stride, out);
  }
};

// ---- activation quantizers ----

// round(x[i] * id) clamped to [-127, 127] for 16 floats (round to nearest even, as lrint).
inline int8x16_t Quantize16(const float32x4_t* x, float id) {
  int16x8_t h[2];
  for (int k = 0; k < 2; ++k) {
    const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(x[2 * k], id));
    const int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(x[2 * k + 1], id));
    h[k] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
  }
  const int8x16_t q = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
  return vmaxq_s8(q, vdupq_n_s8(-127));
}

inline float AbsMax(const float32x4_t* x, int count) {
  float32x4_t m = vabsq_f32(x[0]);
  for (int v = 1; v < count; ++v) m = vmaxq_f32(m, vabsq_f32(x[v]));
  return vmaxvq_f32(m);
}

// Q8_0 and Q8_1 (32-element blocks, fp16 scale amax/127 rounded before quantizing against it).
template <bool kSum>
void QuantizeQ8Blocks(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float32x4_t x[8];
    for (int v = 0; v < 8; ++v) x[v] = vld1q_f32(src + 4 * v);
    const uint16_t d16 = quant::Fp32ToFp16(AbsMax(x, 8) / 127);
    const float d = F16(d16);
    const float id = d != 0 ? 1 / d : 0;
    const int8x16_t q0 = Quantize16(x, id), q1 = Quantize16(x + 4, id);
    if constexpr (kSum) {
      BlockQ8_1& b = static_cast<BlockQ8_1*>(dst)[i];
      b.d = d16;
      vst1q_s8(b.qs, q0);
      vst1q_s8(b.qs + 16, q1);
      const int sum = vaddlvq_s8(q0) + vaddlvq_s8(q1);
      b.s = quant::Fp32ToFp16(d * static_cast<float>(sum));
    } else {
      BlockQ8_0& b = static_cast<BlockQ8_0*>(dst)[i];
      b.d = d16;
      vst1q_s8(b.qs, q0);
      vst1q_s8(b.qs + 16, q1);
    }
  }
}

void QuantizeQ8_0(const float* src, void* dst, int64_t n) { QuantizeQ8Blocks<false>(src, dst, n); }
void QuantizeQ8_1(const float* src, void* dst, int64_t n) { QuantizeQ8Blocks<true>(src, dst, n); }

// Q8_K: f32 scale amax/127 per 256, int8 values, and the sum of each 16.
void QuantizeQ8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    float32x4_t m = vdupq_n_f32(0);
    for (int e = 0; e < kQKK; e += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(src + e)));
    const float amax = vmaxvq_f32(m);
    b[i].d = amax / 127;
    const float id = amax > 0 ? 127 / amax : 0;
    for (int j = 0; j < 16; ++j) {
      float32x4_t x[4];
      for (int v = 0; v < 4; ++v) x[v] = vld1q_f32(src + 16 * j + 4 * v);
      const int8x16_t q = Quantize16(x, id);
      vst1q_s8(b[i].qs + 16 * j, q);
      b[i].bsums[j] = vaddlvq_s8(q);
    }
  }
}

void CopyF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// ---- float operations ----

// e^x to about 2 ulp for x in [-87, 88] (clamped outside): x = k ln2 + r with |r| <= ln2/2,
// e^r by its degree-6 Taylor polynomial (truncation below 2e-7 relative), times 2^k.
inline float32x4_t Exp(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
  const float32x4_t k = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
  float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(0.693145751953125f));  // ln2, high bits
  r = vfmsq_f32(r, k, vdupq_n_f32(1.42860682030941723e-6f));          // ln2, the rest
  float32x4_t p = vdupq_n_f32(1.0f / 720);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

float SumSquares(const float* x, int64_t n, int64_t* done) {
  float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
    s0 = vfmaq_f32(s0, a, a);
    s1 = vfmaq_f32(s1, b, b);
  }
  *done = i;
  return vaddvq_f32(vaddq_f32(s0, s1));
}

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  int64_t i = 0;
  float ss = SumSquares(x, n, &i);
  for (; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (i = 0; i + 4 <= n; i += 4) {
    vst1q_f32(y + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), inv), vld1q_f32(w + i)));
  }
  for (; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void Softmax(float* x, int64_t n) {
  int64_t i = 0;
  float32x4_t mv = vdupq_n_f32(-INFINITY);
  for (; i + 4 <= n; i += 4) mv = vmaxq_f32(mv, vld1q_f32(x + i));
  float mx = vmaxvq_f32(mv);
  for (; i < n; ++i) mx = std::fmax(mx, x[i]);
  float32x4_t sv = vdupq_n_f32(0);
  const float32x4_t m = vdupq_n_f32(mx);
  for (i = 0; i + 4 <= n; i += 4) {
    const float32x4_t e = Exp(vsubq_f32(vld1q_f32(x + i), m));
    vst1q_f32(x + i, e);
    sv = vaddq_f32(sv, e);
  }
  float sum = vaddvq_f32(sv);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (i = 0; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), inv));
  for (; i < n; ++i) x[i] *= inv;
}

void SiluMul(const float* gate, const float* up, float* y, int64_t n) {
  int64_t i = 0;
  const float32x4_t one = vdupq_n_f32(1);
  for (; i + 4 <= n; i += 4) {
    const float32x4_t g = vld1q_f32(gate + i);
    const float32x4_t s = vdivq_f32(g, vaddq_f32(one, Exp(vnegq_f32(g))));
    vst1q_f32(y + i, vmulq_f32(s, vld1q_f32(up + i)));
  }
  for (; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void Add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

void Scale(float* x, float s, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), s));
  for (; i < n; ++i) x[i] *= s;
}

float Dot(const float* a, const float* b, int64_t n) {
  float out;
  DotFloat<WF32, 1>(n, a, b, 0, &out);
  return out;
}

void Axpy(float s, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), s));
  }
  for (; i < n; ++i) y[i] += s * x[i];
}

// One rotation of four pairs (a, b) by (c, s).
inline void Rotate(float32x4_t* a, float32x4_t* b, float32x4_t c, float32x4_t s) {
  const float32x4_t ra = vfmsq_f32(vmulq_f32(*a, c), *b, s);
  *b = vfmaq_f32(vmulq_f32(*a, s), *b, c);
  *a = ra;
}

void Rope(float* x, int64_t head_dim, const float* cos, const float* sin, bool neox) {
  const int64_t half = head_dim / 2;
  int64_t i = 0;
  if (neox) {
    for (; i + 4 <= half; i += 4) {
      float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + half);
      Rotate(&a, &b, vld1q_f32(cos + i), vld1q_f32(sin + i));
      vst1q_f32(x + i, a);
      vst1q_f32(x + i + half, b);
    }
  } else {
    for (; i + 4 <= half; i += 4) {
      float32x4x2_t p = vld2q_f32(x + 2 * i);  // even elements in val[0], odd in val[1]
      Rotate(&p.val[0], &p.val[1], vld1q_f32(cos + i), vld1q_f32(sin + i));
      vst2q_f32(x + 2 * i, p);
    }
  }
  for (; i < half; ++i) {
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0], b = x[i1];
    x[i0] = a * cos[i] - b * sin[i];
    x[i1] = a * sin[i] + b * cos[i];
  }
}


// ---- attention (AttnOps) ----
// Same shape as x86_attention.h: scores in tiles of 4 query rows x 2 key rows (dot-product
// accumulators, reduced at the end), accumulate in tiles of 4 output rows x 16 columns kept in
// registers over all value rows. Rows are F32, F16 or Q8_0; a reader loads 4 values as floats.

template <TensorType T>
struct ARows;

template <>
struct ARows<TensorType::kF32> {
  static constexpr bool kScaled = false;
  static float32x4_t Load4(const void* r, int64_t i) {
    return vld1q_f32(static_cast<const float*>(r) + i);
  }
  static float At(const void* r, int64_t i) { return static_cast<const float*>(r)[i]; }
  static float Scale(const void*, int64_t) { return 1.0f; }
};

template <>
struct ARows<TensorType::kF16> {
  static constexpr bool kScaled = false;
  static float32x4_t Load4(const void* r, int64_t i) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(r) + i)));
  }
  static float At(const void* r, int64_t i) { return F16(static_cast<const uint16_t*>(r)[i]); }
  static float Scale(const void*, int64_t) { return 1.0f; }
};

template <>
struct ARows<TensorType::kQ8_0> {
  static constexpr bool kScaled = true;  // Load4 gives the integers; multiply by Scale
  static float32x4_t Load4(const void* r, int64_t i) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(r)[i / kQK];
    int32_t w;
    std::memcpy(&w, b.qs + i % kQK, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
  }
  static float At(const void* r, int64_t i) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(r)[i / kQK];
    return F16(b.d) * b.qs[i % kQK];
  }
  static float Scale(const void* r, int64_t i) {
    return F16(static_cast<const BlockQ8_0*>(r)[i / kQK].d);
  }
};

template <TensorType T, int QR, int KR>
inline void ScoreTile(int64_t n, const float* q, int64_t ldq, const void* const* rows, float* s,
                      int64_t lds) {
  using R = ARows<T>;
  float32x4_t acc[QR * KR];
  for (int a = 0; a < QR * KR; ++a) acc[a] = vdupq_n_f32(0);
  int64_t i = 0;
  const int64_t step = R::kScaled ? kQK : 4;
  for (; i + step <= n; i += step) {
    float d[KR];
    for (int k = 0; k < KR; ++k) d[k] = R::Scale(rows[k], i);
    for (int u = 0; u < step; u += 4) {
      float32x4_t qv[QR];
      for (int r = 0; r < QR; ++r) qv[r] = vld1q_f32(q + r * ldq + i + u);
      for (int k = 0; k < KR; ++k) {
        float32x4_t kv = R::Load4(rows[k], i + u);
        if constexpr (R::kScaled) kv = vmulq_n_f32(kv, d[k]);
        for (int r = 0; r < QR; ++r) acc[r * KR + k] = vfmaq_f32(acc[r * KR + k], qv[r], kv);
      }
    }
  }
  for (int r = 0; r < QR; ++r) {
    for (int k = 0; k < KR; ++k) {
      float v = vaddvq_f32(acc[r * KR + k]);
      for (int64_t e = i; e < n; ++e) v += q[r * ldq + e] * R::At(rows[k], e);
      s[r * lds + k] = v;
    }
  }
}

template <TensorType T, int KR>
inline void ScoreColumns(int64_t n, const float* q, int64_t ldq, int64_t nq,
                         const void* const* rows, float* s, int64_t lds) {
  int64_t r = 0;
  for (; r + 4 <= nq; r += 4) ScoreTile<T, 4, KR>(n, q + r * ldq, ldq, rows, s + r * lds, lds);
  for (; r < nq; ++r) ScoreTile<T, 1, KR>(n, q + r * ldq, ldq, rows, s + r * lds, lds);
}

template <TensorType T>
void ScoresT(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows,
             int64_t nk, float* s, int64_t lds) {
  int64_t j = 0;
  for (; j + 2 <= nk; j += 2) ScoreColumns<T, 2>(n, q, ldq, nq, rows + j, s + j, lds);
  if (j < nk) ScoreColumns<T, 1>(n, q, ldq, nq, rows + j, s + j, lds);
}

void AttnScores(TensorType type, int64_t n, const float* q, int64_t ldq, int64_t nq,
                const void* const* rows, int64_t nk, float* s, int64_t lds) {
  switch (type) {
    case TensorType::kF16: return ScoresT<TensorType::kF16>(n, q, ldq, nq, rows, nk, s, lds);
    case TensorType::kQ8_0: return ScoresT<TensorType::kQ8_0>(n, q, ldq, nq, rows, nk, s, lds);
    default: return ScoresT<TensorType::kF32>(n, q, ldq, nq, rows, nk, s, lds);
  }
}

// OR output rows x 4*NV columns starting at column c (a multiple of 4*NV), over all value rows.
template <TensorType T, int OR, int NV>
inline void AccTile(int64_t c, const float* p, int64_t ldp, const void* const* rows, int64_t nv,
                    float* o, int64_t ldo) {
  using R = ARows<T>;
  float32x4_t acc[OR][NV];
  for (int r = 0; r < OR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = vld1q_f32(o + r * ldo + c + 4 * v);
  for (int64_t j = 0; j < nv; ++j) {
    float32x4_t x[NV];
    for (int v = 0; v < NV; ++v) x[v] = R::Load4(rows[j], c + 4 * v);
    if constexpr (R::kScaled) {
      const float d = R::Scale(rows[j], c);  // 4 * NV columns from c lie in one block
      for (int v = 0; v < NV; ++v) x[v] = vmulq_n_f32(x[v], d);
    }
    for (int r = 0; r < OR; ++r) {
      const float w = p[r * ldp + j];
      for (int v = 0; v < NV; ++v) acc[r][v] = vfmaq_n_f32(acc[r][v], x[v], w);
    }
  }
  for (int r = 0; r < OR; ++r)
    for (int v = 0; v < NV; ++v) vst1q_f32(o + r * ldo + c + 4 * v, acc[r][v]);
}

template <TensorType T, int NV>
inline void AccColumns(int64_t c, const float* p, int64_t ldp, int64_t no, const void* const* rows,
                       int64_t nv, float* o, int64_t ldo) {
  int64_t r = 0;
  for (; r + 4 <= no; r += 4) AccTile<T, 4, NV>(c, p + r * ldp, ldp, rows, nv, o + r * ldo, ldo);
  for (; r < no; ++r) AccTile<T, 1, NV>(c, p + r * ldp, ldp, rows, nv, o + r * ldo, ldo);
}

template <TensorType T>
void AccumulateT(int64_t n, const float* p, int64_t ldp, int64_t no, const void* const* rows,
                 int64_t nv, float* o, int64_t ldo) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) AccColumns<T, 4>(c, p, ldp, no, rows, nv, o, ldo);
  for (; c + 4 <= n; c += 4) AccColumns<T, 1>(c, p, ldp, no, rows, nv, o, ldo);
  for (; c < n; ++c) {  // F32 / F16 rows whose length is not a multiple of 4
    for (int64_t r = 0; r < no; ++r) {
      float v = o[r * ldo + c];
      for (int64_t j = 0; j < nv; ++j) v += p[r * ldp + j] * ARows<T>::At(rows[j], c);
      o[r * ldo + c] = v;
    }
  }
}

void AttnAccumulate(TensorType type, int64_t n, const float* p, int64_t ldp, int64_t no,
                    const void* const* rows, int64_t nv, float* o, int64_t ldo) {
  switch (type) {
    case TensorType::kF16: return AccumulateT<TensorType::kF16>(n, p, ldp, no, rows, nv, o, ldo);
    case TensorType::kQ8_0: return AccumulateT<TensorType::kQ8_0>(n, p, ldp, no, rows, nv, o, ldo);
    default: return AccumulateT<TensorType::kF32>(n, p, ldp, no, rows, nv, o, ldo);
  }
}

void Fp32ToFp16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) {
    const __fp16 h = static_cast<__fp16>(x[i]);
    std::memcpy(y + i, &h, 2);
  }
}

void Fp16ToFp32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
  for (; i < n; ++i) y[i] = F16(x[i]);
}

float ExpSum(const float* x, float m, float* y, int64_t n) {
  const float32x4_t vm = vdupq_n_f32(m);
  float32x4_t sum = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = Exp(vsubq_f32(vld1q_f32(x + i), vm));
    vst1q_f32(y + i, e);
    sum = vaddq_f32(sum, e);
  }
  float s = vaddvq_f32(sum);
  for (; i < n; ++i) {
    y[i] = std::exp(x[i] - m);
    s += y[i];
  }
  return s;
}

#endif  // !TANDEM_NEON_SDOT

}  // namespace

#if !defined(TANDEM_NEON_SDOT)

bool HasNeon() { return true; }

void FillNeon(KernelTable* t) {
  t->isa = Isa::kNeon;
  Set<KFloat<WF32>>(t, TensorType::kF32);
  Set<KFloat<WF16>>(t, TensorType::kF16);
  Set<KFloat<WBF16>>(t, TensorType::kBF16);
  FillIntegerDots(t);
  t->quantize_act[static_cast<uint32_t>(TensorType::kF32)] = CopyF32;
  t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_0)] = QuantizeQ8_0;
  t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_1)] = QuantizeQ8_1;
  t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_K)] = QuantizeQ8_K;
  t->f = FloatOps{RmsNorm, Softmax, SiluMul, Add, Scale, Dot, Axpy, Rope};
  t->attn = AttnOps{Fp32ToFp16, Fp16ToFp32, ExpSum, AttnScores, AttnAccumulate};
}

#else

bool HasNeonDot() { return true; }

// The table starts as a copy of the NEON one; SDOT changes only the integer dot products.
void FillNeonDot(KernelTable* t) {
  t->isa = Isa::kNeonDot;
  FillIntegerDots(t);
}

#endif

}  // namespace tandem::kernels::internal
