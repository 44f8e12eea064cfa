// Kernel benchmarks: memory read bandwidth, matrix-vector products (decode) per weight type at
// the shapes of a 1.1B model, and prompt matrix multiplication (GFLOP/s at 128 and 512 tokens;
// the interleaved layouts also at a layer's other shapes for 512, so that a prompt's time can be
// summed product by product).
//
// Decode streams the whole model from memory, so each matrix-vector benchmark cycles through
// enough copies of its matrix (kWorkingSetBytes) that weights come from DRAM, not cache, and
// reports weight bytes read per second as `bytes_per_second` and as `pct_of_mem_bw`: a
// percentage of the read bandwidth this machine gives the same number of threads, measured by
// the same thread pool right before and right after each timed loop: the best of 3 passes before and
// 3 after (the highest figure, so the percentage errs low). This machine's bandwidth drifts by 20 %
// or more over a minute (it is shared), so a figure taken once at start would compare each kernel
// with a different machine.
//
// MatMulInterleavedStreamed: the small batches of speculative verification and of a server's
// decode step (1, 4 and 8 tokens) against interleaved weights from DRAM, as `tandem bench
// --small-batch` runs them: each weight block is read once, so the kernel computes and streams at
// once. On the Zen 5 VM, Q4_K 5632x2048, 2 threads: 4 tokens take about as long as 1 (the stream
// bounds both), 8 about twice as long (computing bounds it, at about half the kernel's in-cache
// rate). Prefetch distances tuned on it did not carry over to the model: 14 KB ahead instead of
// 16 made this benchmark's 8-token Q4_K case 15-17 % faster and `bench --small-batch 8` on the
// TinyLlama-shaped Q4_K_M 13 % slower (medians of 12 alternating runs, 23.4 -> 26.3 ms).
//
// GemmGroupInL1: the interleaved kernel alone on one 16-row group in L1, one thread: what the
// products cost when memory costs nothing, the floor under the streamed figures. GemmGroupsCached:
// the same over 16 groups (L2) and 256 groups (the last-level cache), ns per group: what the
// kernel loses to the caches before DRAM costs anything. GemmGroupsStreamed: the kernel alone
// from DRAM on plain threads, without the pool (see BM_GemmGroupsStreamed).
//
//   build/bench/matvec_bench --benchmark_filter='MatVec/(q4_K|q6_K|q8_0)/5632x2048'
// Byte rates from Google Benchmark are in binary units (GiB/s); the bandwidth line is in GB/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "base/large_buffer.h"
#include "base/thread_pool.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace tandem {
namespace {

using kernels::KernelTable;
using quant::TensorType;

// Six times the last-level cache this machine reports (508 MiB), so passes read DRAM.
constexpr size_t kWorkingSetBytes = size_t{3072} << 20;

// Reads a slice with the widest loads the CPU has: the kernel table's float dot of the slice with
// itself touches every cache line once, like a weight stream does.
float ReadSlice(const float* p, size_t n) {
  return kernels::Best().f.dot(p, p, static_cast<int64_t>(n));
}

// Large benchmark buffers: LargeBuffer (2 MiB aligned, transparent huge pages where the kernel
// allows, as the engine keeps its weights), the same for the bandwidth pass and the weights so
// that the percentages compare like with like.
LargeBuffer AllocLarge(size_t bytes) {
  Result<LargeBuffer> b = LargeBuffer::Allocate(bytes);
  if (!b.ok()) {
    std::fprintf(stderr, "matvec_bench: %s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(b).value();
}

struct Buffer {
  LargeBuffer mem;
  size_t words = 0;  // floats
  float* data() const { return reinterpret_cast<float*>(mem.data()); }
};

Buffer& BandwidthBuffer() {
  static Buffer b = [] {
    Buffer x;
    x.words = kWorkingSetBytes / sizeof(float);
    x.mem = AllocLarge(x.words * sizeof(float));
    for (size_t i = 0; i < x.words; ++i) x.data()[i] = static_cast<float>(i % 1000) * 1e-3f;
    return x;
  }();
  return b;
}

double ReadOnce(ThreadPool& pool) {
  Buffer& b = BandwidthBuffer();
  std::vector<float> sums(pool.size());
  const auto t0 = std::chrono::steady_clock::now();
  pool.Run([&](int t, int n) {
    Range r = SplitRange(static_cast<int64_t>(b.words), t, n, 64);
    sums[t] = ReadSlice(b.data() + r.begin, r.end - r.begin);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(sums.data());
  return static_cast<double>(b.words * sizeof(float)) / s;
}

// The best of `passes` full passes: bytes per second.
double BestOf(ThreadPool& pool, int passes) {
  double best = 0;
  for (int i = 0; i < passes; ++i) best = std::max(best, ReadOnce(pool));
  return best;
}

// Median of 5 full passes: bytes per second at `threads`.
double MemoryBandwidth(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  ThreadPool pool(threads);
  ReadOnce(pool);  // fault in the pages
  ReadOnce(pool);
  std::vector<double> v;
  for (int i = 0; i < 5; ++i) v.push_back(ReadOnce(pool));
  std::sort(v.begin(), v.end());
  return cache[threads] = v[2];
}

void BM_MemoryRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  ReadOnce(pool);
  for (auto _ : state) ReadOnce(pool);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(BandwidthBuffer().words * sizeof(float)));
}
BENCHMARK(BM_MemoryRead)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Quantized random rows of `type`.
std::vector<uint8_t> MakeMatrix(TensorType type, int64_t rows, int64_t cols) {
  const size_t rb = quant::RowBytes(type, cols);
  std::vector<uint8_t> w(rb * rows);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = d(rng);
    quant::ReferenceOps(type)->quantize_row(row.data(), w.data() + r * rb, cols);
  }
  return w;
}

// The matrix in the interleaved layout of kernels/interleave.h.
std::vector<uint8_t> Interleaved(TensorType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> out(w.size());  // the same bytes
  kernels::Interleave(type, w.data(), out.data(), rows, cols);
  return out;
}

// `copies` copies of a matrix back to back, cycled by the timed loops: enough of them
// (kWorkingSetBytes) and each pass reads its weights from DRAM, as decode does.
struct MatrixCopies {
  LargeBuffer all;
  size_t bytes = 0, copies = 0, next = 0;

  MatrixCopies(const std::vector<uint8_t>& one, size_t n) : all(AllocLarge(one.size() * n)), bytes(one.size()), copies(n) {
    for (size_t c = 0; c < copies; ++c) std::memcpy(all.data() + c * bytes, one.data(), bytes);
  }
  static size_t ForDram(size_t bytes) { return std::max<size_t>(2, kWorkingSetBytes / bytes); }
  // The copy for this pass; the next call returns the next one.
  const uint8_t* Next() {
    const uint8_t* w = all.data() + next * bytes;
    next = (next + 1) % copies;
    return w;
  }
};

void BM_MatVec(benchmark::State& state, TensorType type, int64_t rows, int64_t cols, bool interleaved) {
  const int threads = static_cast<int>(state.range(0));
  const KernelTable& k = kernels::Best();
  std::vector<uint8_t> one = MakeMatrix(type, rows, cols);
  if (interleaved) one = Interleaved(type, one, rows, cols);
  MatrixCopies m(one, MatrixCopies::ForDram(one.size()));
  std::vector<float> x(cols, 0.5f), y(rows);
  ThreadPool pool(threads);
  kernels::Scratch scratch;
  MemoryBandwidth(threads);  // faults in the bandwidth buffer once
  const double bw_before = BestOf(pool, 3);
  for (auto _ : state) {
    const uint8_t* w = m.Next();
    if (interleaved) {
      kernels::MatMulInterleaved(k, pool, type, w, rows, cols, x.data(), 1, y.data(), rows, scratch);
    } else {
      kernels::MatVec(k, pool, type, w, rows, cols, x.data(), y.data(), scratch);
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = static_cast<double>(one.size());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * one.size()));
  const double bw = std::max(bw_before, BestOf(pool, 3));  // the timed loop has ended
  state.counters["pct_of_mem_bw"] =
      benchmark::Counter(bytes / bw * 100.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["mem_GBps"] = bw / 1e9;
  state.SetLabel(kernels::IsaName(k.isa));
}

// tokens x the matrix. Streamed: enough copies of it that its weights come from DRAM (a verifying
// forward of a few tokens reads every weight once, as a decode step does), else one copy, in cache
// after the first pass (a long prompt reuses each block for many tokens).
void BM_MatMul(benchmark::State& state, TensorType type, int64_t rows, int64_t cols, bool interleaved, bool streamed) {
  const int64_t tokens = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const KernelTable& k = kernels::Best();
  std::vector<uint8_t> one = MakeMatrix(type, rows, cols);
  if (interleaved) one = Interleaved(type, one, rows, cols);
  MatrixCopies m(one, streamed ? MatrixCopies::ForDram(one.size()) : 1);
  std::vector<float> x(tokens * cols, 0.25f), y(tokens * rows);
  ThreadPool pool(threads);
  kernels::Scratch scratch;
  for (auto _ : state) {
    const uint8_t* w = m.Next();
    if (interleaved) {
      kernels::MatMulInterleaved(k, pool, type, w, rows, cols, x.data(), tokens, y.data(), rows, scratch);
    } else {
      kernels::MatMul(k, pool, type, w, rows, cols, x.data(), tokens, y.data(), rows, scratch);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * tokens * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  if (streamed) {
    state.counters["weights_GBps"] = benchmark::Counter(static_cast<double>(one.size()) * 1e-9,
                                                        benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(kernels::IsaName(k.isa));
}

// The interleaved kernel alone: `groups` groups of 16 rows, 2048 wide (a TinyLlama layer's input
// width), against `tokens` activation rows, one thread, no pool. With one group, weights and
// activations stay in L1 (one group of Q4_K is 18 KB, 8 activation rows 20 KB): what a product of
// these rows costs when memory costs nothing, the floor under MatMulInterleavedStreamed, whose
// weights come from DRAM. With 16 groups the weights come from L2, with 256 from the last-level
// cache (Q4_K: 288 KB and 4.6 MB). MAC/s counts multiply-accumulates of weights by activations
// (16 x 2048 x tokens a group); ns_per_group is the time of one group's product.
// `na` random activation rows of `cols` as MatMulInterleaved quantizes them for `type`'s
// interleaved kernels (kernels/interleave.h), InterleavedActRowBytes apart.
std::vector<uint8_t> InterleavedActs(const KernelTable& k, TensorType type, int64_t cols, int na) {
  const size_t a_stride = kernels::InterleavedActRowBytes(type, cols);
  std::vector<uint8_t> a(a_stride * na);
  const quant::QuantizeRowFn quantize = kernels::InterleavedActQuantizer(k, type);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(cols);
  for (int r = 0; r < na; ++r) {
    for (float& v : x) v = d(rng);
    quantize(x.data(), a.data() + r * a_stride, cols);
    kernels::FinishActRow(type, a.data() + r * a_stride, cols);
  }
  return a;
}

void BM_GemmGroups(benchmark::State& state, TensorType type) {
  constexpr int64_t kCols = 2048;
  const int na = static_cast<int>(state.range(0));
  const int64_t groups = state.range(1);
  const int64_t rows = kernels::kInterleaveRows * groups;
  const KernelTable& k = kernels::Best();
  const kernels::GemmInterleavedFn gemm = k.gemm_interleaved[static_cast<uint32_t>(type)];
  const std::vector<uint8_t> w = Interleaved(type, MakeMatrix(type, rows, kCols), rows, kCols);
  const size_t group_bytes = w.size() / groups;
  const size_t a_stride = kernels::InterleavedActRowBytes(type, kCols);
  const std::vector<uint8_t> a = InterleavedActs(k, type, kCols, na);
  std::vector<float> out(rows * na);
  for (auto _ : state) {
    for (int64_t g = 0; g < groups; ++g) {
      gemm(kCols, w.data() + g * group_bytes, a.data(), a_stride, na, out.data() + g * kernels::kInterleaveRows, rows);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["GMAC/s"] = benchmark::Counter(1e-9 * static_cast<double>(rows * kCols * na),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns_per_group"] = benchmark::Counter(
      1e-9 * static_cast<double>(groups), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(kernels::IsaName(k.isa));
}

// The interleaved kernel alone streaming from DRAM: `threads` plain threads, each over its half of
// enough copies of a 5632x2048 matrix (kWorkingSetBytes), one call per 16-row group, no pool and
// no synchronisation between matrices. What the kernel itself overlaps of computing and
// streaming (against GemmGroupInL1 and one token here), apart from what the pool adds per product
// (MatMulInterleavedStreamed). Xeon VM, Q4_K, 2 threads: 1 token 1120-1330 ns a group and thread
// (28-33 GB/s, the machine's read bandwidth), 8 tokens 1.3-1.4 times the larger of that and its
// time in L2 (GemmGroupsCached).
void BM_GemmGroupsStreamed(benchmark::State& state, TensorType type) {
  constexpr int64_t kRows = 5632, kCols = 2048;
  const int na = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const KernelTable& k = kernels::Best();
  const kernels::GemmInterleavedFn gemm = k.gemm_interleaved[static_cast<uint32_t>(type)];
  const std::vector<uint8_t> one = Interleaved(type, MakeMatrix(type, kRows, kCols), kRows, kCols);
  MatrixCopies m(one, MatrixCopies::ForDram(one.size()));
  const size_t group_bytes = one.size() / (kRows / kernels::kInterleaveRows);
  const int64_t groups = static_cast<int64_t>(m.copies) * (kRows / kernels::kInterleaveRows);
  const size_t a_stride = kernels::InterleavedActRowBytes(type, kCols);
  const std::vector<uint8_t> a = InterleavedActs(k, type, kCols, na);
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        alignas(64) float out[kernels::kInterleaveRows * 16];  // up to a tile's rows
        const Range r = SplitRange(groups, t, threads);
        for (int64_t g = r.begin; g < r.end; ++g) gemm(kCols, m.all.data() + g * group_bytes, a.data(), a_stride, na, out, kernels::kInterleaveRows);
        benchmark::DoNotOptimize(out);
      });
    }
    for (std::thread& t : pool) t.join();
  }
  const double per_thread = static_cast<double>(groups) / threads;
  state.counters["ns_per_group_thread"] = benchmark::Counter(
      1e-9 * per_thread, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["GBps"] = benchmark::Counter(1e-9 * static_cast<double>(groups * group_bytes),
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels::IsaName(k.isa));
}

// The first matrix-vector product of a pipeline stage: the pool has sat idle between tokens (its
// workers asleep), so the product starts while a worker is still waking. Q4_K 2048x2048 (a
// TinyLlama attention matrix) after 2 ms idle, 2 threads; manual time covers the product alone.
void BM_MatVecAfterIdle(benchmark::State& state) {
  const TensorType type = TensorType::kQ4_K;
  const int64_t rows = 2048, cols = 2048;
  const KernelTable& k = kernels::Best();
  const std::vector<uint8_t> one = MakeMatrix(type, rows, cols);
  std::vector<float> x(cols, 0.5f), y(rows);
  ThreadPool pool(2);
  kernels::Scratch scratch;
  kernels::MatVec(k, pool, type, one.data(), rows, cols, x.data(), y.data(), scratch);
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t0 = std::chrono::steady_clock::now();
    kernels::MatVec(k, pool, type, one.data(), rows, cols, x.data(), y.data(), scratch);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(kernels::IsaName(k.isa));
}
BENCHMARK(BM_MatVecAfterIdle)->UseManualTime()->Unit(benchmark::kMicrosecond);

struct Shape {
  int64_t rows, cols;
};
// The matrices of a TinyLlama-1.1B layer and its output head.
const Shape kShapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
const Shape kPromptShapes[] = {{2048, 2048}, {256, 2048}, {2048, 5632}};
const TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,
                             TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                             TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ2_K,
                             TensorType::kQ3_K, TensorType::kQ4_K, TensorType::kQ5_K,
                             TensorType::kQ6_K};

const bool kRegistered = [] {
  for (TensorType t : kTypes) {
    const std::string tn(gguf::TensorTypeName(t));
    for (const Shape& s : kShapes) {
      const std::string name = "MatVec/" + tn + "/" + std::to_string(s.rows) + "x" +
                               std::to_string(s.cols);
      benchmark::RegisterBenchmark(name.c_str(), BM_MatVec, t, s.rows, s.cols, false)
          ->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->MinTime(0.3);
    }
    const std::string mm = "MatMul/" + tn + "/5632x2048";
    benchmark::RegisterBenchmark(mm.c_str(), BM_MatMul, t, 5632, 2048, false, false)
        ->ArgsProduct({{8, 128, 512}, {2}})->ArgNames({"tokens", "threads"})->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    // The interleaved layout (kernels/interleave.h), where this CPU's kernels have it.
    if (!kernels::HasInterleavedLayout(t) || kernels::Best().gemm_interleaved[static_cast<uint32_t>(t)] == nullptr) continue;
    for (const Shape& s : kShapes) {
      const std::string name = "MatVecInterleaved/" + tn + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      benchmark::RegisterBenchmark(name.c_str(), BM_MatVec, t, s.rows, s.cols, true)
          ->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->MinTime(0.3);
    }
    const std::string mmi = "MatMulInterleaved/" + tn + "/5632x2048";
    benchmark::RegisterBenchmark(mmi.c_str(), BM_MatMul, t, 5632, 2048, true, false)
        ->ArgsProduct({{8, 128, 512}, {2}})->ArgNames({"tokens", "threads"})->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    // A prompt's other products: a TinyLlama layer's attention (2048x2048; 256x2048, its grouped
    // keys and values) and its down projection (2048x5632).
    for (const Shape& s : kPromptShapes) {
      const std::string name = "MatMulInterleaved/" + tn + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      benchmark::RegisterBenchmark(name.c_str(), BM_MatMul, t, s.rows, s.cols, true, false)
          ->ArgsProduct({{512}, {2}})->ArgNames({"tokens", "threads"})->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    const std::string l1 = "GemmGroupInL1/" + tn + "/16x2048";
    benchmark::RegisterBenchmark(l1.c_str(), BM_GemmGroups, t)->ArgsProduct({{1, 4, 8}, {1}})
        ->ArgNames({"tokens", "groups"})->Unit(benchmark::kNanosecond);
    const std::string cached = "GemmGroupsCached/" + tn + "/16x2048";
    benchmark::RegisterBenchmark(cached.c_str(), BM_GemmGroups, t)->ArgsProduct({{8}, {16, 256}})
        ->ArgNames({"tokens", "groups"})->Unit(benchmark::kMicrosecond);
    const std::string raw = "GemmGroupsStreamed/" + tn + "/5632x2048";
    benchmark::RegisterBenchmark(raw.c_str(), BM_GemmGroupsStreamed, t)->ArgsProduct({{1, 4, 8}, {2}})
        ->ArgNames({"tokens", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(3);
    // A verifying forward's few tokens against weights from DRAM: on a small batch each block is
    // read once, so the kernel must compute and stream at once (bench --small-batch).
    const std::string mms = "MatMulInterleavedStreamed/" + tn + "/5632x2048";
    benchmark::RegisterBenchmark(mms.c_str(), BM_MatMul, t, 5632, 2048, true, true)
        ->ArgsProduct({{1, 4, 8}, {1, 2}})->ArgNames({"tokens", "threads"})->UseRealTime()
        ->Unit(benchmark::kMicrosecond)->MinTime(0.3);
  }
  return true;
}();

}  // namespace
}  // namespace tandem

// Measures the memory read bandwidth at 1 and 2 threads before any other benchmark runs, so the
// percentages all refer to the same figures, printed first.
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int threads : {1, 2}) {
    std::printf("memory read bandwidth, %d thread%s: %.2f GB/s (median of 5 passes over %zu MiB)\n",
                threads, threads == 1 ? "" : "s", tandem::MemoryBandwidth(threads) * 1e-9,
                tandem::kWorkingSetBytes >> 20);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
