#include "kernels/interleave.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::kernels {

using quant::BlockQ4_0;
using quant::BlockQ5_0;
using quant::BlockQ8_0;
using quant::TensorType;

bool HasInterleavedLayout(TensorType t) {
  return t == TensorType::kQ4_0 || t == TensorType::kQ5_0 || t == TensorType::kQ8_0 || t == TensorType::kQ4_K ||
         t == TensorType::kQ6_K;
}

namespace {
bool KQuant(TensorType t) { return t == TensorType::kQ4_K || t == TensorType::kQ6_K; }
}  // namespace

TensorType InterleavedActType(TensorType t) { return KQuant(t) ? TensorType::kQ8_K : TensorType::kQ8_0; }

size_t InterleavedActRowBytes(TensorType t, int64_t cols) {
  return KQuant(t) ? quant::RowBytes(TensorType::kQ8_K, cols) + 8 * sizeof(int16_t) * static_cast<size_t>(cols / quant::kQKK)
                   : sizeof(BlockQ8S) * static_cast<size_t>(cols / quant::kQK);
}

void FinishActRow(TensorType t, void* row, int64_t cols) {
  if (!KQuant(t)) return;
  const int64_t nb = cols / quant::kQKK;
  const auto* y = static_cast<const quant::BlockQ8_K*>(row);
  int16_t sums[8];
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < 8; ++j) sums[j] = static_cast<int16_t>(y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    std::memcpy(static_cast<uint8_t*>(row) + nb * sizeof(quant::BlockQ8_K) + i * sizeof(sums), sums, sizeof(sums));
  }
}

size_t InterleavedBlockBytes(TensorType t) {
  switch (t) {
    case TensorType::kQ4_0: return kInterleaveRows * sizeof(BlockQ4_0);
    case TensorType::kQ5_0: return kInterleaveRows * sizeof(BlockQ5_0);
    case TensorType::kQ4_K: return kInterleaveRows * sizeof(quant::BlockQ4_K);
    case TensorType::kQ6_K: return kInterleaveRows * sizeof(quant::BlockQ6_K);
    default: return kInterleaveRows * sizeof(BlockQ8_0);
  }
}

namespace {

// The chunks of 64 quant bytes a block of the type has (the masks and scales follow them).
int Chunks(TensorType t) { return t == TensorType::kQ8_0 ? 8 : 4; }

// The loops of a K-quant's interleaving: for each 16-row group's super-block i, its interleaved
// bytes `out` (zeroed) are filled row by row: fill(out, r, row r's super-block i).
template <typename Block, typename Fill>
void InterleaveK(TensorType t, const uint8_t* s, uint8_t* d, int64_t rows, int64_t cols, Fill&& fill) {
  const int64_t nb = cols / quant::kQKK;
  const size_t row_bytes = quant::RowBytes(t, cols), block_bytes = InterleavedBlockBytes(t);
  for (int64_t g = 0; g < rows / kInterleaveRows; ++g) {
    uint8_t* group = d + static_cast<size_t>(g) * kInterleaveRows * row_bytes;
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* out = group + static_cast<size_t>(i) * block_bytes;
      std::memset(out, 0, block_bytes);
      for (int r = 0; r < kInterleaveRows; ++r) {
        fill(out, r, reinterpret_cast<const Block*>(s + (g * kInterleaveRows + r) * row_bytes)[i]);
      }
    }
  }
}

// The loops of a K-quant's reference gemm against Q8_K rows: out[ar * ldo + r] is the float that
// add(acc, super-block's interleaved bytes, the activation's block, r) leaves after the last
// super-block, from acc = 0.
template <typename Add>
void GemmKReference(TensorType t, int64_t n, const uint8_t* w, const uint8_t* a, size_t a_stride, int na,
                    float* out, int64_t ldo, Add&& add) {
  for (int ar = 0; ar < na; ++ar) {
    const auto* y = reinterpret_cast<const quant::BlockQ8_K*>(a + ar * a_stride);
    for (int r = 0; r < kInterleaveRows; ++r) {
      float acc = 0;
      for (int64_t i = 0; i < n / quant::kQKK; ++i) {
        acc = add(acc, w + static_cast<size_t>(i) * InterleavedBlockBytes(t), y[i], r);
      }
      out[ar * ldo + r] = acc;
    }
  }
}

// Offsets in an interleaved Q4_K super-block (interleave.h).
constexpr size_t kK4ScLow = 2048, kK4MnLow = 2112, kK4High = 2176, kK4D = 2240, kK4Dmin = 2272;

void InterleaveQ4K(const uint8_t* s, uint8_t* d, int64_t rows, int64_t cols) {
  InterleaveK<quant::BlockQ4_K>(TensorType::kQ4_K, s, d, rows, cols, [](uint8_t* out, int r, const quant::BlockQ4_K& b) {
    for (int p = 0; p < 4; ++p) {
      for (int c = 0; c < 8; ++c) std::memcpy(out + 512 * p + 64 * c + 4 * r, b.qs + 32 * p + 4 * c, 4);
    }
    int sc[8], mn[8];
    quant::UnpackScalesMinsK4(b.scales, sc, mn);
    for (int q = 0; q < 4; ++q) {
      out[kK4ScLow + 16 * q + r] = static_cast<uint8_t>((sc[q] & 15) | (sc[q + 4] & 15) << 4);
      out[kK4MnLow + 16 * q + r] = static_cast<uint8_t>((mn[q] & 15) | (mn[q + 4] & 15) << 4);
      out[kK4High + 16 * q + r] =
          static_cast<uint8_t>(sc[q] >> 4 | (sc[q + 4] >> 4) << 2 | (mn[q] >> 4) << 4 | (mn[q + 4] >> 4) << 6);
    }
    std::memcpy(out + kK4D + 2 * r, &b.d, 2);
    std::memcpy(out + kK4Dmin + 2 * r, &b.dmin, 2);
  });
}

// Interleaved Q4_K against Q8_K activations, as interleave.h defines it.
void GemmQ4KReference(int64_t n, const uint8_t* w, const uint8_t* a, size_t a_stride, int na, float* out,
                      int64_t ldo) {
  GemmKReference(TensorType::kQ4_K, n, w, a, a_stride, na, out, ldo,
                 [](float acc, const uint8_t* blk, const quant::BlockQ8_K& y, int r) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      const int q = j % 4, shift = j < 4 ? 0 : 4;
      const uint8_t high = blk[kK4High + 16 * q + r];
      const int sc = ((blk[kK4ScLow + 16 * q + r] >> shift) & 15) | ((high >> (j < 4 ? 0 : 2)) & 3) << 4;
      const int mn = ((blk[kK4MnLow + 16 * q + r] >> shift) & 15) | ((high >> (j < 4 ? 4 : 6)) & 3) << 4;
      int32_t s = 0;
      for (int c = 0; c < 8; ++c) {
        for (int e = 0; e < 4; ++e) {
          const uint8_t v = blk[512 * (j / 2) + 64 * c + 4 * r + e];
          s += ((j % 2 == 0) ? (v & 15) : (v >> 4)) * y.qs[32 * j + 4 * c + e];
        }
      }
      isum += sc * s;
      msum += mn * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    }
    uint16_t dh, mh;
    std::memcpy(&dh, blk + kK4D + 2 * r, 2);
    std::memcpy(&mh, blk + kK4Dmin + 2 * r, 2);
    acc = std::fma(static_cast<float>(isum), quant::Fp16ToFp32(dh) * y.d, acc);
    return std::fma(-static_cast<float>(msum), quant::Fp16ToFp32(mh) * y.d, acc);
  });
}

// Offsets in an interleaved Q6_K super-block (interleave.h).
constexpr size_t kK6High = 2048, kK6Sc = 3072, kK6D = 3328;

// Element of pair p, chunk c, lane byte k: low nibble (hi = false) or high nibble.
int K6Element(int p, int c, int k, bool hi) { return 64 * p + (hi ? 32 : 0) + 4 * c + k; }

void InterleaveQ6K(const uint8_t* s, uint8_t* d, int64_t rows, int64_t cols) {
  InterleaveK<quant::BlockQ6_K>(TensorType::kQ6_K, s, d, rows, cols, [](uint8_t* out, int r, const quant::BlockQ6_K& b) {
    for (int p = 0; p < 4; ++p) {
      for (int c = 0; c < 8; ++c) {
        for (int k = 0; k < 4; ++k) {
          const int lo = quant::StoredQ6K(b.ql, b.qh, K6Element(p, c, k, false)),
                    hi = quant::StoredQ6K(b.ql, b.qh, K6Element(p, c, k, true));
          out[512 * p + 64 * c + 4 * r + k] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
          const int shift = c < 4 ? 0 : 2;  // bits 0-1 / 4-5 for c < 4, 2-3 / 6-7 for c >= 4
          out[kK6High + 256 * p + 64 * (c % 4) + 4 * r + k] |=
              static_cast<uint8_t>((lo >> 4) << shift | (hi >> 4) << (shift + 4));
        }
      }
    }
    for (int j = 0; j < 16; ++j) out[kK6Sc + 16 * j + r] = static_cast<uint8_t>(b.scales[j]);
    std::memcpy(out + kK6D + 2 * r, &b.d, 2);
  });
}

// Interleaved Q6_K against Q8_K activations, as interleave.h defines it.
void GemmQ6KReference(int64_t n, const uint8_t* w, const uint8_t* a, size_t a_stride, int na, float* out,
                      int64_t ldo) {
  GemmKReference(TensorType::kQ6_K, n, w, a, a_stride, na, out, ldo,
                 [](float acc, const uint8_t* blk, const quant::BlockQ8_K& y, int r) {
    int32_t s[16] = {};
    for (int p = 0; p < 4; ++p) {
      for (int c = 0; c < 8; ++c) {
        for (int k = 0; k < 4; ++k) {
          const uint8_t v = blk[512 * p + 64 * c + 4 * r + k];
          const uint8_t h = blk[kK6High + 256 * p + 64 * (c % 4) + 4 * r + k];
          const int shift = c < 4 ? 0 : 2;
          const int lo = (v & 15) | ((h >> shift) & 3) << 4, hi = (v >> 4) | ((h >> (shift + 4)) & 3) << 4;
          const int e0 = K6Element(p, c, k, false), e1 = K6Element(p, c, k, true);
          s[e0 / 16] += lo * y.qs[e0];
          s[e1 / 16] += hi * y.qs[e1];
        }
      }
    }
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) isum += static_cast<int8_t>(blk[kK6Sc + 16 * j + r]) * (s[j] - 32 * y.bsums[j]);
    uint16_t dh;
    std::memcpy(&dh, blk + kK6D + 2 * r, 2);
    return std::fma(static_cast<float>(isum), quant::Fp16ToFp32(dh) * y.d, acc);
  });
}

}  // namespace

void Interleave(TensorType t, const void* src, void* dst, int64_t rows, int64_t cols) {
  if (t == TensorType::kQ4_K) {
    return InterleaveQ4K(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), rows, cols);
  }
  if (t == TensorType::kQ6_K) {
    return InterleaveQ6K(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), rows, cols);
  }
  const int64_t nb = cols / quant::kQK;
  const size_t row_bytes = quant::RowBytes(t, cols), block_bytes = InterleavedBlockBytes(t);
  const int chunks = Chunks(t);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kInterleaveRows; ++g) {
    uint8_t* group = d + static_cast<size_t>(g) * kInterleaveRows * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = group + static_cast<size_t>(b) * block_bytes;
      uint64_t masks[8] = {};  // Q5_0's fifth bits
      uint8_t* after = out + chunks * 64 + (t == TensorType::kQ5_0 ? sizeof masks : 0);
      auto* scales = reinterpret_cast<uint16_t*>(after);
      for (int r = 0; r < kInterleaveRows; ++r) {
        const uint8_t* row = s + static_cast<size_t>(g * kInterleaveRows + r) * row_bytes;
        uint16_t scale;
        const uint8_t* qs;
        if (t == TensorType::kQ4_0) {
          const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
          scale = blk.d;
          qs = blk.qs;
        } else if (t == TensorType::kQ5_0) {
          const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
          scale = blk.d;
          qs = blk.qs;
          uint32_t qh;
          std::memcpy(&qh, blk.qh, 4);
          for (int e = 0; e < quant::kQK; ++e) {
            if ((qh >> e) & 1) masks[e / 4] |= uint64_t{1} << (4 * r + e % 4);
          }
        } else {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          scale = blk.d;
          qs = reinterpret_cast<const uint8_t*>(blk.qs);
        }
        std::memcpy(&scales[r], &scale, 2);
        for (int c = 0; c < chunks; ++c) {
          for (int j = 0; j < 4; ++j) {
            const uint8_t v = qs[4 * c + j];
            out[64 * c + 4 * r + j] = t == TensorType::kQ8_0 ? static_cast<uint8_t>(v ^ 0x80) : v;  // q + 128
          }
        }
      }
      if (t == TensorType::kQ5_0) std::memcpy(out + chunks * 64, masks, sizeof masks);
    }
  }
}

void QuantizeQ8SReference(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8S*>(dst);
  for (int64_t i = 0; i < n / quant::kQK; ++i) {
    const float* x = src + i * quant::kQK;
    float amax = 0;
    for (int j = 0; j < quant::kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = quant::Fp16ToFp32(quant::Fp32ToFp16(amax / 127));
    const float id = d != 0 ? 1 / d : 0;
    int32_t sum = 0;
    for (int j = 0; j < quant::kQK; ++j) {
      const long v = std::lrint(x[j] * id);
      b[i].qs[j] = static_cast<int8_t>(std::clamp<long>(v, -127, 127));
      sum += b[i].qs[j];
    }
    b[i].d = d;
    b[i].sum = sum;
  }
}

void GemmInterleavedReference(TensorType t, int64_t n, const void* w, const void* a, size_t a_stride, int na,
                              float* out, int64_t ldo) {
  if (t == TensorType::kQ4_K) {
    return GemmQ4KReference(n, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a), a_stride, na, out, ldo);
  }
  if (t == TensorType::kQ6_K) {
    return GemmQ6KReference(n, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a), a_stride, na, out, ldo);
  }
  const bool nibbles = t != TensorType::kQ8_0, five = t == TensorType::kQ5_0;
  const int chunks = Chunks(t);
  const int32_t bias = t == TensorType::kQ4_0 ? 8 : five ? 16 : 128;
  const size_t block_bytes = InterleavedBlockBytes(t);
  for (int r = 0; r < na; ++r) {
    const auto* y = reinterpret_cast<const BlockQ8S*>(static_cast<const uint8_t*>(a) + r * a_stride);
    for (int row = 0; row < kInterleaveRows; ++row) {
      float acc = 0;
      for (int64_t b = 0; b < n / quant::kQK; ++b) {
        const uint8_t* blk = static_cast<const uint8_t*>(w) + static_cast<size_t>(b) * block_bytes;
        uint64_t masks[8] = {};
        if (five) std::memcpy(masks, blk + 64 * chunks, sizeof masks);
        // The fifth bit of element e of this row, as 16 (Q5_0 only).
        auto high = [&](int e) { return static_cast<int32_t>((masks[e / 4] >> (4 * row + e % 4)) & 1) * 16; };
        int32_t s = 0;
        for (int c = 0; c < chunks; ++c) {
          for (int j = 0; j < 4; ++j) {
            const uint8_t v = blk[64 * c + 4 * row + j];
            if (nibbles) {
              const int e0 = 4 * c + j, e1 = 16 + 4 * c + j;
              s += ((v & 0x0F) + high(e0)) * y[b].qs[e0] + ((v >> 4) + high(e1)) * y[b].qs[e1];
            } else {
              s += v * y[b].qs[4 * c + j];
            }
          }
        }
        uint16_t h;
        std::memcpy(&h, blk + 64 * chunks + (five ? sizeof masks : 0) + 2 * row, 2);
        acc += static_cast<float>(s - bias * y[b].sum) * (quant::Fp16ToFp32(h) * y[b].d);
      }
      out[r * ldo + row] = acc;
    }
  }
}

}  // namespace tandem::kernels
