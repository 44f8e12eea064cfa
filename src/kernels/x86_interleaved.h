// The interleaved Q4_0 / Q5_0 / Q8_0 / Q4_K blocks (kernels/interleave.h) as 512-bit vectors, shared by
// the VNNI kernels (x86_common.h) and the AMX ones (kernels_amx.cc), so that both unpack the same
// bytes and apply one block's scales to its integer sums with the same float operations: a row
// gets the same bits from either (batch invariance, see x86_common.h). Internal to src/kernels;
// needs AVX-512 F/BW and F16C. Each including file gets its own copy (unnamed namespace).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/interleave.h"
#include "quant/quant.h"

namespace tandem::kernels::x86 {
namespace {

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

enum class Il { kQ4_0, kQ5_0, kQ8_0 };

template <Il K>
struct IlBlock {
  static constexpr bool kNibbles = K != Il::kQ8_0;
  static constexpr int kChunks = kNibbles ? 4 : 8;         // 64-byte chunks of quants
  static constexpr int kMaskBytes = K == Il::kQ5_0 ? 64 : 0;  // Q5_0's fifth bits
  static constexpr int kBytes = K == Il::kQ4_0 ? 288 : K == Il::kQ5_0 ? 352 : 544;
  static constexpr int32_t kBias = K == Il::kQ4_0 ? 8 : K == Il::kQ5_0 ? 16 : 128;
};

// On Zen 5 a core issues two VPDPBUSD per cycle but also only two vector loads, and a VPDPBUSD
// with its activations broadcast from memory takes one of them: a kernel of several activation
// rows is bound by loads, not multiplies, and must not load anything twice. GCC folds a vector
// load into every instruction that uses it (the weights' AND and shift each reloading the same
// 64 bytes); this loads them once into a register.
__attribute__((always_inline)) inline __m512i LoadOnce(const void* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));
  return v;
}

// Interleaved Q5_0's fifth bits (the 64 bytes after its nibbles, one bit per byte of u): 16 added
// where set.
__attribute__((always_inline)) inline void AddFifthBitsIl(const uint8_t* blk, __m512i u[8]) {
  const __m512i sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    uint64_t m;
    std::memcpy(&m, blk + 256 + 8 * c, 8);
    u[c] = _mm512_mask_add_epi8(u[c], _cvtu64_mask64(m), u[c], sixteen);
  }
}

// The block's unsigned weight bytes: u[c] holds elements 4c..4c+3 of each of the 16 rows (lane r
// = row r), c = 0..7, which is also the layout of an AMX B tile of 8 rows x 64 bytes.
template <Il K>
__attribute__((always_inline)) inline void UnpackIl(const uint8_t* blk, __m512i u[8]) {
  if constexpr (IlBlock<K>::kNibbles) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i p = LoadOnce(blk + 64 * c);
      u[c] = _mm512_and_si512(p, low4);                             // elements 4c..4c+3
      u[4 + c] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);  // elements 16+4c..
    }
    if constexpr (K == Il::kQ5_0) AddFifthBitsIl(blk, u);
  } else {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) u[c] = _mm512_loadu_si512(blk + 64 * c);  // elements 4c..4c+3
  }
}

// The 16 rows' scales of a block.
template <Il K>
inline __m512 ScalesIl(const uint8_t* blk) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * IlBlock<K>::kChunks + IlBlock<K>::kMaskBytes)));
}

// Four bytes at p in every 32-bit lane, loaded by the broadcast itself: a broadcast from a general
// register (what _mm512_set1_epi32 of a loaded value becomes) costs a vector uop each.
__attribute__((always_inline)) inline __m512i BroadcastI32(const void* p) {
  return _mm512_broadcastd_epi32(_mm_loadu_si32(p));
}

// s += VPDPBUSD(u, the 4 signed bytes at p in every 32-bit lane), the broadcast folded into the
// instruction's memory operand (GCC 12 emits a separate broadcast load for every intrinsic form).
__attribute__((always_inline)) inline __m512i DpbusdBcast(__m512i s, __m512i u, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(s) : "v"(u), "m"(*static_cast<const int32_t*>(p)));
  return s;
}

// What a block's integer sums for one activation row start from: minus the bias times the
// activation block's sum, so that a VPDPBUSD chain begun there ends at (sums - bias * sum).
template <Il K>
__attribute__((always_inline)) inline __m512i BiasIl(const BlockQ8S& y) {
  return _mm512_set1_epi32(-IlBlock<K>::kBias * y.sum);
}

// acc += t * (row scales * the activation's scale): one block of one activation row, `t` the 16
// rows' integer dot products with its quants with the bias taken out.
__attribute__((always_inline)) inline __m512 AccumulateIl(__m512 acc, __m512i t, const BlockQ8S& y, __m512 dw) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_set1_ps(y.d)), acc);
}

// The same from the plain sums (bias not yet taken out).
template <Il K>
__attribute__((always_inline)) inline __m512 AddBlockIl(__m512 acc, __m512i sums, const BlockQ8S& y, __m512 dw) {
  return AccumulateIl(acc, _mm512_add_epi32(sums, BiasIl<K>(y)), y, dw);
}

// ---- interleaved Q4_K (kernels/interleave.h) ----

inline constexpr int kK4IlBytes = 2304;

// A super-block's 16 rows' scales and mins, unpacked to bytes, sub-block major: sc[j / 4] holds
// sub-blocks 4 (j / 4) .. +3, 16 rows each (128-bit lane j % 4, byte r); likewise mn. Kept in
// registers: reloading parts of a vector just stored stalls on store forwarding.
struct K4IlScales {
  __m512i sc[2];
  __m512i mn[2];
};

__attribute__((always_inline)) inline void UnpackK4IlScales(const uint8_t* blk, K4IlScales* s) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
  const __m512i sc = _mm512_loadu_si512(blk + 2048), mn = _mm512_loadu_si512(blk + 2112);
  const __m512i hb = _mm512_loadu_si512(blk + 2176);
  auto top = [&](int shift) {  // two bits of hb moved to bits 4-5
    return _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, shift), m3), 4);
  };
  s->sc[0] = _mm512_or_si512(_mm512_and_si512(sc, m4), top(0));
  s->sc[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(sc, 4), m4), top(2));
  s->mn[0] = _mm512_or_si512(_mm512_and_si512(mn, m4), top(4));
  s->mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(mn, 4), m4), top(6));
}

// Byte lane r of 128-bit lane q of v, for r < 16, as int32 lanes.
template <int Q>
__attribute__((always_inline)) inline __m512i K4IlWiden(__m512i v) {
  return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, Q));
}
template <int J>
__attribute__((always_inline)) inline __m512i K4IlScale(const K4IlScales& s) {
  return K4IlWiden<J % 4>(s.sc[J / 4]);
}

// A super-block's 16 rows' mins as VPDPWSSD operands, the same for every activation row, so made
// once per super-block: p[k] lane r holds mn_2k and mn_2k+1 of row r as two int16.
struct K4IlMins {
  __m512i p[4];
};

__attribute__((always_inline)) inline void K4IlMinPairs(const K4IlScales& s, K4IlMins* m) {
  auto pair = [](__m512i lo, __m512i hi) __attribute__((always_inline)) { return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)); };
  m->p[0] = pair(K4IlWiden<0>(s.mn[0]), K4IlWiden<1>(s.mn[0]));
  m->p[1] = pair(K4IlWiden<2>(s.mn[0]), K4IlWiden<3>(s.mn[0]));
  m->p[2] = pair(K4IlWiden<0>(s.mn[1]), K4IlWiden<1>(s.mn[1]));
  m->p[3] = pair(K4IlWiden<2>(s.mn[1]), K4IlWiden<3>(s.mn[1]));
}

// acc += (d * y.d) * float(isum) - (dmin * y.d) * float(sum_j mn_j B_j): one super-block of one
// activation row, `isum` its 16 rows' scaled sub-block sums; the mins against the activation's
// 32-element sums B_j (`sums`, the 8 after its row's blocks: interleave.h), two sub-blocks per
// VPDPWSSD, the pairs of sums broadcast from memory (a broadcast from a general register costs a
// vector uop each).
// The 16 rows' d and dmin of a super-block, as floats.
__attribute__((always_inline)) inline __m512 K4IlD(const uint8_t* blk) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2240)));
}
__attribute__((always_inline)) inline __m512 K4IlDmin(const uint8_t* blk) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2272)));
}

// The same with d and dmin given (K4IlD, K4IlDmin: the AMX kernel's super-blocks unpacked ahead
// keep them as floats).
__attribute__((always_inline)) inline __m512 K4IlAddScaled(__m512 acc, __m512i isum, const quant::BlockQ8_K& y,
                                                           const int16_t* sums, const K4IlMins& mins, __m512 d,
                                                           __m512 dmin) {
  __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) m = _mm512_dpwssd_epi32(m, mins.p[k], BroadcastI32(sums + 2 * k));
  const __m512 yd = _mm512_set1_ps(y.d);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, yd), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, yd), acc);
}

__attribute__((always_inline)) inline __m512 K4IlAdd(__m512 acc, __m512i isum, const quant::BlockQ8_K& y,
                                                     const int16_t* sums, const K4IlMins& mins, const uint8_t* blk) {
  return K4IlAddScaled(acc, isum, y, sums, mins, K4IlD(blk), K4IlDmin(blk));
}

// The 8 sub-block sums of super-block i of an activation row of nb super-blocks (interleave.h).
__attribute__((always_inline)) inline const int16_t* K4IlSums(const quant::BlockQ8_K* row, int64_t nb, int64_t i) {
  return reinterpret_cast<const int16_t*>(row + nb) + 8 * i;
}

// Calls f(std::integral_constant<int, na>) for 1 <= na <= kMax (na above kMax: kMax), so that a
// kernel templated on its number of activation rows can be called with a run-time count.
template <int kMax, typename F, int N = 1>
__attribute__((always_inline)) inline void WithRows(int na, F&& f) {
  if constexpr (N < kMax) {
    if (na > N) return WithRows<kMax, F, N + 1>(na, static_cast<F&&>(f));
  }
  f(std::integral_constant<int, N>{});
}

#pragma GCC diagnostic pop

}  // namespace
}  // namespace tandem::kernels::x86
