// x86 kernels shared by kernels_avx2.cc and kernels_avx512.cc (internal to src/kernels).
//
// The kernels work on 256-bit vectors, except the Q4_0, Q4_K / Q5_K and Q6_K dots of the AVX-512
// build (DotQ4_0Wide, DotK4Wide, DotQ6KWide, 512-bit: they must keep up with memory at 4.5 to 6.6
// bits per weight). The including file
// chooses how integer dot products are formed: by default with AVX2 maddubs/madd; with
// TANDEM_X86_VNNI defined (the AVX-512 file, compiled with -mavx512vnni -mavx512vl -mavx512bw)
// with VPDPBUSD / VPDPWSSD, which fuse the widening multiply-add with the accumulation. All code sits in an unnamed namespace so that each
// including file gets its own copy, compiled with its own instruction-set flags (no ODR sharing
// of differently compiled inline functions).
//
// Dot products: every weight type has one kernel template Dot<NA> computing one weight row against
// NA activation rows; vec_dot is Dot<1>, vec_dot_multi dispatches na to Dot<na>. Each weight
// block is loaded and unpacked once and used for all NA rows. Integer partial sums stay in
// vector registers for a block (or super-block), are scaled in float, and are reduced
// horizontally once at the end of the row. With NA == 1 several independent accumulators hide
// the latency of the accumulation chains (decode is one row at a time and must keep up with
// memory bandwidth).
//
// Weights are unpacked to unsigned bytes where the format stores a biased value (Q4_0, Q5_0,
// Q3_K, Q6_K) and the bias is taken back through the activation block sums (Q8_K bsums) or
// by making the weight signed and using the abs/sign trick (32-element formats).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/interleave.h"
#include "kernels/internal.h"
#include "kernels/x86_prefetch.h"
#ifdef TANDEM_X86_VNNI
#include "kernels/x86_interleaved.h"
#endif
#include "quant/quant.h"

namespace tandem::kernels::x86 {
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

// ---- small helpers ----

inline float H2F(uint16_t h) { return _cvtsh_ss(h); }

inline uint16_t F2H(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline __m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int HsumI(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float Hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of four adjacent products u8 x s8, as 8 int32 (exact: no saturation for |u| <= 128,
// |s| <= 127 in the AVX2 form either, since a pair sum stays below 2^15).
inline __m256i DotUS(__m256i u, __m256i s) {
#ifdef TANDEM_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// Signed x signed: |x| times y with x's sign.
inline __m256i DotSS(__m256i x, __m256i y) {
  return DotUS(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// Sums of four adjacent products (u - bias) x s for u8 u and s8 s, as 8 int32.
inline __m256i DotUSBias(__m256i u, __m256i bias, __m256i s) {
#ifdef TANDEM_X86_VNNI
  const __m256i z = _mm256_setzero_si256();
  return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, s), _mm256_dpbusd_epi32(z, bias, s));
#else
  const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, s), _mm256_maddubs_epi16(bias, s));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

// acc + (pairwise int16 products p * s summed into int32).
inline __m256i MaddAcc(__m256i acc, __m256i p, __m256i s) {
#ifdef TANDEM_X86_VNNI
  return _mm256_dpwssd_epi32(acc, p, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

// Byte i (0..31) = 0x10 if bit i of the little-endian 32-bit word at p is set, else 0.
inline __m256i FifthBits(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  __m256i b = _mm256_set1_epi32(static_cast<int>(v));
  b = _mm256_shuffle_epi8(b, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                               0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

// 32 four-bit values of a 32-element block: low nibbles (elements 0..15), then high nibbles.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = Load128(qs);
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// Shuffle pattern that broadcasts int16 lane j of each 128-bit half.
inline __m256i Bcast16(int j) { return _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j)); }

// Even bytes then odd bytes: after widening to int16, the low 128-bit half holds the scales of
// the even 16-element sub-blocks and the high half those of the odd ones, so Bcast16(c) gives
// a vector whose halves scale the two sub-blocks of 32-element chunk c.
inline __m128i EvenOdd() {
  return _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
}

template <typename T>
inline const T* Row(const void* a, size_t stride, int r) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(a) + r * stride);
}

// Float accumulators per activation row: one chain, whatever NA. A row's result must not depend
// on how many rows share the call (batch invariance): a decode step (NA == 1) and the same row in
// a speculative verification or a server's batch (NA > 1) give the same bits, so greedy text does
// not change with batching. The 2-4 chains decode used before bought little on this project's
// 2-core Xeon VM (TinyLlama-shaped tg64, 3 alternating rounds, medians: Q8_0 23.6 -> 24.0 t/s,
// Q4_0 23.6 -> 23.1) and changed the low bits.
template <int NA>
inline constexpr int kSlots = 1;

// The main loop of the kernels that keep S accumulator slots per row: step(i, s) for i = 0, kStep,
// 2 * kStep, ... < count, in groups of S consecutive steps (slot s within the group, so each slot's
// chain is independent), each group's weights prefetched ahead (a step covers kStepBytes weight
// bytes from `w`), then whole steps left over one at a time into slot 0. Returns the first index
// not run: a kernel whose count is not a multiple of kStep finishes the rest itself.
template <int NA, int S, int64_t kStep, int kStepBytes, typename Step>
__attribute__((always_inline)) inline int64_t ForEachStep(int64_t count, const void* w, Step&& step) {
  int64_t i = 0;
  for (; i + S * kStep <= count; i += S * kStep) {
    PrefetchAhead<NA, S * kStepBytes>(static_cast<const char*>(w) + i / kStep * kStepBytes);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) step(i + s * kStep, s);
  }
  for (; i + kStep <= count; i += kStep) step(i, 0);
  return i;
}

// ---- 32-element block formats ----

// Q8_0, Q4_0, Q5_0 weights with Q8_0 activations. Kind selects the unpacking.
enum class Sym { kQ8_0, kQ4_0, kQ5_0 };

// The block's quants as bytes: signed for Q8_0, the stored biased values for Q4_0 / Q5_0.
template <Sym K>
inline __m256i BlockQuants(const void* blocks, int64_t i) {
  if constexpr (K == Sym::kQ8_0) {
    return Load256(static_cast<const BlockQ8_0*>(blocks)[i].qs);
  } else if constexpr (K == Sym::kQ4_0) {
    return Nibbles32(static_cast<const BlockQ4_0*>(blocks)[i].qs);
  } else {
    const BlockQ5_0& b = static_cast<const BlockQ5_0*>(blocks)[i];
    return _mm256_or_si256(Nibbles32(b.qs), FifthBits(b.qh));
  }
}

template <Sym K>
using SymBlock = std::conditional_t<K == Sym::kQ8_0, BlockQ8_0,
                                    std::conditional_t<K == Sym::kQ4_0, BlockQ4_0, BlockQ5_0>>;

template <Sym K>
inline float BlockScale(const void* blocks, int64_t i) {
  if constexpr (K == Sym::kQ8_0) return H2F(static_cast<const BlockQ8_0*>(blocks)[i].d);
  if constexpr (K == Sym::kQ4_0) return H2F(static_cast<const BlockQ4_0*>(blocks)[i].d);
  return H2F(static_cast<const BlockQ5_0*>(blocks)[i].d);
}

template <Sym K, int NA>
void DotSym(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kSlots<NA>;
  const int64_t nb = n / quant::kQK;
  __m256 acc[NA][S];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r)
    for (int s = 0; s < S; ++s) acc[r][s] = _mm256_setzero_ps();
  auto block = [&](int64_t i, int s) __attribute__((always_inline)) {
    const __m256i q = BlockQuants<K>(w, i);
    const __m256i qa = K == Sym::kQ8_0 ? _mm256_sign_epi8(q, q) : q;
    const __m256i bias = _mm256_set1_epi8(K == Sym::kQ4_0 ? 8 : 16);
    const float dw = BlockScale<K>(w, i);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_0& y = Row<BlockQ8_0>(a, stride, r)[i];
      const __m256i ya = Load256(y.qs);
      const __m256i p = K == Sym::kQ8_0 ? DotUS(qa, _mm256_sign_epi8(ya, q))
                                        : DotUSBias(qa, bias, ya);
      acc[r][s] = _mm256_fmadd_ps(_mm256_set1_ps(dw * H2F(y.d)), _mm256_cvtepi32_ps(p), acc[r][s]);
    }
  };
  ForEachStep<NA, S, 1, sizeof(SymBlock<K>)>(nb, w, block);
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) {
    __m256 t = acc[r][0];
    for (int s = 1; s < S; ++s) t = _mm256_add_ps(t, acc[r][s]);
    out[r] = Hsum(t);
  }
}

#ifdef TANDEM_X86_VNNI
// Q4_0 with 512-bit vectors, two blocks per vector: the 16 quant bytes of blocks i and i + 1 go
// to 128-bit lanes (i, i, i + 1, i + 1) and are shifted right by 0 / 4 per lane (kQ4_0Shift), so
// after masking the lanes hold elements 0..15, 16..31 of block i, then of block i + 1: the order
// of the two blocks' activation bytes. The bias 8 comes off with a second VPDPBUSD against the
// activations. The 256-bit DotSym needs the same instructions for one block, and Q4_0 reads so few
// bytes per weight that those instructions, not memory, set its speed.
#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as below
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
alignas(64) constexpr int16_t kQ4_0Shift[32] = {0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4,
                                                0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4};

template <int NA>
void DotQ4_0Wide(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kSlots<NA>;  // batch invariance, as above
  const int64_t nb = n / quant::kQK;
  const BlockQ4_0* wb = static_cast<const BlockQ4_0*>(w);
  __m512 acc[NA][S];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r)
    for (int s = 0; s < S; ++s) acc[r][s] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  const __m512i shift = _mm512_load_si512(kQ4_0Shift);
  const __m512i z = _mm512_setzero_si512();
  auto pair = [&](int64_t i, int s) __attribute__((always_inline)) {
    const __m512i x = _mm512_castsi256_si512(_mm256_set_m128i(Load128(wb[i + 1].qs), Load128(wb[i].qs)));
    const __m512i q = _mm512_and_si512(
        _mm512_srlv_epi16(_mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(1, 1, 0, 0)), shift), low4);
    const float d0 = H2F(wb[i].d), d1 = H2F(wb[i + 1].d);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_0* y = Row<BlockQ8_0>(a, stride, r) + i;
      const __m512i ya = _mm512_inserti64x4(_mm512_castsi256_si512(Load256(y[0].qs)), Load256(y[1].qs), 1);
      const __m512i t = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, ya), _mm512_dpbusd_epi32(z, eight, ya));
      const __m512 sc = _mm512_insertf32x8(_mm512_set1_ps(d0 * H2F(y[0].d)),
                                           _mm256_set1_ps(d1 * H2F(y[1].d)), 1);
      acc[r][s] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(t), acc[r][s]);
    }
  };
  const int64_t i = ForEachStep<NA, S, 2, 2 * sizeof(BlockQ4_0)>(nb, w, pair);
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) {
    __m512 t = acc[r][0];
    for (int s = 1; s < S; ++s) t = _mm512_add_ps(t, acc[r][s]);
    const __m256 lo = _mm512_castps512_ps256(t);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1));
    float sum = Hsum(_mm256_add_ps(lo, hi));
    if (i < nb) {  // an odd last block
      const BlockQ8_0& y = Row<BlockQ8_0>(a, stride, r)[i];
      const __m256i p = DotUSBias(Nibbles32(wb[i].qs), _mm256_set1_epi8(8), Load256(y.qs));
      sum += H2F(wb[i].d) * H2F(y.d) * static_cast<float>(HsumI(p));
    }
    out[r] = sum;
  }
}
#pragma GCC diagnostic pop
#endif  // TANDEM_X86_VNNI

// Q4_1, Q5_1 weights (x = d*u + m) with Q8_1 activations.
template <bool kFive, int NA>
void DotAffine(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kSlots<NA>;
  const int64_t nb = n / quant::kQK;
  __m256 acc[NA][S];
  float msum[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) {
    msum[r] = 0;
    for (int s = 0; s < S; ++s) acc[r][s] = _mm256_setzero_ps();
  }
  auto block = [&](int64_t i, int s) __attribute__((always_inline)) {
    __m256i u;
    float dw, mw;
    if constexpr (kFive) {
      const BlockQ5_1& b = static_cast<const BlockQ5_1*>(w)[i];
      u = _mm256_or_si256(Nibbles32(b.qs), FifthBits(b.qh));
      dw = H2F(b.d);
      mw = H2F(b.m);
    } else {
      const BlockQ4_1& b = static_cast<const BlockQ4_1*>(w)[i];
      u = Nibbles32(b.qs);
      dw = H2F(b.d);
      mw = H2F(b.m);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_1& y = Row<BlockQ8_1>(a, stride, r)[i];
      const __m256i p = DotUS(u, Load256(y.qs));
      acc[r][s] = _mm256_fmadd_ps(_mm256_set1_ps(dw * H2F(y.d)), _mm256_cvtepi32_ps(p), acc[r][s]);
      msum[r] += mw * H2F(y.s);
    }
  };
  ForEachStep<NA, S, 1, sizeof(std::conditional_t<kFive, BlockQ5_1, BlockQ4_1>)>(nb, w, block);
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) {
    __m256 t = acc[r][0];
    for (int s = 1; s < S; ++s) t = _mm256_add_ps(t, acc[r][s]);
    out[r] = Hsum(t) + msum[r];
  }
}

// ---- K formats (Q8_K activations) ----

// Integer accumulators per row within a super-block.
template <int NA>
inline constexpr int kIntSlots = NA == 1 ? 4 : (NA == 2 ? 2 : 1);

// Q4_K / Q5_K: x = d*sc*q - dmin*mn per 32 elements. The 6-bit scales and mins of the 8
// sub-blocks, as bytes 0..7 of *sc and *mn.
inline void UnpackK4(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, s, 4);
  std::memcpy(&w1, s + 4, 4);
  std::memcpy(&w2, s + 8, 4);
  const uint32_t sc_lo = w0 & 0x3F3F3F3F, mn_lo = w1 & 0x3F3F3F3F;
  const uint32_t sc_hi = (w2 & 0x0F0F0F0F) | ((w0 >> 2) & 0x30303030);
  const uint32_t mn_hi = ((w2 >> 4) & 0x0F0F0F0F) | ((w1 >> 2) & 0x30303030);
  *sc = sc_lo | uint64_t{sc_hi} << 32;
  *mn = mn_lo | uint64_t{mn_hi} << 32;
}

// 256-bit form (the AVX2 table; the AVX-512 table uses DotK4Wide below).
template <bool kFive, int NA>
void DotK4(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kIntSlots<NA>;
  const int64_t nb = n / quant::kQKK;
  __m256 accd[NA], accm[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) accd[r] = accm[r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  using KBlock = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  for (int64_t i = 0; i < nb; ++i) {
    PrefetchAhead<NA, sizeof(KBlock)>(static_cast<const KBlock*>(w) + i);
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    float d, dmin;
    if constexpr (kFive) {
      const BlockQ5_K& b = static_cast<const BlockQ5_K*>(w)[i];
      scales = b.scales, qs = b.qs, qh = b.qh;
      d = H2F(b.d), dmin = H2F(b.dmin);
    } else {
      const BlockQ4_K& b = static_cast<const BlockQ4_K*>(w)[i];
      scales = b.scales, qs = b.qs;
      d = H2F(b.d), dmin = H2F(b.dmin);
    }
    uint64_t sc, mn;
    UnpackK4(scales, &sc, &mn);
    const __m256i scv =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    const __m128i mn8 = _mm_cvtsi64_si128(static_cast<long long>(mn));
    const __m256i mnv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));  // mn[j] twice
    __m256i hv;
    if constexpr (kFive) hv = Load256(qh);
    __m256i acci[NA][S];
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r)
      for (int s = 0; s < S; ++s) acci[r][s] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i qv = Load256(qs + 32 * k);
      __m256i lo = _mm256_and_si256(qv, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), low4);
      if constexpr (kFive) {
        const __m256i t = _mm256_srli_epi16(hv, 2 * k);
        const __m256i bit5 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(t, 4), bit5));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(t, 3), bit5));
      }
      const __m256i s_lo = _mm256_shuffle_epi8(scv, Bcast16(2 * k));
      const __m256i s_hi = _mm256_shuffle_epi8(scv, Bcast16(2 * k + 1));
#pragma GCC unroll 8
      for (int r = 0; r < NA; ++r) {
        const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
        __m256i& ac = acci[r][k % S];
        ac = MaddAcc(ac, _mm256_maddubs_epi16(lo, Load256(y.qs + 64 * k)), s_lo);
        ac = MaddAcc(ac, _mm256_maddubs_epi16(hi, Load256(y.qs + 64 * k + 32)), s_hi);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      __m256i t = acci[r][0];
      for (int s = 1; s < S; ++s) t = _mm256_add_epi32(t, acci[r][s]);
      const __m256i m = _mm256_madd_epi16(Load256(y.bsums), mnv);
      accd[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(t), accd[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * y.d), _mm256_cvtepi32_ps(m), accm[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) out[r] = Hsum(_mm256_sub_ps(accd[r], accm[r]));
}

#ifdef TANDEM_X86_VNNI
// Q4_K / Q5_K with 512-bit vectors (the AVX-512 table also has AVX-512 BW).
//
// Group k (32 bytes) of a super-block's nibbles holds sub-block 2k in its low nibbles and 2k + 1
// in its high nibbles, i.e. elements 64k .. 64k + 63: broadcast to both 256-bit halves and shifted
// right by 0 / 4 per half (kK4Shift), it lines up with one 64-byte load of the activations.
// VPDPBUSD gives per-lane sums of 4 products D_k (|D_k| <= 4 * 31 * 127, so they fit in int16);
// packing D_0, D_1 (and D_2, D_3) to int16 lets one VPDPWSSD per pair of groups apply the 6-bit
// scales: 4 VPDPBUSD + 2 packs + 2 VPDPWSSD per super-block and row, where an unpack to words
// (VPMADDUBSW + VPDPWSSD per group) needs 8 multiplies. The scales are unpacked with scalar code
// (off the vector ports) and spread with one byte shuffle per pair of groups; the mins are taken
// out through the activation block sums.

// GCC 12 warns about the self-initialised _mm512_undefined_*() that its own 512-bit intrinsics
// use as pass-through operands (a false positive); silenced for this section only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Shift counts per int16 lane: 0 in the low 256 bits, 4 in the high 256 bits.
alignas(64) constexpr int16_t kK4Shift[32] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                              4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
// Byte shuffles of the 8 scale bytes (broadcast to every 64-bit lane) into int16 lanes (0x80: zero
// high byte) matching _mm512_packs_epi32(D_a, D_b): in 128-bit lane L, four words from D_a, then
// four from D_b, whose lanes 4L .. 4L + 3 belong to sub-block 2a (L < 2) or 2a + 1 (L >= 2).
#define TANDEM_K4_SPREAD4(j) j, 0x80, j, 0x80, j, 0x80, j, 0x80
#define TANDEM_K4_SPREAD(a, b)                                                      \
  {TANDEM_K4_SPREAD4(a),     TANDEM_K4_SPREAD4(b),     TANDEM_K4_SPREAD4(a),         \
   TANDEM_K4_SPREAD4(b),     TANDEM_K4_SPREAD4(a + 1), TANDEM_K4_SPREAD4(b + 1),     \
   TANDEM_K4_SPREAD4(a + 1), TANDEM_K4_SPREAD4(b + 1)}
alignas(64) constexpr uint8_t kK4Spread[2][64] = {TANDEM_K4_SPREAD(0, 2), TANDEM_K4_SPREAD(4, 6)};
#undef TANDEM_K4_SPREAD4
#undef TANDEM_K4_SPREAD
// The 8 min bytes to int16 lanes, each twice (one per 16-element block sum).
alignas(32) constexpr uint8_t kK4MinSpread[32] = {
    0, 0x80, 0, 0x80, 1, 0x80, 1, 0x80, 2, 0x80, 2, 0x80, 3, 0x80, 3, 0x80,
    4, 0x80, 4, 0x80, 5, 0x80, 5, 0x80, 6, 0x80, 6, 0x80, 7, 0x80, 7, 0x80};

template <bool kFive, int NA>
void DotK4Wide(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  const int64_t nb = n / quant::kQKK;
  __m512 accd[NA];
  __m256 accm[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) accd[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i shift = _mm512_load_si512(kK4Shift);
  const __m512i spread01 = _mm512_load_si512(kK4Spread[0]);
  const __m512i spread23 = _mm512_load_si512(kK4Spread[1]);
  const __m256i mspread = _mm256_load_si256(reinterpret_cast<const __m256i*>(kK4MinSpread));
  using KBlock = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  for (int64_t i = 0; i < nb; ++i) {
    PrefetchAhead<NA, sizeof(KBlock)>(static_cast<const KBlock*>(w) + i);
    const uint8_t* scales;
    const uint8_t* qs;
    const uint16_t* dd;  // d, dmin (adjacent fp16)
    __m512i hv;
    if constexpr (kFive) {
      const BlockQ5_K& b = static_cast<const BlockQ5_K*>(w)[i];
      scales = b.scales, qs = b.qs, dd = &b.d;
      hv = _mm512_broadcast_i64x4(Load256(b.qh));
    } else {
      const BlockQ4_K& b = static_cast<const BlockQ4_K*>(w)[i];
      scales = b.scales, qs = b.qs, dd = &b.d;
    }
    uint64_t sc, mn;
    UnpackK4(scales, &sc, &mn);
    const __m512i scv = _mm512_set1_epi64(static_cast<long long>(sc));
    const __m512i s01 = _mm512_shuffle_epi8(scv, spread01);
    const __m512i s23 = _mm512_shuffle_epi8(scv, spread23);
    const __m256i mnv =
        _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(mn)), mspread);
    int dd2;
    std::memcpy(&dd2, dd, 4);
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dd2));  // d, dmin
    __m512i q[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      q[k] = _mm512_and_si512(
          _mm512_srlv_epi16(_mm512_broadcast_i64x4(Load256(qs + 32 * k)), shift), low4);
      if constexpr (kFive) {
        // Fifth bits: bit 2k (low half) / 2k + 1 (high half) of each qh byte.
        const __m512i bit = _mm512_inserti64x4(
            _mm512_set1_epi8(static_cast<char>(1 << (2 * k))),
            _mm256_set1_epi8(static_cast<char>(1 << (2 * k + 1))), 1);
        q[k] = _mm512_mask_add_epi8(q[k], _mm512_test_epi8_mask(hv, bit), q[k],
                                    _mm512_set1_epi8(0x10));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      const __m512i z = _mm512_setzero_si512();
      __m512i d4[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        d4[k] = _mm512_dpbusd_epi32(z, q[k], _mm512_loadu_si512(y.qs + 64 * k));
      }
      __m512i t = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(d4[0], d4[1]), s01);
      t = _mm512_dpwssd_epi32(t, _mm512_packs_epi32(d4[2], d4[3]), s23);
      const __m256i m = _mm256_madd_epi16(Load256(y.bsums), mnv);
      const __m128 f = _mm_mul_ps(dm, _mm_set1_ps(y.d));  // d * y.d, dmin * y.d
      accd[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(f), _mm512_cvtepi32_ps(t), accd[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(f)), _mm256_cvtepi32_ps(m),
                                accm[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) {
    const __m256 lo = _mm512_castps512_ps256(accd[r]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(accd[r]), 1));
    out[r] = Hsum(_mm256_sub_ps(_mm256_add_ps(lo, hi), accm[r]));
  }
}
#pragma GCC diagnostic pop
#endif  // TANDEM_X86_VNNI

// Q6_K: x = d*sc*(u - 32), u six bits, int8 sc per 16 elements.
template <int NA>
void DotQ6K(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kIntSlots<NA>;
  const int64_t nb = n / quant::kQKK;
  __m256 acc[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x30);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_K& b = static_cast<const BlockQ6_K*>(w)[i];
    PrefetchAhead<NA, sizeof(BlockQ6_K)>(&b);
    const float d = H2F(b.d);
    const __m128i sc8 = Load128(b.scales);
    const __m256i sc_nat = _mm256_cvtepi8_epi16(sc8);
    const __m256i sc_eo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, EvenOdd()));
    __m256i acci[NA][S];
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r)
      for (int s = 0; s < S; ++s) acci[r][s] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load256(b.ql + 64 * h), ql1 = Load256(b.ql + 64 * h + 32);
      const __m256i qh = Load256(b.qh + 32 * h);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int c = 4 * h + s;
        const __m256i l = s == 0 ? _mm256_and_si256(ql0, low4)
                        : s == 1 ? _mm256_and_si256(ql1, low4)
                        : s == 2 ? _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4)
                                 : _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4);
        const __m256i hb = s == 0 ? _mm256_slli_epi16(qh, 4)
                         : s == 1 ? _mm256_slli_epi16(qh, 2)
                         : s == 2 ? qh
                                  : _mm256_srli_epi16(qh, 2);
        const __m256i q = _mm256_or_si256(l, _mm256_and_si256(hb, two));
        const __m256i scv = _mm256_shuffle_epi8(sc_eo, Bcast16(c));
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) {
          const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
          __m256i& ac = acci[r][c % S];
          ac = MaddAcc(ac, _mm256_maddubs_epi16(q, Load256(y.qs + 32 * c)), scv);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      __m256i t = acci[r][0];
      for (int s = 1; s < S; ++s) t = _mm256_add_epi32(t, acci[r][s]);
      const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(Load256(y.bsums), sc_nat), 5);
      t = _mm256_sub_epi32(t, bias);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(t), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) out[r] = Hsum(acc[r]);
}

#ifdef TANDEM_X86_VNNI
// Q6_K with 512-bit vectors. One 64-byte load of ql holds, in its low nibbles, elements 0..63 of a
// 128-element half and, in its high nibbles, elements 64..127; the matching two high bits come from
// the half's 32 qh bytes broadcast to both 256-bit halves and shifted by a per-half count
// (kQ6Shl / kQ6Shr). Each 64-element group is one VPDPBUSD against 64 activations (sums of 4
// products, |D| <= 4 * 63 * 128, so they fit in int16); packing the two groups' D to int16 lets one
// VPDPWSSD apply the int8 scales, spread to the packed order by one VPERMW. The -32 offset comes
// off through the activation block sums, as in the 256-bit kernel. Per half and row: 2 VPDPBUSD +
// 1 pack + 1 VPDPWSSD, where the 256-bit kernel needs 4 VPMADDUBSW + 4 multiply-adds.

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Left shifts per int16 lane for elements 0..31 / 32..63 of a half (qh bits 0-1 / 2-3 to bits 4-5),
// right shifts for elements 64..95 / 96..127 (bits 4-5 stay, bits 6-7 move down by 2).
alignas(64) constexpr int16_t kQ6Shl[32] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                            2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
alignas(64) constexpr int16_t kQ6Shr[32] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                            2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
// VPERMW indices from the 16 scales (as int16) of a super-block to _mm512_packs_epi32(D_lo, D_hi)
// order for half h: in 128-bit lane L, four words of D_lo lanes 4L..4L+3 (scale 8h + L) then four of
// D_hi (scale 8h + 4 + L).
#define TANDEM_Q6_IDX4(j) j, j, j, j
#define TANDEM_Q6_IDX(h)                                                                  \
  {TANDEM_Q6_IDX4(8 * h + 0), TANDEM_Q6_IDX4(8 * h + 4), TANDEM_Q6_IDX4(8 * h + 1),      \
   TANDEM_Q6_IDX4(8 * h + 5), TANDEM_Q6_IDX4(8 * h + 2), TANDEM_Q6_IDX4(8 * h + 6),      \
   TANDEM_Q6_IDX4(8 * h + 3), TANDEM_Q6_IDX4(8 * h + 7)}
alignas(64) constexpr int16_t kQ6ScaleIdx[2][32] = {TANDEM_Q6_IDX(0), TANDEM_Q6_IDX(1)};
#undef TANDEM_Q6_IDX4
#undef TANDEM_Q6_IDX

template <int NA>
void DotQ6KWide(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  const int64_t nb = n / quant::kQKK;
  __m256 acc[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) acc[r] = _mm256_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const __m512i shl = _mm512_load_si512(kQ6Shl), shr = _mm512_load_si512(kQ6Shr);
  const __m512i idx0 = _mm512_load_si512(kQ6ScaleIdx[0]), idx1 = _mm512_load_si512(kQ6ScaleIdx[1]);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_K& b = static_cast<const BlockQ6_K*>(w)[i];
    PrefetchAhead<NA, sizeof(BlockQ6_K)>(&b);
    const float d = H2F(b.d);
    const __m256i sc_nat = _mm256_cvtepi8_epi16(Load128(b.scales));
    const __m512i sc16 = _mm512_castsi256_si512(sc_nat);
    const __m512i scv[2] = {_mm512_permutexvar_epi16(idx0, sc16), _mm512_permutexvar_epi16(idx1, sc16)};
    __m512i q[2][2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i v = _mm512_loadu_si512(b.ql + 64 * h);
      const __m512i hb = _mm512_broadcast_i64x4(Load256(b.qh + 32 * h));
      q[h][0] = _mm512_or_si512(_mm512_and_si512(v, low4),
                                _mm512_and_si512(_mm512_sllv_epi16(hb, shl), bits45));
      q[h][1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4),
                                _mm512_and_si512(_mm512_srlv_epi16(hb, shr), bits45));
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      const __m512i z = _mm512_setzero_si512();
      __m512i t = z;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i d0 = _mm512_dpbusd_epi32(z, q[h][0], _mm512_loadu_si512(y.qs + 128 * h));
        const __m512i d1 = _mm512_dpbusd_epi32(z, q[h][1], _mm512_loadu_si512(y.qs + 128 * h + 64));
        t = _mm512_dpwssd_epi32(t, _mm512_packs_epi32(d0, d1), scv[h]);
      }
      __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
      s = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(Load256(y.bsums), sc_nat), 5));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(s), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) out[r] = Hsum(acc[r]);
}
#pragma GCC diagnostic pop
#endif  // TANDEM_X86_VNNI

// Q2_K: x = d*sc*q - dmin*mn, q two bits, 4-bit sc and mn per 16 elements.
template <int NA>
void DotQ2K(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kIntSlots<NA>;
  const int64_t nb = n / quant::kQKK;
  __m256 accd[NA], accm[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) accd[r] = accm[r] = _mm256_setzero_ps();
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ2_K& b = static_cast<const BlockQ2_K*>(w)[i];
    PrefetchAhead<NA, sizeof(BlockQ2_K)>(&b);
    const float d = H2F(b.d), dmin = H2F(b.dmin);
    const __m128i s8 = Load128(b.scales);
    const __m256i sc_eo =
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_and_si128(s8, low4), EvenOdd()));
    const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), low4));
    __m256i acci[NA][S];
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r)
      for (int s = 0; s < S; ++s) acci[r][s] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = Load256(b.qs + 32 * h);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int c = 4 * h + s;
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * s), three);
        const __m256i scv = _mm256_shuffle_epi8(sc_eo, Bcast16(c));
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) {
          const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
          __m256i& ac = acci[r][c % S];
          ac = MaddAcc(ac, _mm256_maddubs_epi16(q, Load256(y.qs + 32 * c)), scv);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      __m256i t = acci[r][0];
      for (int s = 1; s < S; ++s) t = _mm256_add_epi32(t, acci[r][s]);
      const __m256i m = _mm256_madd_epi16(Load256(y.bsums), mn);
      accd[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(t), accd[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * y.d), _mm256_cvtepi32_ps(m), accm[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) out[r] = Hsum(_mm256_sub_ps(accd[r], accm[r]));
}

// Q3_K: x = d*sc*(u - 4), u = two low bits | high bit << 2, signed 6-bit sc per 16 elements.
inline __m128i UnpackQ3KScales(const uint8_t* s) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, s, 4);
  std::memcpy(&w1, s + 4, 4);
  std::memcpy(&w2, s + 8, 4);
  const uint32_t m4 = 0x0F0F0F0F, m2 = 0x03030303;
  const uint32_t s0 = (w0 & m4) | (w2 & m2) << 4;
  const uint32_t s1 = (w1 & m4) | ((w2 >> 2) & m2) << 4;
  const uint32_t s2 = ((w0 >> 4) & m4) | ((w2 >> 4) & m2) << 4;
  const uint32_t s3 = ((w1 >> 4) & m4) | ((w2 >> 6) & m2) << 4;
  const __m128i u = _mm_setr_epi32(static_cast<int>(s0), static_cast<int>(s1),
                                   static_cast<int>(s2), static_cast<int>(s3));
  return _mm_sub_epi8(u, _mm_set1_epi8(32));
}

template <int NA>
void DotQ3K(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kIntSlots<NA>;
  const int64_t nb = n / quant::kQKK;
  __m256 acc[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ3_K& b = static_cast<const BlockQ3_K*>(w)[i];
    PrefetchAhead<NA, sizeof(BlockQ3_K)>(&b);
    const float d = H2F(b.d);
    const __m128i sc8 = UnpackQ3KScales(b.scales);
    const __m256i sc_nat = _mm256_cvtepi8_epi16(sc8);
    const __m256i sc_eo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, EvenOdd()));
    const __m256i hm = Load256(b.hmask);
    __m256i acci[NA][S];
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r)
      for (int s = 0; s < S; ++s) acci[r][s] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = Load256(b.qs + 32 * h);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int c = 4 * h + s;
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * s), three);
        // bit c of hmask, moved to bit 2
        const __m256i hb = c <= 2 ? _mm256_slli_epi16(hm, 2 - c) : _mm256_srli_epi16(hm, c - 2);
        const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hb, four));
        const __m256i scv = _mm256_shuffle_epi8(sc_eo, Bcast16(c));
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) {
          const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
          __m256i& ac = acci[r][c % S];
          ac = MaddAcc(ac, _mm256_maddubs_epi16(q, Load256(y.qs + 32 * c)), scv);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      __m256i t = acci[r][0];
      for (int s = 1; s < S; ++s) t = _mm256_add_epi32(t, acci[r][s]);
      const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(Load256(y.bsums), sc_nat), 2);
      t = _mm256_sub_epi32(t, bias);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(t), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) out[r] = Hsum(acc[r]);
}

// ---- float weights (F32 activations) ----

enum class Fw { kF32, kF16, kBF16 };

template <Fw K>
inline __m256 LoadW8(const void* w, int64_t i) {
  if constexpr (K == Fw::kF32) return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  if constexpr (K == Fw::kF16) return _mm256_cvtph_ps(Load128(static_cast<const uint16_t*>(w) + i));
  const __m256i v = _mm256_cvtepu16_epi32(Load128(static_cast<const uint16_t*>(w) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

template <Fw K>
inline float WScalar(const void* w, int64_t i) {
  if constexpr (K == Fw::kF32) return static_cast<const float*>(w)[i];
  if constexpr (K == Fw::kF16) return H2F(static_cast<const uint16_t*>(w)[i]);
  uint32_t u = uint32_t{static_cast<const uint16_t*>(w)[i]} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <Fw K, int NA>
void DotFloat(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  constexpr int S = kSlots<NA>;
  __m256 acc[NA][S];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r)
    for (int s = 0; s < S; ++s) acc[r][s] = _mm256_setzero_ps();
  auto step = [&](int64_t i, int s) __attribute__((always_inline)) {
    const __m256 x = LoadW8<K>(w, i);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      acc[r][s] = _mm256_fmadd_ps(x, _mm256_loadu_ps(Row<float>(a, stride, r) + i), acc[r][s]);
    }
  };
  constexpr int kElem = K == Fw::kF32 ? 4 : 2;
  const int64_t i = ForEachStep<NA, S, 8, 8 * kElem>(n, w, step);
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) {
    __m256 t = acc[r][0];
    for (int s = 1; s < S; ++s) t = _mm256_add_ps(t, acc[r][s]);
    float sum = Hsum(t);
    for (int64_t j = i; j < n; ++j) sum += WScalar<K>(w, j) * Row<float>(a, stride, r)[j];
    out[r] = sum;
  }
}

// ---- adapters to the table's signatures ----

// Kernel structs: K::Run<NA>(n, w, a, stride, out).
#define TANDEM_X86_KERNEL(Name, Call)                                                       \
  struct Name {                                                                           \
    template <int NA>                                                                     \
    static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) { \
      Call(n, w, a, stride, out);                                                         \
    }                                                                                     \
  };
TANDEM_X86_KERNEL(KF32, (DotFloat<Fw::kF32, NA>))
TANDEM_X86_KERNEL(KF16, (DotFloat<Fw::kF16, NA>))
TANDEM_X86_KERNEL(KBF16, (DotFloat<Fw::kBF16, NA>))
#ifdef TANDEM_X86_VNNI
TANDEM_X86_KERNEL(KQ4_0, DotQ4_0Wide<NA>)
#else
TANDEM_X86_KERNEL(KQ4_0, (DotSym<Sym::kQ4_0, NA>))
#endif
TANDEM_X86_KERNEL(KQ5_0, (DotSym<Sym::kQ5_0, NA>))
TANDEM_X86_KERNEL(KQ8_0, (DotSym<Sym::kQ8_0, NA>))
TANDEM_X86_KERNEL(KQ4_1, (DotAffine<false, NA>))
TANDEM_X86_KERNEL(KQ5_1, (DotAffine<true, NA>))
TANDEM_X86_KERNEL(KQ2_K, DotQ2K<NA>)
TANDEM_X86_KERNEL(KQ3_K, DotQ3K<NA>)
#ifdef TANDEM_X86_VNNI
TANDEM_X86_KERNEL(KQ4_K, (DotK4Wide<false, NA>))
TANDEM_X86_KERNEL(KQ5_K, (DotK4Wide<true, NA>))
#else
TANDEM_X86_KERNEL(KQ4_K, (DotK4<false, NA>))
TANDEM_X86_KERNEL(KQ5_K, (DotK4<true, NA>))
#endif
#ifdef TANDEM_X86_VNNI
TANDEM_X86_KERNEL(KQ6_K, DotQ6KWide<NA>)
#else
TANDEM_X86_KERNEL(KQ6_K, DotQ6K<NA>)
#endif
#undef TANDEM_X86_KERNEL

template <typename K>
float VecDot(int64_t n, const void* w, const void* a) {
  float out;
  K::template Run<1>(n, w, a, 0, &out);
  return out;
}

template <typename K>
void VecDotMulti(int64_t n, const void* w, const void* a, size_t stride, int na, float* out) {
  switch (na) {
    case 1: K::template Run<1>(n, w, a, stride, out); break;
    case 2: K::template Run<2>(n, w, a, stride, out); break;
    case 3: K::template Run<3>(n, w, a, stride, out); break;
    case 4: K::template Run<4>(n, w, a, stride, out); break;
    case 5: K::template Run<5>(n, w, a, stride, out); break;
    case 6: K::template Run<6>(n, w, a, stride, out); break;
    case 7: K::template Run<7>(n, w, a, stride, out); break;
    default: K::template Run<8>(n, w, a, stride, out); break;
  }
}

// ---- activation quantizers ----

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// Rounds (to nearest even, as lrint) x * id, clamps to [-127, 127] and stores 32 int8 in order.
// Returns the 8-lane int32 partial sums of the stored values of elements 0..15 and 16..31.
inline void Round32(const float* x, __m256 id, int8_t* qs, __m256i* sum_lo, __m256i* sum_hi) {
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) {
    q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id));
    q[k] = _mm256_min_epi32(_mm256_max_epi32(q[k], lo), hi);
  }
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  *sum_lo = _mm256_add_epi32(q[0], q[1]);
  *sum_hi = _mm256_add_epi32(q[2], q[3]);
}

inline float Amax32(const float* x) {
  __m256 m = Abs(_mm256_loadu_ps(x));
  for (int k = 1; k < 4; ++k) m = _mm256_max_ps(m, Abs(_mm256_loadu_ps(x + 8 * k)));
  return Hmax(m);
}

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as below
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One Q8_0 / Q8_1 block; returns sum(qs). The AVX-512 build works in two 512-bit halves (a
// saturating narrow instead of the packs and their permute), with the same numbers: an exact
// max, the same scalar steps, the same rounding (MXCSR's) and clamp. A prompt's Q8S activations
// were 2.8 % of a Q4_0 pp512 on the Xeon VM.
inline int QuantQ8Block(const float* x, uint16_t* d16, int8_t* qs) {
#ifdef __AVX512F__
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
#else
  const float amax = Amax32(x);
#endif
  *d16 = F2H(amax / 127);
  const float d = H2F(*d16);
  const float id = d != 0 ? 1 / d : 0;
#ifdef __AVX512F__
  const __m512 vid = _mm512_set1_ps(id);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i qa = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)), lo), hi);
  const __m512i qb = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(b, vid)), lo), hi);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtsepi32_epi8(qb));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
#else
  __m256i s0, s1;
  Round32(x, _mm256_set1_ps(id), qs, &s0, &s1);
  return HsumI(_mm256_add_epi32(s0, s1));
#endif
}

#pragma GCC diagnostic pop

void QuantizeQ8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / quant::kQK; ++i) QuantQ8Block(src + i * quant::kQK, &b[i].d, b[i].qs);
}

void QuantizeQ8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / quant::kQK; ++i) {
    const int sum = QuantQ8Block(src + i * quant::kQK, &b[i].d, b[i].qs);
    b[i].s = F2H(H2F(b[i].d) * static_cast<float>(sum));
  }
}

#ifdef __AVX512F__
#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as above
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The AVX-512 build: the same numbers as the AVX2 one below in 512-bit vectors (the max in any
// order is the same max; MXCSR's rounding; the clamp at -127, then a saturating narrow that clamps
// at 127), each 16 values' sum by VPSADBW over their stored bytes (biased by 128 to make them
// unsigned). A small batch quantizes its rows on the caller's thread: a 2048-wide row took 352-357
// ns against 610-631 with the AVX2 code (Xeon VM, 3 runs, the same bytes).
void QuantizeQ8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  const __m512i lo = _mm512_set1_epi32(-127), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < n / quant::kQKK; ++i) {
    const float* x = src + i * quant::kQKK;
    __m512 m[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) m[k] = _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k));
#pragma GCC unroll 4
    for (int c = 1; c < 4; ++c) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) m[k] = _mm512_max_ps(m[k], _mm512_abs_ps(_mm512_loadu_ps(x + 64 * c + 16 * k)));
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3])));
    b[i].d = amax / 127;
    const __m512 id = _mm512_set1_ps(amax > 0 ? 127 / amax : 0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {  // 64 values
      __m128i part[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 64 * c + 16 * k), id));
        part[k] = _mm512_cvtsepi32_epi8(_mm512_max_epi32(q, lo));
      }
      __m512i v = _mm512_castsi128_si512(part[0]);
      v = _mm512_inserti32x4(v, part[1], 1);
      v = _mm512_inserti32x4(v, part[2], 2);
      v = _mm512_inserti32x4(v, part[3], 3);
      _mm512_storeu_si512(b[i].qs + 64 * c, v);
      alignas(64) uint64_t t[8];  // sums of 8 values, each + 8 * 128
      _mm512_store_si512(t, _mm512_sad_epu8(_mm512_xor_si512(v, bias), _mm512_setzero_si512()));
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) b[i].bsums[4 * c + g] = static_cast<int16_t>(static_cast<int>(t[2 * g] + t[2 * g + 1]) - 16 * 128);
    }
  }
}
#pragma GCC diagnostic pop
#else
void QuantizeQ8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / quant::kQKK; ++i) {
    const float* x = src + i * quant::kQKK;
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < quant::kQKK; k += 8) m = _mm256_max_ps(m, Abs(_mm256_loadu_ps(x + k)));
    const float amax = Hmax(m);
    b[i].d = amax / 127;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127 / amax : 0);
    for (int c = 0; c < 8; ++c) {
      __m256i s0, s1;
      Round32(x + 32 * c, id, b[i].qs + 32 * c, &s0, &s1);
      b[i].bsums[2 * c] = static_cast<int16_t>(HsumI(s0));
      b[i].bsums[2 * c + 1] = static_cast<int16_t>(HsumI(s1));
    }
  }
}
#endif

// ---- float operations ----

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as below
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Float vectors of W lanes, for the operations written once for both widths (the same operations
// per lane in either, so the same bits).
template <int W>
struct Lanes;

template <>
struct Lanes<8> {
  using V = __m256;
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V Min(V a, V b) { return _mm256_min_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^k for integral k in [-126, 127].
  static V Pow2(V k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
  }
};

#ifdef __AVX512F__
template <>
struct Lanes<16> {
  using V = __m512;
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V Min(V a, V b) { return _mm512_min_ps(a, b); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Pow2(V k) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
  }
};
#endif

// e^x, relative error ~2e-7 for x in [-87, 88]; 0 below about -87.3 (e^x is then subnormal).
template <int W>
inline typename Lanes<W>::V ExpW(typename Lanes<W>::V x) {
  using L = Lanes<W>;
  x = L::Min(L::Max(x, L::Set1(-88.0f)), L::Set1(88.0f));
  const typename L::V k = L::Round(L::Mul(x, L::Set1(1.44269504088896341f)));
  // r = x - k ln2 in two steps (ln2 split so that k * hi is exact).
  typename L::V r = L::Fnma(k, L::Set1(0.693359375f), x);
  r = L::Fnma(k, L::Set1(-2.12194440e-4f), r);
  // Taylor series of e^r to degree 7 (|r| <= 0.347: truncation error < 1e-8 relative).
  typename L::V p = L::Set1(1.0f / 5040);
  p = L::Fma(p, r, L::Set1(1.0f / 720));
  p = L::Fma(p, r, L::Set1(1.0f / 120));
  p = L::Fma(p, r, L::Set1(1.0f / 24));
  p = L::Fma(p, r, L::Set1(1.0f / 6));
  p = L::Fma(p, r, L::Set1(0.5f));
  p = L::Fma(p, r, L::Set1(1.0f));
  p = L::Fma(p, r, L::Set1(1.0f));
  return L::Mul(p, L::Pow2(k));
}

inline __m256 Exp(__m256 x) { return ExpW<8>(x); }
#ifdef __AVX512F__
inline __m512 Exp16(__m512 x) { return ExpW<16>(x); }
#endif

#pragma GCC diagnostic pop

// Sum of the 8 lanes of v added to a 4-lane double accumulator.
inline __m256d AddWide(__m256d acc, __m256 v) {
  acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

inline double HsumD(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  double ss = HsumD(_mm256_add_pd(acc0, acc1));
  for (int64_t j = i; j < n; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi), _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) y[i] = x[i] * inv * w[i];
}

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as below
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"


// The AVX-512 build takes 16 values a step (its max and exponentials in 512-bit vectors, the
// sum in two double accumulators of 8, independent chains), the AVX2 build 8.
void Softmax(float* x, int64_t n) {
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
#ifdef __AVX512F__
  __m512 mv16 = _mm512_set1_ps(-INFINITY);
  for (; i + 16 <= n; i += 16) mv16 = _mm512_max_ps(mv16, _mm512_loadu_ps(x + i));
  mv = _mm256_max_ps(_mm512_castps512_ps256(mv16),
                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mv16), 1)));
#endif
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float mx = Hmax(mv);
  for (int64_t j = i; j < n; ++j) mx = std::fmax(mx, x[j]);
  const __m256 vm = _mm256_set1_ps(mx);
  __m256d sum = _mm256_setzero_pd();
  i = 0;
#ifdef __AVX512F__
  const __m512 vm16 = _mm512_set1_ps(mx);
  __m512d lo = _mm512_setzero_pd(), hi = lo;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm16));
    _mm512_storeu_ps(x + i, e);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  const __m512d s16 = _mm512_add_pd(lo, hi);
  sum = _mm256_add_pd(_mm512_castpd512_pd256(s16), _mm512_extractf64x4_pd(s16, 1));
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    sum = AddWide(sum, e);
  }
  double s = HsumD(sum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    s += x[i];
  }
  const float inv = static_cast<float>(1.0 / s);
  i = 0;
#ifdef __AVX512F__
  const __m512 vi16 = _mm512_set1_ps(inv);
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vi16));
#endif
  const __m256 vi = _mm256_set1_ps(inv);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
  for (; i < n; ++i) x[i] *= inv;
}

#pragma GCC diagnostic pop

// The AVX-512 build takes 16 values a step (Exp16: the same operations per lane as Exp, so the
// same bits as the AVX2 build); a prompt's gates were 2.6 % of a Q4_0 pp512 on the Xeon VM.
void SiluMul(const float* gate, const float* up, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512 one16 = _mm512_set1_ps(1.0f), zero16 = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one16, Exp16(_mm512_sub_ps(zero16, g))));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, Exp(_mm256_sub_ps(zero, g))));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

void Scale(float* x, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
}

float Dot(const float* a, const float* b, int64_t n) {
  float out;
  DotFloat<Fw::kF32, 1>(n, a, b, 0, &out);
  return out;
}

void Axpy(float s, const float* x, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += s * x[i];
}

void Rope(float* x, int64_t head_dim, const float* cos, const float* sin, bool neox) {
  const int64_t half = head_dim / 2;
  int64_t i = 0;
  if (neox) {
    for (; i + 8 <= half; i += 8) {
      const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + half);
      const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
      _mm256_storeu_ps(x + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(x + i + half, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
    }
  } else {
    for (; i + 4 <= half; i += 4) {
      const __m128 c4 = _mm_loadu_ps(cos + i), s4 = _mm_loadu_ps(sin + i);
      const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
      const __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
      const __m256 v = _mm256_loadu_ps(x + 2 * i);
      const __m256 sw = _mm256_permute_ps(v, 0xB1);  // (b, a) pairs
      // even: a c - b s; odd: b c + a s
      _mm256_storeu_ps(x + 2 * i, _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(sw, s)));
    }
  }
  for (; i < half; ++i) {
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0], b = x[i1];
    x[i0] = a * cos[i] - b * sin[i];
    x[i1] = a * sin[i] + b * cos[i];
  }
}

#ifdef TANDEM_X86_VNNI
// ---- interleaved Q4_0 / Q5_0 / Q8_0 (kernels/interleave.h) ----

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as above
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// 16 rows x NA activation rows. Per block: the unsigned weight bytes of 4 elements of 16 rows in
// each 512-bit chunk (Q5_0: the nibbles plus 16 where the block's mask has the fifth bit, one
// masked add), VPDPBUSD against the activation row's 4 bytes at that place broadcast from memory
// (one chain per row, two for a lone row, started at minus the bias times the activation block's
// sum), and one FMA with the 16 rows' scales times the activation's. Per activation row the operations are
// the same for any NA.
// kNear: a small batch streaming its weights (PrefetchNear, x86_prefetch.h).
template <Il K, int NA, bool kNear = false>
void GemmInterleaved(int64_t n, const void* w, const void* a, size_t a_stride, float* out, int64_t ldo) {
  const int64_t nb = n / quant::kQK;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  __m512 acc[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = wb + b * IlBlock<K>::kBytes;
    PrefetchAhead<1, IlBlock<K>::kBytes>(blk);
    if constexpr (kNear) {
#pragma GCC unroll 9
      for (int o = 0; o < IlBlock<K>::kBytes; o += 64) PrefetchNear(blk + o);
    }
    __m512i u[8];
    UnpackIl<K>(blk, u);
    const __m512 dw = ScalesIl<K>(blk);
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8S& y = Row<BlockQ8S>(a, a_stride, r)[b];
      __m512i t;
      if constexpr (NA == 1) {  // two chains: one row alone would wait on VPDPBUSD's latency
        __m512i s0 = BiasIl<K>(y), s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          __m512i& s = (c & 1) ? s1 : s0;
          s = DpbusdBcast(s, u[c], y.qs + 4 * c);
        }
        t = _mm512_add_epi32(s0, s1);
      } else {  // one chain per row: the rows' chains are independent of each other
        t = BiasIl<K>(y);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) t = DpbusdBcast(t, u[c], y.qs + 4 * c);
      }
      acc[r] = AccumulateIl(acc[r], t, y, dw);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) _mm512_storeu_ps(out + r * ldo, acc[r]);
}

template <Il K>
void GemmInterleavedAny(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  WithRows<kMaxMultiRows>(na, [&](auto rows) { GemmInterleaved<K, decltype(rows)::value>(n, w, a, a_stride, out, ldo); });
}

// gemm_streamed (kernels.h).
template <Il K>
void GemmInterleavedStreamed(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  WithRows<kMaxMultiRows>(na, [&](auto rows) {
    GemmInterleaved<K, decltype(rows)::value, true>(n, w, a, a_stride, out, ldo);
  });
}

// Interleaved Q4_K, 16 rows x NA activation rows (Q8_K), NA <= 8 per pass. Per super-block: the
// 16 rows' scales and mins unpacked once (x86_interleaved.h); per pair of sub-blocks, in two halves
// of 16 elements (chunks 0-3, 4-7), 4 chunks of nibbles, each VPDPBUSD against the activation
// row's 4 bytes there broadcast (low nibbles: the even sub-block, high: the odd one). A half's sum
// of 16 nibbles (0..15) times int8 quants lies in -30720..30480, a 16-bit number, so one VPDPWSSD
// against the scale (0..63, an int32 lane: the int16 pair (sc, 0), the sum's upper half, its sign,
// multiplied by zero) adds sc_j times it: no VPMULLD (two uops on Intel's port 0) and no VPADDD.
// The mins against the activation's 32-element sums by VPDPWSSD, two sub-blocks at a time; then the
// float step of K4IlAdd. All integer sums are exact, so their order is free; the float operations
// per activation row do not depend on NA.
// kNear: a small batch streaming its weights (PrefetchNear, x86_prefetch.h).
template <int NA, bool kNear = false>
void GemmQ4KIlPass(int64_t n, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out, int64_t ldo) {
  const int64_t nb = n / quant::kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* blk = w + i * kK4IlBytes;
    PrefetchAhead<1, kK4IlBytes - 2048>(blk + 2048 + 8192);  // the quants' lines are requested pair by pair below
    K4IlScales sm;
    UnpackK4IlScales(blk, &sm);
    K4IlMins mins;
    K4IlMinPairs(sm, &mins);
    __m512i isum[NA];
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) isum[r] = _mm512_setzero_si512();
    // The scales as int32 lanes, whole vectors (a partial reload of a stored vector would stall).
    __m512i sc32[8] = {K4IlScale<0>(sm), K4IlScale<1>(sm), K4IlScale<2>(sm), K4IlScale<3>(sm),
                       K4IlScale<4>(sm), K4IlScale<5>(sm), K4IlScale<6>(sm), K4IlScale<7>(sm)};
#pragma GCC unroll 1
    for (int p = 0; p < 4; ++p) {
      const __m512i sc_lo = sc32[2 * p], sc_hi = sc32[2 * p + 1];
      auto half = [&](auto hv) __attribute__((always_inline)) {
        constexpr int H = decltype(hv)::value;
        // One chain per activation row and sub-block (16 chains for 8 rows keep VPDPBUSD's pipes
        // busy; one row's two wait on its latency, which decode's memory stream hides).
        __m512i slo[NA], shi[NA];
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) slo[r] = shi[r] = _mm512_setzero_si512();
        auto chunk = [&](int c) __attribute__((always_inline)) {
          PrefetchAhead<1, 64>(blk + 512 * p + 64 * c + 8192);
          if constexpr (kNear) PrefetchNear(blk + 512 * p + 64 * c);
          // Loaded once (x86_interleaved.h: several rows are bound by vector loads).
          const __m512i v = LoadOnce(blk + 512 * p + 64 * c);
          const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
          for (int r = 0; r < NA; ++r) {
            const int8_t* q = Row<BlockQ8_K>(a, a_stride, r)[i].qs + 64 * p + 4 * c;
            slo[r] = DpbusdBcast(slo[r], lo, q);
            shi[r] = DpbusdBcast(shi[r], hi, q + 32);
          }
        };
        // Unrolled for any NA. (A short loop body for one row (decode) read faster while GCC
        // dropped the unrolled body's prefetches (x86_prefetch.h); with them, the unrolled body
        // streams one row at 30 against 21-25 GB/s on one Zen 5 thread.)
#pragma GCC unroll 4
        for (int c = 4 * H; c < 4 * H + 4; ++c) chunk(c);
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) {
          isum[r] = _mm512_dpwssd_epi32(isum[r], slo[r], sc_lo);
          isum[r] = _mm512_dpwssd_epi32(isum[r], shi[r], sc_hi);
        }
      };
      half(std::integral_constant<int, 0>{});
      half(std::integral_constant<int, 1>{});
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K* row = Row<BlockQ8_K>(a, a_stride, r);
      acc[r] = K4IlAdd(acc[r], isum[r], row[i], K4IlSums(row, nb, i), mins, blk);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) _mm512_storeu_ps(out + r * ldo, acc[r]);
}

// A K-quant kernel of at most kRows activation rows (whose sums stay in registers) over `na`
// rows: pass(rows, the first row's activations, its outputs) per kRows rows, rows an
// integral_constant.
template <int kRows, typename Pass>
__attribute__((always_inline)) inline void InPasses(int na, const void* a, size_t a_stride, float* out, int64_t ldo,
                                                    Pass&& pass) {
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int r0 = 0; r0 < na; r0 += kRows) {
    WithRows<kRows>(std::min(kRows, na - r0), [&](auto rows) { pass(rows, ab + r0 * a_stride, out + r0 * ldo); });
  }
}

void GemmQ4KIlAny(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  InPasses<8>(na, a, a_stride, out, ldo, [&](auto rows, const uint8_t* ar, float* o) {
    GemmQ4KIlPass<decltype(rows)::value>(n, static_cast<const uint8_t*>(w), ar, a_stride, o, ldo);
  });
}

// gemm_streamed (kernels.h): NA <= 8, one pass.
void GemmQ4KIlStreamed(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  WithRows<8>(na, [&](auto rows) {
    GemmQ4KIlPass<decltype(rows)::value, true>(n, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a),
                                                a_stride, out, ldo);
  });
}

// Interleaved Q6_K (kernels/interleave.h), 16 rows x NA activation rows (Q8_K), NA <= 8 per pass.
// Per 64 elements (p): 8 chunks of nibbles and 4 of top bits make 16 vectors of stored values
// (0..63; a nibble OR its two top bits moved to bits 4-5), each 4 elements of 16 rows; the 4
// vectors of a group of 16 elements are one VPDPBUSD chain per activation row against its quants
// broadcast, then scaled by the group's 16 int8 scales (VPMULLD, or VPMADDWD / VPDPWSSD: see
// K6SumHalves). The offset (stored value - 32) comes out once per super-block: 32 sum_j sc_j B_j
// against the activation's bsums by VPDPWSSD (the scales as int16 pairs). All integer sums are
// exact; one fused multiply-add per super-block and activation row, whatever NA.
// The groups go two at a time (a half: the low and the high nibbles of 4 chunks), so that 8 rows
// need 16 chains and one pass: in two passes of 4 rows, as before, each chunk was unpacked twice
// and the second pass read the weights again (Xeon VM, one 16 x 2048 group of 8 rows in L2: 2255
// ns in two passes).
inline constexpr int kK6IlBytes = 3360;

// sc * S for a group's sum S (|S| <= 16 * 63 * 128 < 2^17) and its scale sc (int8) by one VPMADDWD
// or VPDPWSSD instead of a VPMULLD (two uops on Intel's port 0): S = lo + 256 hi with lo = S's low
// byte (0..255) and hi = S >> 8 (an int16), made by one byte shuffle (K6SumHalves), against the
// pair (sc, 256 sc), both int16 (256 sc lies in -32768..32512) (K6ScalePairs). The same integer.
// Up to kK6MulRows activation rows keep VPMULLD: making the pairs costs more than it saves for a
// row or two, and one row's isum chain would wait on two VPDPWSSD a half (Xeon VM, one 16 x 2048
// group in L1, 3 alternating runs: 1 row 513-538 ns with VPMULLD against 553-581 with the pairs;
// 4 rows 1077-1190 against 1034-1046, 8 rows 1945-2071 against 1749-1762).
inline constexpr int kK6MulRows = 2;
__attribute__((always_inline)) inline __m512i K6SumHalves(__m512i s) {
  // Per 32-bit lane: its bytes 0, zero, 1, 2 (VPSHUFB indexes bytes within 128 bits; index bit 7
  // set: a zero byte).
  const __m512i idx =
      _mm512_broadcast_i32x4(_mm_setr_epi32(0x02018000, 0x06058004, 0x0A098008, 0x0E0D800C));
  return _mm512_shuffle_epi8(s, idx);
}
// The 16 rows' pairs (sc, 256 sc) of a group, from its 16 int8 scales at p.
__attribute__((always_inline)) inline __m512i K6ScalePairs(const uint8_t* p) {
  const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  // Lower half sc (its int32's low 16 bits), upper half sc << 8 (bits 24..31 of sc << 24):
  // (a & b) | c.
  return _mm512_ternarylogic_epi32(sc, _mm512_set1_epi32(0xFFFF), _mm512_slli_epi32(sc, 24), 0xEA);
}

template <int NA, bool kNear = false>
void GemmQ6KIlPass(int64_t n, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out, int64_t ldo) {
  const int64_t nb = n / quant::kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  __m512 acc[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* blk = w + i * kK6IlBytes;
    // 16 KB ahead, as the Q4_K kernel: scales and d here, the quants' lines as they are read.
    PrefetchAhead<1, kK6IlBytes - 3072>(blk + 3072 + 8192);
    __m512i isum[NA];
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int p = 0; p < 4; ++p) {
      __m512i tops[NA <= 4 ? 4 : 1];
      if constexpr (NA <= 4) {
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) tops[h] = LoadOnce(blk + 2048 + 256 * p + 64 * h);
      }
      // Half H: chunks 4H..4H+3, whose low nibbles make group H and high nibbles group 2 + H; their
      // top bits sit at bits 2H..2H+1 (low nibble) and 4+2H.. (high) of top vector h = c % 4.
      auto half = [&](auto hv) __attribute__((always_inline)) {
        constexpr int H = decltype(hv)::value;
        __m512i s[NA][2];  // per activation row: group H, group 2 + H
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) s[r][0] = s[r][1] = _mm512_setzero_si512();
        auto chunk = [&](int h) __attribute__((always_inline)) {
          const int c = 4 * H + h;
          PrefetchAhead<1, 64>(blk + 512 * p + 64 * c + 8192);
          if constexpr (kNear) PrefetchNear(blk + 512 * p + 64 * c);
          if constexpr (H == 0) PrefetchAhead<1, 64>(blk + 2048 + 256 * p + 64 * h + 8192);
          // Each vector loaded once (x86_interleaved.h: several rows are bound by vector loads); the
          // top bits once per half where 8 rows leave no registers to keep them in.
          __m512i top;
          if constexpr (NA <= 4) {
            top = tops[h];
          } else {
            top = LoadOnce(blk + 2048 + 256 * p + 64 * h);
          }
          const __m512i v = LoadOnce(blk + 512 * p + 64 * c);
          // The top bits moved to bits 4-5; what the 16-bit shifts carry over is masked off.
          const __m512i tlo = H == 0 ? _mm512_slli_epi16(top, 4) : _mm512_slli_epi16(top, 2);
          const __m512i thi = H == 0 ? top : _mm512_srli_epi16(top, 2);
          const __m512i lo = _mm512_ternarylogic_epi32(_mm512_and_si512(v, m4), tlo, m30, 0xF8);  // a | (b & c)
          const __m512i hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), thi, m30, 0xF8);
#pragma GCC unroll 8
          for (int r = 0; r < NA; ++r) {
            const int8_t* q = Row<BlockQ8_K>(a, a_stride, r)[i].qs + 64 * p + 4 * c;
            s[r][0] = DpbusdBcast(s[r][0], lo, q);
            s[r][1] = DpbusdBcast(s[r][1], hi, q + 32);
          }
        };
        // Unrolled for any NA, as the Q4_K kernel.
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) chunk(h);
        const uint8_t* sc = blk + 3072 + 16 * (4 * p + H);  // group H's scales; group 2 + H's 32 on
        if constexpr (NA <= kK6MulRows) {
          const __m512i sc_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
          const __m512i sc_hi =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 32)));
#pragma GCC unroll 8
          for (int r = 0; r < NA; ++r) {
            isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(_mm512_mullo_epi32(s[r][0], sc_lo),
                                                                 _mm512_mullo_epi32(s[r][1], sc_hi)));
          }
        } else {
          const __m512i sc_lo = K6ScalePairs(sc), sc_hi = K6ScalePairs(sc + 32);
#pragma GCC unroll 8
          for (int r = 0; r < NA; ++r) {
            isum[r] = _mm512_dpwssd_epi32(isum[r], K6SumHalves(s[r][0]), sc_lo);
            isum[r] = _mm512_dpwssd_epi32(isum[r], K6SumHalves(s[r][1]), sc_hi);
          }
        }
      };
      half(std::integral_constant<int, 0>{});
      half(std::integral_constant<int, 1>{});
    }
    // sum_j sc_j B_j: lane r of pair k holds sc_2k and sc_2k+1 of row r as int16.
    __m512i pairs[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 3072 + 32 * k));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 3072 + 32 * k + 16));
      pairs[k] = _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi)));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 3328)));
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, a_stride, r)[i];
      __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) m = _mm512_dpwssd_epi32(m, pairs[k], BroadcastI32(y.bsums + 2 * k));
      const __m512i total = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(m, 5));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, _mm512_set1_ps(y.d)), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) _mm512_storeu_ps(out + r * ldo, acc[r]);
}

void GemmQ6KIlAny(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  InPasses<8>(na, a, a_stride, out, ldo, [&](auto rows, const uint8_t* ar, float* o) {
    GemmQ6KIlPass<decltype(rows)::value>(n, static_cast<const uint8_t*>(w), ar, a_stride, o, ldo);
  });
}

// gemm_streamed (kernels.h): NA <= 8, one pass.
void GemmQ6KIlStreamed(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  WithRows<8>(na, [&](auto rows) {
    GemmQ6KIlPass<decltype(rows)::value, true>(n, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a),
                                                a_stride, out, ldo);
  });
}

#pragma GCC diagnostic pop

void QuantizeQ8S(const float* src, void* dst, int64_t n) {
  BlockQ8S* b = static_cast<BlockQ8S*>(dst);
  for (int64_t i = 0; i < n / quant::kQK; ++i) {
    uint16_t d16;
    b[i].sum = QuantQ8Block(src + i * quant::kQK, &d16, b[i].qs);
    b[i].d = H2F(d16);
  }
}
#endif  // TANDEM_X86_VNNI

// Fills every entry this header implements (the caller sets t->isa).
inline void FillCommon(KernelTable* t) {
  auto set = [t](TensorType type, quant::VecDotFn dot, VecDotMultiFn multi) {
    TypeKernels& k = t->types[static_cast<uint32_t>(type)];
    k.vec_dot = dot;
    k.vec_dot_multi = multi;
  };
#define TANDEM_X86_SET(T) set(TensorType::k##T, VecDot<K##T>, VecDotMulti<K##T>);
  TANDEM_X86_SET(F32) TANDEM_X86_SET(F16) TANDEM_X86_SET(BF16) TANDEM_X86_SET(Q4_0)
  TANDEM_X86_SET(Q4_1) TANDEM_X86_SET(Q5_0) TANDEM_X86_SET(Q5_1) TANDEM_X86_SET(Q8_0)
  TANDEM_X86_SET(Q2_K) TANDEM_X86_SET(Q3_K) TANDEM_X86_SET(Q4_K) TANDEM_X86_SET(Q5_K)
  TANDEM_X86_SET(Q6_K)
#undef TANDEM_X86_SET
  t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_0)] = QuantizeQ8_0;
  t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_1)] = QuantizeQ8_1;
  t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_K)] = QuantizeQ8_K;
  t->f = FloatOps{RmsNorm, Softmax, SiluMul, Add, Scale, Dot, Axpy, Rope};
#ifdef TANDEM_X86_VNNI
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_0)] = GemmInterleavedAny<Il::kQ4_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ5_0)] = GemmInterleavedAny<Il::kQ5_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ8_0)] = GemmInterleavedAny<Il::kQ8_0>;
  t->gemm_streamed[static_cast<uint32_t>(TensorType::kQ4_0)] = GemmInterleavedStreamed<Il::kQ4_0>;
  t->gemm_streamed[static_cast<uint32_t>(TensorType::kQ5_0)] = GemmInterleavedStreamed<Il::kQ5_0>;
  t->gemm_streamed[static_cast<uint32_t>(TensorType::kQ8_0)] = GemmInterleavedStreamed<Il::kQ8_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_K)] = GemmQ4KIlAny;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ6_K)] = GemmQ6KIlAny;
  t->gemm_streamed[static_cast<uint32_t>(TensorType::kQ4_K)] = GemmQ4KIlStreamed;
  t->gemm_streamed[static_cast<uint32_t>(TensorType::kQ6_K)] = GemmQ6KIlStreamed;
  t->quantize_q8s = QuantizeQ8S;
#endif
}

}  // namespace
}  // namespace tandem::kernels::x86
