// x86 attention kernels (the AttnOps of kernels.h), shared by kernels_avx2.cc and
// kernels_avx512.cc like x86_common.h, whose helpers (Exp, Hsum, H2F) they use. Internal to
// src/kernels; everything sits in the unnamed namespace of x86_common.h's namespace, so each
// including file compiles its own copy with its own flags.
//
// Rows of keys and values are F32, F16 or Q8_0 and are given by pointer. A Rows<T> reader loads
// 8 consecutive values of a row as floats; Q8_0 values are scaled by their block's d once per
// block.
//
// scores: a tile of 4 query rows x 2 key rows keeps 8 dot-product accumulators in registers
// (each key vector is converted once for 4 queries), reduced horizontally together at the end.
// accumulate: a tile of 4 output rows x 16 columns stays in registers over all value rows; each
// value vector is converted once for 4 output rows (outer-product form, no horizontal sums).
//
// The AVX-512 build does both in 512-bit vectors where the row length is a multiple of 16 (every
// head dimension of today's models): scores by tiles of 4 x 4 with one reduction network for all
// 16 (ScoreTile16), the accumulation by 4 rows x 32 columns (AccTile in 16 lanes, the same bits).
#pragma once

#include "kernels/x86_common.h"

namespace tandem::kernels::x86 {
namespace {

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics, as in x86_common.h
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <TensorType T>
struct Rows;

template <>
struct Rows<TensorType::kF32> {
  static constexpr bool kScaled = false;
  static __m256 Load8(const void* r, int64_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(r) + i);
  }
  static float At(const void* r, int64_t i) { return static_cast<const float*>(r)[i]; }
  static float ScaleOf(const void*, int64_t) { return 1.0f; }
  static __m256 Scale(const void*, int64_t) { return _mm256_set1_ps(1.0f); }
#ifdef __AVX512F__
  static __m512 Load16(const void* r, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(r) + i); }
#endif
};

template <>
struct Rows<TensorType::kF16> {
  static constexpr bool kScaled = false;
  static __m256 Load8(const void* r, int64_t i) {
    return _mm256_cvtph_ps(Load128(static_cast<const uint16_t*>(r) + i));
  }
  static float At(const void* r, int64_t i) { return H2F(static_cast<const uint16_t*>(r)[i]); }
  static float ScaleOf(const void*, int64_t) { return 1.0f; }
  static __m256 Scale(const void*, int64_t) { return _mm256_set1_ps(1.0f); }
#ifdef __AVX512F__
  static __m512 Load16(const void* r, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(r) + i)));
  }
#endif
};

template <>
struct Rows<TensorType::kQ8_0> {
  static constexpr bool kScaled = true;  // Load8 gives the integers; multiply by Scale
  static __m256 Load8(const void* r, int64_t i) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(r)[i / quant::kQK];
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + i % quant::kQK));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  }
  static float At(const void* r, int64_t i) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(r)[i / quant::kQK];
    return H2F(b.d) * b.qs[i % quant::kQK];
  }
  // The scale of the block holding element i.
  static float ScaleOf(const void* r, int64_t i) { return H2F(static_cast<const BlockQ8_0*>(r)[i / quant::kQK].d); }
  static __m256 Scale(const void* r, int64_t i) { return _mm256_set1_ps(ScaleOf(r, i)); }
#ifdef __AVX512F__
  static __m512 Load16(const void* r, int64_t i) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(r)[i / quant::kQK];
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + i % quant::kQK));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  }
#endif
};

// Lane l of the result = sum of the 8 lanes of v[l], added as ((x0 + x1) + (x2 + x3)) +
// ((x4 + x5) + (x6 + x7)).
inline __m256 Hsum8x8(const __m256* v) {
  const __m256 h01 = _mm256_hadd_ps(v[0], v[1]), h23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 h45 = _mm256_hadd_ps(v[4], v[5]), h67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 a = _mm256_hadd_ps(h01, h23), b = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// The sum of v's lanes in Hsum8x8's order, so that a score does not depend on the tile it was
// computed in (a query row alone and in a group give the same bits).
inline float HsumPairs(__m256 v) {
  const __m256 h = _mm256_hadd_ps(v, v);
  const __m256 a = _mm256_hadd_ps(h, h);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)));
}

// Calls f(std::integral_constant<int, R>{}, r) for tiles of R = 4 rows from row r = 0, then one
// tile of the 1-3 rows left: the row tiling every kernel below uses.
template <typename F>
inline void InRowTiles(int64_t n, F&& f) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) f(std::integral_constant<int, 4>{}, r);
  switch (n - r) {
    case 3:
      f(std::integral_constant<int, 3>{}, r);
      break;
    case 2:
      f(std::integral_constant<int, 2>{}, r);
      break;
    case 1:
      f(std::integral_constant<int, 1>{}, r);
      break;
    default:
      break;
  }
}

// QR query rows x KR key rows of scores.
template <TensorType T, int QR, int KR>
inline void ScoreTile(int64_t n, const float* q, int64_t ldq, const void* const* rows, float* s,
                      int64_t lds) {
  using R = Rows<T>;
  __m256 acc[QR * KR];
#pragma GCC unroll 8
  for (int a = 0; a < QR * KR; ++a) acc[a] = _mm256_setzero_ps();
  int64_t i = 0;
  if constexpr (R::kScaled) {
    for (; i + quant::kQK <= n; i += quant::kQK) {
      __m256 d[KR];
#pragma GCC unroll 4
      for (int k = 0; k < KR; ++k) d[k] = R::Scale(rows[k], i);
#pragma GCC unroll 4
      for (int u = 0; u < quant::kQK; u += 8) {
        __m256 qv[QR];
#pragma GCC unroll 4
        for (int r = 0; r < QR; ++r) qv[r] = _mm256_loadu_ps(q + r * ldq + i + u);
#pragma GCC unroll 4
        for (int k = 0; k < KR; ++k) {
          const __m256 kv = _mm256_mul_ps(R::Load8(rows[k], i + u), d[k]);
#pragma GCC unroll 4
          for (int r = 0; r < QR; ++r)
            acc[r * KR + k] = _mm256_fmadd_ps(qv[r], kv, acc[r * KR + k]);
        }
      }
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      __m256 qv[QR];
#pragma GCC unroll 4
      for (int r = 0; r < QR; ++r) qv[r] = _mm256_loadu_ps(q + r * ldq + i);
#pragma GCC unroll 4
      for (int k = 0; k < KR; ++k) {
        const __m256 kv = R::Load8(rows[k], i);
#pragma GCC unroll 4
        for (int r = 0; r < QR; ++r) acc[r * KR + k] = _mm256_fmadd_ps(qv[r], kv, acc[r * KR + k]);
      }
    }
  }
  float out[8 * ((QR * KR + 7) / 8)];
  if constexpr (QR * KR == 8) {
    _mm256_storeu_ps(out, Hsum8x8(acc));
  } else {
    for (int a = 0; a < QR * KR; ++a) out[a] = HsumPairs(acc[a]);
  }
  for (int r = 0; r < QR; ++r) {
    for (int k = 0; k < KR; ++k) {
      float v = out[r * KR + k];
      for (int64_t e = i; e < n; ++e) v += q[r * ldq + e] * R::At(rows[k], e);
      s[r * lds + k] = v;
    }
  }
}

template <TensorType T, int KR>
inline void ScoreColumns(int64_t n, const float* q, int64_t ldq, int64_t nq,
                         const void* const* rows, float* s, int64_t lds) {
  InRowTiles(nq, [&](auto qr, int64_t r) {
    ScoreTile<T, decltype(qr)::value, KR>(n, q + r * ldq, ldq, rows, s + r * lds, lds);
  });
}

#ifdef __AVX512F__
// ---- 512-bit tiles (the AVX-512 build), for rows whose length is a multiple of 16 ----

// Scores of 4 query rows x 4 key rows, n % 16 == 0: 16 accumulators of 16-lane partial sums,
// then one reduction network for all 16 (halves, quarters, pairs, neighbours), which applies the
// same additions to every accumulator's lanes: a score gets the same bits in any slot of any
// tile. Only nq <= 4 rows and nk <= 4 keys are real; the other slots repeat the last real one and
// are not stored. Result lane 4k + r holds score (r, k).
template <TensorType T>
inline void ScoreTile16(int64_t n, const float* q, int64_t ldq, int nq, const void* const* rows, int nk, float* s,
                        int64_t lds) {
  using R = Rows<T>;
  const float* qr[4];
  const void* kr[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) qr[r] = q + std::min(r, nq - 1) * ldq;
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) kr[k] = rows[std::min(k, nk - 1)];
  __m512 a[16];
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) a[v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __m512 qv[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) qv[r] = _mm512_loadu_ps(qr[r] + i);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512 kv = R::Load16(kr[k], i);
      if constexpr (R::kScaled) kv = _mm512_mul_ps(kv, _mm512_set1_ps(R::ScaleOf(kr[k], i)));
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[4 * r + k] = _mm512_fmadd_ps(qv[r], kv, a[4 * r + k]);
    }
  }
  __m512 t[8], u[4], v[2];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {  // lanes j + j+8: 128-bit blocks 0-1 of a[2m], then a[2m+1]
    t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {  // + j+4: block b holds a[4m + b]'s 4 partial sums
    u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0xDD));
  }
#pragma GCC unroll 2
  for (int m = 0; m < 2; ++m) {  // + j+2, within each block
    v[m] = _mm512_add_ps(_mm512_unpacklo_ps(u[2 * m], u[2 * m + 1]), _mm512_unpackhi_ps(u[2 * m], u[2 * m + 1]));
  }
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0)),  // + j+1
                                 _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2)));
  float out[16];
  _mm512_storeu_ps(out, w);
  for (int r = 0; r < nq; ++r) {
    for (int k = 0; k < nk; ++k) s[r * lds + k] = out[4 * k + r];
  }
}

template <TensorType T>
void Scores16(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows, int64_t nk, float* s,
              int64_t lds) {
  for (int64_t j = 0; j < nk; j += 4) {
    const int kn = static_cast<int>(std::min<int64_t>(4, nk - j));
    for (int64_t r = 0; r < nq; r += 4) {
      ScoreTile16<T>(n, q + r * ldq, ldq, static_cast<int>(std::min<int64_t>(4, nq - r)), rows + j, kn,
                     s + r * lds + j, lds);
    }
  }
}

#endif  // __AVX512F__

template <TensorType T>
void ScoresT(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows,
             int64_t nk, float* s, int64_t lds) {
#ifdef __AVX512F__
  if (n % 16 == 0) return Scores16<T>(n, q, ldq, nq, rows, nk, s, lds);
#endif
  int64_t j = 0;
  for (; j + 2 <= nk; j += 2) ScoreColumns<T, 2>(n, q, ldq, nq, rows + j, s + j, lds);
  if (j < nk) ScoreColumns<T, 1>(n, q, ldq, nq, rows + j, s + j, lds);
}

void AttnScores(TensorType type, int64_t n, const float* q, int64_t ldq, int64_t nq,
                const void* const* rows, int64_t nk, float* s, int64_t lds) {
  switch (type) {
    case TensorType::kF16:
      return ScoresT<TensorType::kF16>(n, q, ldq, nq, rows, nk, s, lds);
    case TensorType::kQ8_0:
      return ScoresT<TensorType::kQ8_0>(n, q, ldq, nq, rows, nk, s, lds);
    default:
      return ScoresT<TensorType::kF32>(n, q, ldq, nq, rows, nk, s, lds);
  }
}

// Float vectors of W lanes, for the kernels written once for both widths.
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
  template <TensorType T>
  static V Row(const void* r, int64_t i) { return Rows<T>::Load8(r, i); }
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
  template <TensorType T>
  static V Row(const void* r, int64_t i) { return Rows<T>::Load16(r, i); }
};
#endif

// OR output rows x W*NV columns starting at column c, over all nv value rows, in vectors of W
// lanes: the same operations per element for either width.
template <TensorType T, int OR, int NV, int W>
inline void AccTile(int64_t c, const float* p, int64_t ldp, const void* const* rows, int64_t nv,
                    float* o, int64_t ldo) {
  using R = Rows<T>;
  using L = Lanes<W>;
  typename L::V acc[OR][NV];
#pragma GCC unroll 4
  for (int r = 0; r < OR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = L::Load(o + r * ldo + c + W * v);
  for (int64_t j = 0; j < nv; ++j) {
    typename L::V x[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      x[v] = L::template Row<T>(rows[j], c + W * v);
      if constexpr (R::kScaled) x[v] = L::Mul(x[v], L::Set1(R::ScaleOf(rows[j], c + W * v)));
    }
#pragma GCC unroll 4
    for (int r = 0; r < OR; ++r) {
      const typename L::V w = L::Set1(p[r * ldp + j]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = L::Fma(w, x[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < OR; ++r)
    for (int v = 0; v < NV; ++v) L::Store(o + r * ldo + c + W * v, acc[r][v]);
}

template <TensorType T, int NV, int W>
inline void AccColumns(int64_t c, const float* p, int64_t ldp, int64_t no, const void* const* rows,
                       int64_t nv, float* o, int64_t ldo) {
  InRowTiles(no, [&](auto orows, int64_t r) {
    AccTile<T, decltype(orows)::value, NV, W>(c, p + r * ldp, ldp, rows, nv, o + r * ldo, ldo);
  });
}

template <TensorType T>
void AccumulateT(int64_t n, const float* p, int64_t ldp, int64_t no, const void* const* rows,
                 int64_t nv, float* o, int64_t ldo) {
  int64_t c = 0;
#ifdef __AVX512F__
  for (; c + 32 <= n; c += 32) AccColumns<T, 2, 16>(c, p, ldp, no, rows, nv, o, ldo);
  for (; c + 16 <= n; c += 16) AccColumns<T, 1, 16>(c, p, ldp, no, rows, nv, o, ldo);
#endif
  for (; c + 16 <= n; c += 16) AccColumns<T, 2, 8>(c, p, ldp, no, rows, nv, o, ldo);
  if (c + 8 <= n) {
    AccColumns<T, 1, 8>(c, p, ldp, no, rows, nv, o, ldo);
    c += 8;
  }
  for (; c < n; ++c) {  // F32 / F16 rows whose length is not a multiple of 8
    for (int64_t r = 0; r < no; ++r) {
      float v = o[r * ldo + c];
      for (int64_t j = 0; j < nv; ++j) v += p[r * ldp + j] * Rows<T>::At(rows[j], c);
      o[r * ldo + c] = v;
    }
  }
}

void AttnAccumulate(TensorType type, int64_t n, const float* p, int64_t ldp, int64_t no,
                    const void* const* rows, int64_t nv, float* o, int64_t ldo) {
  switch (type) {
    case TensorType::kF16:
      return AccumulateT<TensorType::kF16>(n, p, ldp, no, rows, nv, o, ldo);
    case TensorType::kQ8_0:
      return AccumulateT<TensorType::kQ8_0>(n, p, ldp, no, rows, nv, o, ldo);
    default:
      return AccumulateT<TensorType::kF32>(n, p, ldp, no, rows, nv, o, ldo);
  }
}

void Fp32ToFp16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = F2H(x[i]);
}

void Fp16ToFp32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(Load128(x + i)));
  for (; i < n; ++i) y[i] = H2F(x[i]);
}

float ExpSum(const float* x, float m, float* y, int64_t n) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(y + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float s = Hsum(sum);
  for (; i < n; ++i) {
    y[i] = std::exp(x[i] - m);
    s += y[i];
  }
  return s;
}

// Fills the AttnOps (the caller has filled the rest of the table).
inline void FillAttention(KernelTable* t) {
  t->attn = AttnOps{Fp32ToFp16, Fp16ToFp32, ExpSum, AttnScores, AttnAccumulate};
}

#pragma GCC diagnostic pop

}  // namespace
}  // namespace tandem::kernels::x86
