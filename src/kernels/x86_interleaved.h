// The interleaved Q4_0 / Q5_0 / Q8_0 blocks (kernels/interleave.h) as 512-bit vectors, shared by
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

// The block's unsigned weight bytes: u[c] holds elements 4c..4c+3 of each of the 16 rows (lane r
// = row r), c = 0..7, which is also the layout of an AMX B tile of 8 rows x 64 bytes.
template <Il K>
__attribute__((always_inline)) inline void UnpackIl(const uint8_t* blk, __m512i u[8]) {
  if constexpr (IlBlock<K>::kNibbles) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i p = _mm512_loadu_si512(blk + 64 * c);
      u[c] = _mm512_and_si512(p, low4);                             // elements 4c..4c+3
      u[4 + c] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);  // elements 16+4c..
    }
    if constexpr (K == Il::kQ5_0) {
      const __m512i sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        uint64_t m;
        std::memcpy(&m, blk + 256 + 8 * c, 8);
        u[c] = _mm512_mask_add_epi8(u[c], _cvtu64_mask64(m), u[c], sixteen);
      }
    }
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

// acc += (sums - bias * the activation block's sum) * (row scales * the activation's scale): one
// block of one activation row, `sums` the 16 rows' integer dot products with its quants.
template <Il K>
__attribute__((always_inline)) inline __m512 AddBlockIl(__m512 acc, __m512i sums, const BlockQ8S& y, __m512 dw) {
  const __m512i t = _mm512_sub_epi32(sums, _mm512_set1_epi32(IlBlock<K>::kBias * y.sum));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_set1_ps(y.d)), acc);
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
