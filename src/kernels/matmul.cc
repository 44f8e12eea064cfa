#include "kernels/matmul.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/interleave.h"

namespace tandem::kernels {
namespace {

// Quantizes n_tokens rows of x into scratch in the activation format; returns the row stride.
size_t QuantizeActivations(const KernelTable& k, TensorType wtype, int64_t cols, const float* x,
                           int64_t n_tokens, Scratch& scratch) {
  const TensorType act = k.of(wtype).act_type;
  const size_t stride = quant::RowBytes(act, cols);
  const size_t need = stride * static_cast<size_t>(n_tokens);
  if (scratch.act.size() < need) scratch.act.resize(need);
  const quant::QuantizeRowFn q = k.quantize_act[static_cast<uint32_t>(act)];
  for (int64_t t = 0; t < n_tokens; ++t) q(x + t * cols, scratch.act.data() + t * stride, cols);
  return stride;
}

// Rows per work unit: a multiple of 4 keeps neighbouring threads off each other's cache lines.
constexpr int64_t kRowGranule = 16;

}  // namespace

void MatVec(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
            int64_t cols, const float* x, float* y, Scratch& scratch) {
  QuantizeActivations(k, wtype, cols, x, 1, scratch);
  const quant::VecDotFn dot = k.of(wtype).vec_dot;
  const size_t row_bytes = quant::RowBytes(wtype, cols);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* a = scratch.act.data();
  pool.ParallelFor(rows, kRowGranule, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = dot(cols, wb + i * row_bytes, a);
  });
}

void MatMul(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
            int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
            Scratch& scratch) {
  if (n_tokens == 1) {
    MatVec(k, pool, wtype, w, rows, cols, x, y, scratch);
    return;
  }
  const size_t a_stride = QuantizeActivations(k, wtype, cols, x, n_tokens, scratch);
  const VecDotMultiFn multi = k.of(wtype).vec_dot_multi;
  const size_t row_bytes = quant::RowBytes(wtype, cols);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* a = scratch.act.data();
  if (n_tokens <= kMaxMultiRows) {
    pool.ParallelFor(rows, kRowGranule, [&](int64_t begin, int64_t end) {
      float out[kMaxMultiRows];
      for (int64_t i = begin; i < end; ++i) {
        multi(cols, wb + i * row_bytes, a, a_stride, static_cast<int>(n_tokens), out);
        for (int64_t j = 0; j < n_tokens; ++j) y[j * y_stride + i] = out[j];
      }
    });
    return;
  }
  // Tiles: a band of weight rows per thread; inside it, blocks of rows x token groups so that a
  // weight row stays in L1/L2 while every token group passes over it.
  constexpr int64_t kRowTile = 16;
  pool.Run([&](int t, int n) {
    const Range r = SplitRange(rows, t, n, kRowGranule);
    float out[kMaxMultiRows];
    for (int64_t r0 = r.begin; r0 < r.end; r0 += kRowTile) {
      const int64_t r1 = std::min(r.end, r0 + kRowTile);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxMultiRows) {
        const int na = static_cast<int>(std::min<int64_t>(kMaxMultiRows, n_tokens - t0));
        for (int64_t i = r0; i < r1; ++i) {
          multi(cols, wb + i * row_bytes, a + t0 * a_stride, a_stride, na, out);
          for (int j = 0; j < na; ++j) y[(t0 + j) * y_stride + i] = out[j];
        }
      }
    }
  });
}

quant::QuantizeRowFn InterleavedActQuantizer(const KernelTable& k, TensorType wtype) {
  return InterleavedActType(wtype) == TensorType::kQ8_K ? k.quantize_act[static_cast<uint32_t>(TensorType::kQ8_K)]
                                                        : k.quantize_q8s;
}

namespace {

// Quantizes n_tokens rows of x as wtype's interleaved kernels take them into scratch.act (rows
// InterleavedActRowBytes apart), over the pool's threads when there is enough of them for it to
// pay; returns the row stride.
size_t QuantizeInterleavedActs(const KernelTable& k, ThreadPool& pool, TensorType wtype, int64_t cols, const float* x,
                               int64_t n_tokens, Scratch& scratch) {
  const size_t a_stride = InterleavedActRowBytes(wtype, cols);
  const size_t need = a_stride * static_cast<size_t>(n_tokens);
  if (scratch.act.size() < need) scratch.act.resize(need);
  const quant::QuantizeRowFn quantize = InterleavedActQuantizer(k, wtype);
  uint8_t* a = scratch.act.data();
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      quantize(x + t * cols, a + t * a_stride, cols);
      FinishActRow(wtype, a + t * a_stride, cols);
    }
  };
  constexpr int64_t kParallelFloats = int64_t{1} << 15;  // a few microseconds of quantizing
  if (pool.size() > 1 && n_tokens > 1 && n_tokens * cols >= kParallelFloats) {
    pool.ParallelFor(n_tokens, 1, rows);
  } else {
    rows(0, n_tokens);
  }
  return a_stride;
}

// Groups [begin, end) of a job's rows (16 a group), a block of up to 8 groups and 512 KB at a time
// (half of the smallest L2 measured, Zen 5's 1 MB): every token group passes over the block while
// the block's weights stay in L2 and the token group's activations (16 rows, 36-100 KB) in L1 or
// L2; one group at a time, a prompt's activations (megabytes) came from the last-level cache once
// per group. The 16 outputs of a group go to a row of y directly, except in a small batch (below).
// Each call is still a group's whole row for its tokens, so the results are the same bits in any
// order.
constexpr int64_t kGroupBlock = 8;
constexpr size_t kGroupBlockBytes = size_t{512} << 10;

// A small batch (2 to kStagedTokens tokens, one kernel call per group, or two where the table takes
// fewer rows a call: speculative verification, a server's decode step) writes a block's outputs to
// a buffer on the stack, then each token's part of them to y in one copy. Written straight to y,
// each group's outputs were 64 bytes in each of n_tokens rows of y, rows whose lines the weights
// streaming through the cache had evicted: every group's stores waited on lines fetched for writing
// among its weight loads. On the Xeon VM (TinyLlama-shaped Q4_K_M, 2 threads, `bench --small-batch
// 8`, medians of 4 alternating rounds), an 8-token forward went from 1.52 to 1.46 times a 1-token
// step; its gate and up products from 13.7 to 13.0 ms a step, down 8.4 to 7.8, the head 2.7 to 2.5.
constexpr int64_t kStagedTokens = 16;
constexpr int64_t kGatedBlockMax = 16;  // groups in a block of MatMulInterleavedSiluMul(Acts)

// This thread's buffer for unpacked weights (UnpackedGemm), at least `bytes`, 64-byte aligned: it
// grows to the largest block of groups the thread unpacks (a prompt's) and is kept, so that later
// prompts allocate nothing.
uint8_t* UnpackBuffer(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  constexpr size_t kAlign = 64;
  if (buffer.size() < bytes + kAlign) buffer.resize(bytes + kAlign);
  const auto at = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((kAlign - at % kAlign) % kAlign);
}

// The kernel of a small batch's calls: the table's streaming one (kernels.h: gemm_streamed) where it
// has one for these rows.
GemmInterleavedFn StagedKernel(const KernelTable& k, TensorType wtype, int64_t n_tokens) {
  const GemmInterleavedFn streamed = k.gemm_streamed[static_cast<uint32_t>(wtype)];
  return streamed != nullptr && n_tokens <= kMaxMultiRows ? streamed : k.gemm_interleaved[static_cast<uint32_t>(wtype)];
}

// Group g's outputs for a small batch into a block's stage: stage[t * width + j] is token t's output
// j of the block that starts at group g0. One kernel call per `max_rows` tokens (the table's
// gemm_interleaved_rows), the later ones on the group while it is still in L1.
inline void StageGroup(GemmInterleavedFn gemm, int64_t max_rows, int64_t cols, const uint8_t* wb, size_t group_bytes,
                       const uint8_t* a, size_t a_stride, int64_t n_tokens, int64_t g, int64_t g0, int64_t width,
                       float* stage) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += max_rows) {
    const int rows = static_cast<int>(std::min(max_rows, n_tokens - t0));
    gemm(cols, wb + g * group_bytes, a + t0 * a_stride, a_stride, rows, stage + t0 * width + (g - g0) * kInterleaveRows,
         width);
  }
}

// GemmGroups for a small batch (SmallBatch): each block's outputs through a stack buffer (in a
// frame of its own, which decode's calls do not pay for). add: y += the products instead of y =.
__attribute__((noinline)) void GemmGroupsStaged(GemmInterleavedFn gemm, int64_t max_rows,
                                                int64_t cols, const uint8_t* wb, size_t group_bytes,
                                                const uint8_t* a, size_t a_stride, int64_t n_tokens,
                                                float* y, int64_t y_stride, int64_t begin,
                                                int64_t end, int64_t block, bool add) {
  alignas(64) float stage[kGroupBlock * kStagedTokens * kInterleaveRows];  // 8 KB
  for (int64_t g0 = begin; g0 < end; g0 += block) {
    const int64_t g1 = std::min(end, g0 + block), width = (g1 - g0) * kInterleaveRows;
    for (int64_t g = g0; g < g1; ++g) {
      StageGroup(gemm, max_rows, cols, wb, group_bytes, a, a_stride, n_tokens, g, g0, width, stage);
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      float* out = y + t * y_stride + g0 * kInterleaveRows;
      const float* st = stage + t * width;
      if (add) {
        for (int64_t j = 0; j < width; ++j) out[j] += st[j];
      } else {
        std::copy_n(st, width, out);
      }
    }
  }
}

// add: y += the products instead of y = (a small batch only: SmallBatch).
void GemmGroups(const KernelTable& k, TensorType wtype, const void* w, int64_t cols, const uint8_t* a,
                size_t a_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t begin, int64_t end,
                bool add = false) {
  const GemmInterleavedFn gemm = k.gemm_interleaved[static_cast<uint32_t>(wtype)];
  const int64_t max_rows = k.gemm_interleaved_rows;
  const size_t group_bytes = quant::RowBytes(wtype, cols) * kInterleaveRows;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t block =
      std::clamp<int64_t>(static_cast<int64_t>(kGroupBlockBytes / group_bytes), 1, kGroupBlock);
  if (SmallBatch(n_tokens)) {
    return GemmGroupsStaged(StagedKernel(k, wtype, std::min(n_tokens, max_rows)), max_rows, cols,
                            wb, group_bytes, a, a_stride, n_tokens, y, y_stride, begin, end, block,
                            add);
  }
  // Where the table unpacks ahead and more than one token group will pass over a block of groups
  // (a prompt), the block is unpacked once into this thread's buffer and the token groups of more
  // than kMaxMultiRows rows read that; the rest (a last group of a few) take the table's own
  // kernel. The same bits either way (UnpackedGemm).
  const UnpackedGemm& up = k.gemm_unpacked[static_cast<uint32_t>(wtype)];
  const bool unpack = up.gemm != nullptr && n_tokens > max_rows;
  const size_t unpacked_bytes = unpack ? static_cast<size_t>(up.bytes_per_block * (cols / quant::kQK)) : 0;
  uint8_t* unpacked = unpack ? UnpackBuffer(unpacked_bytes * static_cast<size_t>(block)) : nullptr;
  for (int64_t g0 = begin; g0 < end; g0 += block) {
    const int64_t g1 = std::min(end, g0 + block);
    if (unpack) {
      for (int64_t g = g0; g < g1; ++g) up.unpack(cols, wb + g * group_bytes, unpacked + (g - g0) * unpacked_bytes);
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += max_rows) {
      const int na = static_cast<int>(std::min<int64_t>(max_rows, n_tokens - t0));
      for (int64_t g = g0; g < g1; ++g) {
        float* out = y + t0 * y_stride + g * kInterleaveRows;
        if (unpack && na > kMaxMultiRows) {
          up.gemm(cols, unpacked + (g - g0) * unpacked_bytes, a + t0 * a_stride, a_stride, na, out, y_stride);
        } else {
          gemm(cols, wb + g * group_bytes, a + t0 * a_stride, a_stride, na, out, y_stride);
        }
      }
    }
  }
}

}  // namespace

bool SmallBatch(int64_t n_tokens) { return n_tokens > 1 && n_tokens <= kStagedTokens; }

void MatMulInterleaved(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
                       int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride, Scratch& scratch) {
  const size_t a_stride = QuantizeInterleavedActs(k, pool, wtype, cols, x, n_tokens, scratch);
  MatMulInterleavedActs(k, pool, wtype, w, rows, cols, scratch.act.data(), a_stride, n_tokens, y, y_stride);
}

void MatMulInterleavedActs(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
                           int64_t cols, const uint8_t* a, size_t a_stride, int64_t n_tokens, float* y, int64_t y_stride,
                           bool add) {
  // Each thread takes a band of 16-row groups.
  pool.ParallelFor(rows / kInterleaveRows, 1, [&](int64_t begin, int64_t end) {
    GemmGroups(k, wtype, w, cols, a, a_stride, n_tokens, y, y_stride, begin, end, add);
  });
}

void MatMulInterleavedAdd(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
                          int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride, Scratch& scratch) {
  const size_t a_stride = QuantizeInterleavedActs(k, pool, wtype, cols, x, n_tokens, scratch);
  MatMulInterleavedActs(k, pool, wtype, w, rows, cols, scratch.act.data(), a_stride, n_tokens, y, y_stride, true);
}

void MatMulInterleavedSameInput(const KernelTable& k, ThreadPool& pool, std::span<const GemmJob> jobs, int64_t cols,
                                const float* x, int64_t n_tokens, Scratch& scratch) {
  constexpr size_t kMaxJobs = 4;
  const bool one_format =
      !jobs.empty() && jobs.size() <= kMaxJobs &&
      std::all_of(jobs.begin(), jobs.end(), [&](const GemmJob& j) {
        return InterleavedActType(j.wtype) == InterleavedActType(jobs[0].wtype) &&
               InterleavedActRowBytes(j.wtype, cols) == InterleavedActRowBytes(jobs[0].wtype, cols);
      });
  if (!one_format) {
    for (const GemmJob& j : jobs) MatMulInterleaved(k, pool, j.wtype, j.w, j.rows, cols, x, n_tokens, j.y, j.y_stride, scratch);
    return;
  }
  // One quantization serves every job: an interleaved K-quant's rows end in the same sums
  // whichever K-quant it is (FinishActRow).
  const size_t a_stride = QuantizeInterleavedActs(k, pool, jobs[0].wtype, cols, x, n_tokens, scratch);
  const uint8_t* a = scratch.act.data();
  int64_t first[kMaxJobs + 1] = {0};  // each job's first group in the pass
  for (size_t j = 0; j < jobs.size(); ++j) first[j + 1] = first[j] + jobs[j].rows / kInterleaveRows;
  pool.ParallelFor(first[jobs.size()], 1, [&](int64_t begin, int64_t end) {
    for (size_t j = 0; j < jobs.size() && begin < end; ++j) {
      const int64_t b = std::max(begin, first[j]), e = std::min(end, first[j + 1]);
      if (b >= e) continue;
      const GemmJob& job = jobs[j];
      GemmGroups(k, job.wtype, job.w, cols, a, a_stride, n_tokens, job.y, job.y_stride, b - first[j], e - first[j]);
    }
  });
}

bool SiluMulFusable(const KernelTable& k, TensorType gate_type, TensorType up_type, int64_t cols, int64_t n_tokens) {
  auto has = [&](TensorType t) { return k.gemm_interleaved[static_cast<uint32_t>(t)] != nullptr; };
  return SmallBatch(n_tokens) && has(gate_type) && has(up_type) &&
         InterleavedActType(gate_type) == InterleavedActType(up_type) &&
         InterleavedActRowBytes(gate_type, cols) == InterleavedActRowBytes(up_type, cols);
}

namespace {

// The gate and up products of a small batch, block by block of `block` groups (each thread's share
// a whole number of blocks where the rows allow), each block's outputs on the stack:
// gated(sg, su, width, g0) with sg[t * width + j], su[...] token t's gate and up outputs j of the
// block that starts at group g0.
template <typename Gated>
void GatedPass(const KernelTable& k, ThreadPool& pool, const GemmJob& gate, const GemmJob& up, int64_t cols,
               const float* x, int64_t n_tokens, Scratch& scratch, int64_t block, Gated&& gated) {
  const size_t a_stride = QuantizeInterleavedActs(k, pool, gate.wtype, cols, x, n_tokens, scratch);
  const uint8_t* a = scratch.act.data();
  const int64_t max_rows = k.gemm_interleaved_rows;
  const GemmInterleavedFn gemm_g = StagedKernel(k, gate.wtype, std::min(n_tokens, max_rows));
  const GemmInterleavedFn gemm_u = StagedKernel(k, up.wtype, std::min(n_tokens, max_rows));
  const size_t bytes_g = quant::RowBytes(gate.wtype, cols) * kInterleaveRows;
  const size_t bytes_u = quant::RowBytes(up.wtype, cols) * kInterleaveRows;
  const auto* wg = static_cast<const uint8_t*>(gate.w);
  const auto* wu = static_cast<const uint8_t*>(up.w);
  pool.ParallelFor(gate.rows / kInterleaveRows, block, [&](int64_t begin, int64_t end) {
    alignas(64) float sg[kGatedBlockMax * kStagedTokens * kInterleaveRows];  // 16 KB each
    alignas(64) float su[kGatedBlockMax * kStagedTokens * kInterleaveRows];
    for (int64_t g0 = begin; g0 < end; g0 += block) {
      const int64_t g1 = std::min(end, g0 + block), width = (g1 - g0) * kInterleaveRows;
      // Gate and up alternate group by group: each kernel's prefetches run ahead in its own matrix
      // into the group it takes next.
      for (int64_t g = g0; g < g1; ++g) {
        StageGroup(gemm_g, max_rows, cols, wg, bytes_g, a, a_stride, n_tokens, g, g0, width, sg);
        StageGroup(gemm_u, max_rows, cols, wu, bytes_u, a, a_stride, n_tokens, g, g0, width, su);
      }
      gated(sg, su, width, g0);
    }
  });
}

}  // namespace

void MatMulInterleavedSiluMul(const KernelTable& k, ThreadPool& pool, const GemmJob& gate, const GemmJob& up,
                              int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
                              Scratch& scratch) {
  GatedPass(k, pool, gate, up, cols, x, n_tokens, scratch, kGroupBlock,
            [&](const float* sg, const float* su, int64_t width, int64_t g0) {
              for (int64_t t = 0; t < n_tokens; ++t) {
                k.f.silu_mul(sg + t * width, su + t * width, y + t * y_stride + g0 * kInterleaveRows, width);
              }
            });
}

bool SiluMulActsFusable(const KernelTable& k, TensorType gate_type, TensorType up_type, TensorType down_type,
                        int64_t cols, int64_t rows, int64_t n_tokens) {
  return SiluMulFusable(k, gate_type, up_type, cols, n_tokens) && rows % quant::kQKK == 0 &&
         InterleavedActType(down_type) == TensorType::kQ8_K &&
         k.gemm_interleaved[static_cast<uint32_t>(down_type)] != nullptr &&
         k.quantize_act[static_cast<uint32_t>(TensorType::kQ8_K)] != nullptr;
}

size_t MatMulInterleavedSiluMulActs(const KernelTable& k, ThreadPool& pool, const GemmJob& gate, const GemmJob& up,
                                    TensorType down_type, int64_t cols, const float* x, int64_t n_tokens,
                                    std::vector<uint8_t>& act, Scratch& scratch) {
  const int64_t rows = gate.rows;
  const size_t stride = InterleavedActRowBytes(down_type, rows);
  if (act.size() < stride * static_cast<size_t>(n_tokens)) act.resize(stride * static_cast<size_t>(n_tokens));
  const quant::QuantizeRowFn quantize = k.quantize_act[static_cast<uint32_t>(TensorType::kQ8_K)];
  constexpr int64_t kBlock = quant::kQKK / kInterleaveRows;  // a super-block of gated values
  uint8_t* a = act.data();
  GatedPass(k, pool, gate, up, cols, x, n_tokens, scratch, kBlock,
            [&](const float* sg, const float* su, int64_t width, int64_t g0) {
              alignas(64) float row[quant::kQKK];
              for (int64_t t = 0; t < n_tokens; ++t) {
                k.f.silu_mul(sg + t * width, su + t * width, row, width);
                quantize(row, a + t * stride + g0 / kBlock * sizeof(quant::BlockQ8_K), width);
              }
            });
  for (int64_t t = 0; t < n_tokens; ++t) FinishActRow(down_type, a + t * stride, rows);
  return stride;
}

namespace {

// How a job's activation row is quantized: the format and its quantizer.
struct ActFormat {
  TensorType type;
  bool q8s;  // the interleaved kernels' Q8S (reported as kQ8_0)
  size_t bytes;
  quant::QuantizeRowFn quantize;
  // (Bytes too: an interleaved K-quant's Q8_K rows carry their sub-block sums, a row dot's do not.)
  bool operator==(const ActFormat& o) const { return type == o.type && q8s == o.q8s && bytes == o.bytes; }
};

ActFormat FormatOf(const KernelTable& k, const MatVecJob& job) {
  if (job.interleaved) {
    const TensorType t = InterleavedActType(job.wtype);
    const bool q8s = t != TensorType::kQ8_K;
    return {t, q8s, InterleavedActRowBytes(job.wtype, job.cols), InterleavedActQuantizer(k, job.wtype)};
  }
  const TensorType t = k.of(job.wtype).act_type;
  return {t, false, quant::RowBytes(t, job.cols), k.quantize_act[static_cast<uint32_t>(t)]};
}

}  // namespace

void MatVecBatch(const KernelTable& k, ThreadPool& pool, std::span<const MatVecJob> jobs, Scratch& scratch) {
  if (jobs.empty()) return;
  constexpr size_t kMaxJobs = 64;
  if (jobs.size() > kMaxJobs) {
    for (size_t j0 = 0; j0 < jobs.size(); j0 += kMaxJobs) {
      MatVecBatch(k, pool, jobs.subspan(j0, std::min(kMaxJobs, jobs.size() - j0)), scratch);
    }
    return;
  }
  // Activations: one slot per job, shared with the previous job when its x, length and format are the same.
  ActFormat format[kMaxJobs];
  size_t need = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    format[j] = FormatOf(k, jobs[j]);
    const bool shared = j > 0 && jobs[j].x == jobs[j - 1].x && jobs[j].cols == jobs[j - 1].cols && format[j] == format[j - 1];
    if (!shared) need += format[j].bytes;
  }
  if (scratch.act.size() < need) scratch.act.resize(need);
  // Offsets and the first global row of each job, kept on the stack. Every job starts at a
  // multiple of the granule (its rows rounded up; the padding rows are skipped), so an interleaved
  // job's groups of 16 are never split between threads.
  size_t act_at[kMaxJobs];
  int64_t first_row[kMaxJobs + 1];
  size_t at = 0;
  first_row[0] = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const bool shared = j > 0 && jobs[j].x == jobs[j - 1].x && jobs[j].cols == jobs[j - 1].cols && format[j] == format[j - 1];
    if (shared) {
      act_at[j] = act_at[j - 1];
    } else {
      act_at[j] = at;
      format[j].quantize(jobs[j].x, scratch.act.data() + at, jobs[j].cols);
      if (jobs[j].interleaved) FinishActRow(jobs[j].wtype, scratch.act.data() + at, jobs[j].cols);
      at += format[j].bytes;
    }
    first_row[j + 1] = first_row[j] + (jobs[j].rows + kRowGranule - 1) / kRowGranule * kRowGranule;
  }
  static_assert(kRowGranule % kInterleaveRows == 0);
  const uint8_t* a = scratch.act.data();
  pool.ParallelFor(first_row[jobs.size()], kRowGranule, [&](int64_t begin, int64_t end) {
    size_t j = static_cast<size_t>(std::upper_bound(first_row, first_row + jobs.size() + 1, begin) - first_row) - 1;
    for (int64_t g = begin; g < end;) {
      while (g >= first_row[j + 1]) ++j;
      const MatVecJob& job = jobs[j];
      const size_t row_bytes = quant::RowBytes(job.wtype, job.cols);
      const uint8_t* wb = static_cast<const uint8_t*>(job.w);
      const int64_t stop = std::min({end, first_row[j + 1], first_row[j] + job.rows});
      if (job.interleaved) {
        const GemmInterleavedFn gemm = k.gemm_interleaved[static_cast<uint32_t>(job.wtype)];
        for (; g < stop; g += kInterleaveRows) {
          const int64_t i = g - first_row[j];
          gemm(job.cols, wb + i * row_bytes, a + act_at[j], format[j].bytes, 1, job.y + i, kInterleaveRows);
        }
      } else {
        const quant::VecDotFn dot = k.of(job.wtype).vec_dot;
        for (; g < stop; ++g) {
          const int64_t i = g - first_row[j];
          job.y[i] = dot(job.cols, wb + i * row_bytes, a + act_at[j]);
        }
      }
      g = std::max(g, std::min(end, first_row[j + 1]));  // past the padding rows
    }
  });
}

}  // namespace tandem::kernels
