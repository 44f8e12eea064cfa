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
// head dimension of today's models): scores as one fused multiply-add chain per score over the
// elements in order, with the query rows in the lanes (RowScores) or, for calls of few rows,
// the keys (KeyScores), the same bits either way; the accumulation by 4 rows x 32 columns
// (AccTile in 16 lanes, the same bits as in 8).
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
  static const void* Addr(const void* r, int64_t i) { return static_cast<const float*>(r) + i; }
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
  static const void* Addr(const void* r, int64_t i) { return static_cast<const uint16_t*>(r) + i; }
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
  static const void* Addr(const void* r, int64_t i) { return static_cast<const BlockQ8_0*>(r) + i / quant::kQK; }
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
// ---- 512-bit scores (the AVX-512 build), for rows whose length is a multiple of 16 ----
//
// The query rows go in the lanes: score (r, j) is one fused multiply-add chain over the
// elements in order, acc = fma(q_r[e], k_j[e], acc) from zero, in lane r of a vector. So a score
// has the same bits in any lane of any tile, alone or in a group, and no horizontal sums are
// needed (a tile of 4 query rows x 4 keys with lane-wise partial sums spent about as many
// operations on its reduction as on its products at head dimension 64). The queries are
// transposed once per call (16 x 16 blocks in registers), each key row converted to floats
// once per call.

inline constexpr int64_t kRowScoreMaxN = 256;  // longest rows of this path (head dimension)
inline constexpr int kRowScoreRows = 64;       // query rows transposed at once
inline constexpr int kRowScoreKeys = 8;        // keys per tile: 8 accumulator chains per row vector
inline constexpr int64_t kKeyLaneRowsBelow = 16;  // calls of fewer query rows put the keys in the lanes

// w[e], 128-bit lane L: lane 4L + e of a[0], a[1], a[2], a[3] (the first two steps of a transpose).
inline void Gather4(const __m512 a[4], __m512 w[4]) {
  auto lo64 = [](__m512 x, __m512 y) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
  };
  auto hi64 = [](__m512 x, __m512 y) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
  };
  const __m512 t0 = _mm512_unpacklo_ps(a[0], a[1]), t1 = _mm512_unpackhi_ps(a[0], a[1]);
  const __m512 t2 = _mm512_unpacklo_ps(a[2], a[3]), t3 = _mm512_unpackhi_ps(a[2], a[3]);
  w[0] = lo64(t0, t2);
  w[1] = hi64(t0, t2);
  w[2] = lo64(t1, t3);
  w[3] = hi64(t1, t3);
}

// out[i] lane l = in[l] lane i (a 16 x 16 transpose).
inline void Transpose16(__m512 r[16]) {
  __m512 u[16];  // u[4k + e], 128-bit lane L: element 4L + e of rows 4k..4k+3
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) Gather4(r + 4 * k, u + 4 * k);
#pragma GCC unroll 4
  for (int e = 0; e < 4; ++e) {  // 128-bit lane k of out[4L + e] = lane L of u[4k + e]
    const __m512 p0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), p1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
    const __m512 p2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 p3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
    r[e] = _mm512_shuffle_f32x4(p0, p2, 0x88);
    r[8 + e] = _mm512_shuffle_f32x4(p0, p2, 0xDD);
    r[4 + e] = _mm512_shuffle_f32x4(p1, p3, 0x88);
    r[12 + e] = _mm512_shuffle_f32x4(p1, p3, 0xDD);
  }
}

// qt[e * 16 + l] = element e of query row min(l, nr - 1), e < n: rows past nr repeat the last
// (their lanes are computed and not stored).
inline void TransposeQueries(const float* q, int64_t ldq, int nr, int64_t n, float* qt) {
  for (int64_t e0 = 0; e0 < n; e0 += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) r[l] = _mm512_loadu_ps(q + std::min(l, nr - 1) * ldq + e0);
    Transpose16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) _mm512_store_ps(qt + (e0 + i) * 16, r[i]);
  }
}

// Requests key rows [j, j + count) (those of the next tile) into L1 while a tile works: a call's
// key rows were last read a forward ago (the weights streamed since pushed them out).
inline void PrefetchKeys(const void* const* rows, int64_t nk, int64_t j, int count, int64_t row_bytes) {
  for (int64_t k = j; k < std::min(nk, j + count); ++k) {
    const char* r = static_cast<const char*>(rows[k]);
    for (int64_t o = 0; o < row_bytes; o += 64) _mm_prefetch(r + o, _MM_HINT_T0);
  }
}

// Stores acc[j] (lane l: row l, key j) to s[l * lds + j] for l < nr, j < nj.
inline void StoreRowScores(const __m512 acc[kRowScoreKeys], int nr, int nj, float* s, int64_t lds) {
  __m512 w[2][4];  // w[h][e], 128-bit lane L: keys 4h..4h+3 of row 4L + e
  Gather4(acc, w[0]);
  Gather4(acc + 4, w[1]);
  if (nr == 16 && nj == kRowScoreKeys) {
    // The lane index is an immediate: a template parameter, not an unrolled loop's counter (an
    // unoptimised or -O1 build does not unroll).
    const auto store_lane = [&]<int L>() {
      for (int e = 0; e < 4; ++e) {
        float* row = s + (4 * L + e) * lds;
        _mm_storeu_ps(row, _mm512_extractf32x4_ps(w[0][e], L));
        _mm_storeu_ps(row + 4, _mm512_extractf32x4_ps(w[1][e], L));
      }
    };
    store_lane.template operator()<0>();
    store_lane.template operator()<1>();
    store_lane.template operator()<2>();
    store_lane.template operator()<3>();
    return;
  }
  alignas(64) float tile[2][4][16];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int e = 0; e < 4; ++e) _mm512_store_ps(tile[h][e], w[h][e]);
  }
  for (int l = 0; l < nr; ++l) {
    for (int j = 0; j < nj; ++j) s[l * lds + j] = tile[j / 4][l % 4][4 * (l / 4) + j % 4];
  }
}

// Scores of RT x 16 query rows (qt: RT blocks of n x 16, the rows' transposes) against the
// kRowScoreKeys keys in kb (kb[j * n + e]), stored for the nr rows and nj keys that are real.
template <int RT>
inline void RowScoreTile(int64_t n, const float* qt, const float* kb, int nr, int nj, float* s, int64_t lds) {
  __m512 acc[RT][kRowScoreKeys];
#pragma GCC unroll 2
  for (int t = 0; t < RT; ++t) {
#pragma GCC unroll 8
    for (int j = 0; j < kRowScoreKeys; ++j) acc[t][j] = _mm512_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t e = 0; e < n; ++e) {
    __m512 qv[RT];
#pragma GCC unroll 2
    for (int t = 0; t < RT; ++t) qv[t] = _mm512_load_ps(qt + (t * n + e) * 16);
#pragma GCC unroll 8
    for (int j = 0; j < kRowScoreKeys; ++j) {
      const __m512 kv = _mm512_set1_ps(kb[j * n + e]);
#pragma GCC unroll 2
      for (int t = 0; t < RT; ++t) acc[t][j] = _mm512_fmadd_ps(qv[t], kv, acc[t][j]);
    }
  }
#pragma GCC unroll 2
  for (int t = 0; t < RT; ++t) StoreRowScores(acc[t], std::min(16, nr - 16 * t), nj, s + 16 * t * lds, lds);
}

template <TensorType T>
void RowScores(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows, int64_t nk, float* s,
               int64_t lds) {
  using R = Rows<T>;
  alignas(64) float qt[kRowScoreRows * kRowScoreMaxN];
  alignas(64) float kb[kRowScoreKeys * kRowScoreMaxN];
  const int64_t row_bytes = static_cast<int64_t>(quant::RowBytes(T, n));
  for (int64_t r0 = 0; r0 < nq; r0 += kRowScoreRows) {
    const int nrs = static_cast<int>(std::min<int64_t>(kRowScoreRows, nq - r0));
    const int nv = (nrs + 15) / 16;
    for (int v = 0; v < nv; ++v) {
      TransposeQueries(q + (r0 + 16 * v) * ldq, ldq, std::min(16, nrs - 16 * v), n, qt + v * 16 * n);
    }
    for (int64_t j0 = 0; j0 < nk; j0 += kRowScoreKeys) {
      const int nj = static_cast<int>(std::min<int64_t>(kRowScoreKeys, nk - j0));
      PrefetchKeys(rows, nk, j0 + kRowScoreKeys, kRowScoreKeys, row_bytes);
      for (int j = 0; j < kRowScoreKeys; ++j) {  // a partial tile repeats its last key
        const void* row = rows[j0 + std::min(j, nj - 1)];
        for (int64_t e = 0; e < n; e += 16) {
          __m512 kv = R::Load16(row, e);
          if constexpr (R::kScaled) kv = _mm512_mul_ps(kv, _mm512_set1_ps(R::ScaleOf(row, e)));
          _mm512_store_ps(kb + j * n + e, kv);
        }
      }
      float* st = s + r0 * lds + j0;
      int v = 0;
      for (; v + 2 <= nv; v += 2) RowScoreTile<2>(n, qt + v * 16 * n, kb, nrs - 16 * v, nj, st + 16 * v * lds, lds);
      if (v < nv) RowScoreTile<1>(n, qt + v * 16 * n, kb, nrs - 16 * v, nj, st + 16 * v * lds, lds);
    }
  }
}

// The same chains with the keys in the lanes, for calls of few query rows (a decode step's
// group of query heads): 16 keys converted and transposed at a time, then per query row one
// accumulator of 16 keys against its elements broadcast. The bits are those of RowScores.
template <int NR>
inline void KeyScoreTile(int64_t n, const float* q, int64_t ldq, const float* kt, int nj, float* s, int64_t lds) {
  __m512 acc[NR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t e = 0; e < n; ++e) {
    const __m512 kv = _mm512_load_ps(kt + e * 16);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + e]), kv, acc[r]);
  }
  const __mmask16 m = static_cast<__mmask16>((1u << nj) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(s + r * lds, m, acc[r]);
}

template <TensorType T>
void KeyScores(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows, int64_t nk, float* s,
               int64_t lds) {
  using R = Rows<T>;
  alignas(64) float kt[kRowScoreMaxN * 16];
  const int64_t row_bytes = static_cast<int64_t>(quant::RowBytes(T, n));
  for (int64_t j0 = 0; j0 < nk; j0 += 16) {
    const int nj = static_cast<int>(std::min<int64_t>(16, nk - j0));
    PrefetchKeys(rows, nk, j0 + 16, 16, row_bytes);
    for (int64_t e0 = 0; e0 < n; e0 += 16) {  // kt[e * 16 + j] = element e of key j0 + j
      __m512 r[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) {  // a partial tile repeats its last key
        const void* row = rows[j0 + std::min(l, nj - 1)];
        r[l] = R::Load16(row, e0);
        if constexpr (R::kScaled) r[l] = _mm512_mul_ps(r[l], _mm512_set1_ps(R::ScaleOf(row, e0)));
      }
      Transpose16(r);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_store_ps(kt + (e0 + i) * 16, r[i]);
    }
    for (int64_t r0 = 0; r0 < nq; r0 += 8) {
      WithRows<8>(static_cast<int>(std::min<int64_t>(8, nq - r0)), [&](auto nr) {
        KeyScoreTile<decltype(nr)::value>(n, q + r0 * ldq, ldq, kt, nj, s + r0 * lds + j0, lds);
      });
    }
  }
}

// Either layout: the same bits, so the choice may follow the number of rows.
template <TensorType T>
void Scores16(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows, int64_t nk, float* s,
              int64_t lds) {
  if (nq < kKeyLaneRowsBelow) return KeyScores<T>(n, q, ldq, nq, rows, nk, s, lds);
  RowScores<T>(n, q, ldq, nq, rows, nk, s, lds);
}

#endif  // __AVX512F__

template <TensorType T>
void ScoresT(int64_t n, const float* q, int64_t ldq, int64_t nq, const void* const* rows,
             int64_t nk, float* s, int64_t lds) {
#ifdef __AVX512F__
  if (n % 16 == 0 && n <= kRowScoreMaxN) return Scores16<T>(n, q, ldq, nq, rows, nk, s, lds);
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

// W values of a row from element i as floats (Lanes<W>, x86_common.h).
template <TensorType T, int W>
inline typename Lanes<W>::V RowLoad(const void* r, int64_t i) {
  if constexpr (W == 8) {
    return Rows<T>::Load8(r, i);
  } else {
    return Rows<T>::Load16(r, i);
  }
}

inline constexpr int64_t kAccAhead = 32;  // value rows prefetched ahead

// OR output rows x W*NV columns starting at column c, over all nv value rows, in vectors of W
// lanes: the same operations per element for either width.
template <TensorType T, int OR, int NV, int W>
inline void AccTile(int64_t c, const float* p, int64_t ldp, const void* const* rows, int64_t nv,
                    float* o, int64_t ldo) {
  using R = Rows<T>;
  using L = Lanes<W>;
  typename L::V acc[OR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < OR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = L::Load(o + r * ldo + c + W * v);
  for (int64_t j = 0; j < nv; ++j) {
    // The value rows come from memory in the first tile over them (a layer's cache rows were
    // last read a forward ago): request the one kAccAhead rows on while this one works.
    if (j + kAccAhead < nv) _mm_prefetch(static_cast<const char*>(R::Addr(rows[j + kAccAhead], c)), _MM_HINT_T0);
    typename L::V x[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      x[v] = RowLoad<T, W>(rows[j], c + W * v);
      if constexpr (R::kScaled) x[v] = L::Mul(x[v], L::Set1(R::ScaleOf(rows[j], c + W * v)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < OR; ++r) {
      const typename L::V w = L::Set1(p[r * ldp + j]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = L::Fma(w, x[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < OR; ++r)
    for (int v = 0; v < NV; ++v) L::Store(o + r * ldo + c + W * v, acc[r][v]);
}

// Tiles of 8 rows where NV == 2 in 16 lanes (16 accumulators: each value vector converted once
// for 8 rows), then of 4 and the rest.
template <TensorType T, int NV, int W>
inline void AccColumns(int64_t c, const float* p, int64_t ldp, int64_t no, const void* const* rows,
                       int64_t nv, float* o, int64_t ldo) {
  if constexpr (W == 16 && NV == 2) {
    for (; no >= 8; no -= 8, p += 8 * ldp, o += 8 * ldo) AccTile<T, 8, NV, W>(c, p, ldp, rows, nv, o, ldo);
  }
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

// The AVX-512 build takes 16 values a step (Exp16: the same operations per lane as Exp).
float ExpSum(const float* x, float m, float* y, int64_t n) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512 vm16 = _mm512_set1_ps(m);
  __m512 sum16 = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm16));
    _mm512_storeu_ps(y + i, e);
    sum16 = _mm512_add_ps(sum16, e);
  }
  sum = _mm256_add_ps(_mm512_castps512_ps256(sum16), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum16), 1)));
#endif
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
