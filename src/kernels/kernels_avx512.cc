// The AVX-512 kernel table: the x86 kernels compiled with AVX-512 VL + VNNI, so that integer dot
// products use VPDPBUSD / VPDPWSSD (multiply, widen and accumulate in one instruction). Kernels:
// x86_common.h, except Q4_K, which has a 512-bit kernel below.
#define TANDEM_X86_VNNI 1
#include "kernels/x86_common.h"

namespace tandem::kernels::x86 {
namespace {

// Q4_K with 512-bit vectors: x = d*sc*q - dmin*mn per 32 elements. Each 32-byte group of qs
// (chunk k: elements 64k..64k+63) is broadcast to both 256-bit halves and the high half shifted
// right by 4, so one zmm holds the 64 nibbles in element order (low half: sub-block 2k, high
// half: sub-block 2k+1) and lines up with a 64-byte load of the Q8_K values. maddubs gives
// int16 pair sums (|.| <= 2*15*127), VPDPWSSD applies the per-half sub-block scale and
// accumulates in int32; mins come from the Q8_K block sums.
#ifndef Q4KPF
#define Q4KPF 2048
#endif
inline constexpr int kQ4KPrefetch = Q4KPF;

template <int NA>
void DotQ4K512(int64_t n, const void* w, const void* a, size_t stride, float* out) {
  const int64_t nb = n / quant::kQKK;
  const BlockQ4_K* bw = static_cast<const BlockQ4_K*>(w);
  __m512 accd[NA];
  __m256 accm[NA];
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) accd[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i shr = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  __m512i sctl[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)
    sctl[k] = _mm512_inserti64x4(_mm512_castsi256_si512(Bcast16(2 * k)), Bcast16(2 * k + 1), 1);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_K& b = bw[i];
    // Weight rows are streamed once; prefetch well ahead (past the row end is harmless and
    // usually the next row of the matrix).
    _mm_prefetch(reinterpret_cast<const char*>(&b) + kQ4KPrefetch, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(&b) + kQ4KPrefetch + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(&b) + kQ4KPrefetch + 128, _MM_HINT_T0);
    const float d = H2F(b.d), dmin = H2F(b.dmin);
    uint64_t sc, mn;
    UnpackK4(b.scales, &sc, &mn);
    const __m512i scv = _mm512_broadcast_i32x4(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    const __m128i mn8 = _mm_cvtsi64_si128(static_cast<long long>(mn));
    const __m256i mnv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));  // mn[j] twice
    __m512i wq[4], sk[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i q = _mm512_broadcast_i64x4(Load256(b.qs + 32 * k));
      wq[k] = _mm512_and_si512(_mm512_srlv_epi64(q, shr), low4);
      sk[k] = _mm512_shuffle_epi8(scv, sctl[k]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NA; ++r) {
      const BlockQ8_K& y = Row<BlockQ8_K>(a, stride, r)[i];
      __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
      acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wq[0], _mm512_loadu_si512(y.qs)), sk[0]);
      acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wq[1], _mm512_loadu_si512(y.qs + 64)), sk[1]);
      acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wq[2], _mm512_loadu_si512(y.qs + 128)), sk[2]);
      acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wq[3], _mm512_loadu_si512(y.qs + 192)), sk[3]);
      const __m256i m = _mm256_madd_epi16(Load256(y.bsums), mnv);
      accd[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * y.d),
                                _mm512_cvtepi32_ps(_mm512_add_epi32(acc0, acc1)), accd[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * y.d), _mm256_cvtepi32_ps(m), accm[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NA; ++r) out[r] = _mm512_reduce_add_ps(accd[r]) - Hsum(accm[r]);
}

struct KQ4_K512 {
  template <int NA>
  static void Run(int64_t n, const void* w, const void* a, size_t stride, float* out) {
    DotQ4K512<NA>(n, w, a, stride, out);
  }
};

inline void FillAvx512Only(KernelTable* t) {
  TypeKernels& k = t->types[static_cast<uint32_t>(TensorType::kQ4_K)];
  k.vec_dot = VecDot<KQ4_K512>;
  k.vec_dot_multi = VecDotMulti<KQ4_K512>;
}

}  // namespace
}  // namespace tandem::kernels::x86

namespace tandem::kernels::internal {

bool HasAvx512() { return true; }

void FillAvx512(KernelTable* t) {
  t->isa = Isa::kAvx512;
  x86::FillCommon(t);
  x86::FillAvx512Only(t);
}

}  // namespace tandem::kernels::internal
