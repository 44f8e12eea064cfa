#include "kernels/speed.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "base/large_buffer.h"
#include "kernels/matmul.h"
#include "quant/quant.h"

namespace tandem::kernels {

float MeasureMatVecSpeed(int threads) {
  using Clock = std::chrono::steady_clock;
  const int64_t rows = 8192, cols = 8192;
  const size_t row_bytes = quant::RowBytes(quant::TensorType::kQ4_K, cols);
  std::vector<uint8_t> w(rows * row_bytes);
  std::mt19937 rng(3);
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  // Small finite scales so the arithmetic stays ordinary.
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t b = 0; b < row_bytes; b += sizeof(quant::BlockQ4_K)) {
      auto* blk = reinterpret_cast<quant::BlockQ4_K*>(&w[r * row_bytes + b]);
      blk->d = quant::Fp32ToFp16(0.01f);
      blk->dmin = quant::Fp32ToFp16(0.01f);
    }
  }
  std::vector<float> x(cols, 0.5f), y(rows);
  ThreadPool pool(threads);
  Scratch scratch;
  const KernelTable& k = Best();
  MatVec(k, pool, quant::TensorType::kQ4_K, w.data(), rows, cols, x.data(), y.data(), scratch);
  const auto t0 = Clock::now();
  int reps = 0;
  double seconds = 0;
  while (reps < 3 || seconds < 0.1) {
    MatVec(k, pool, quant::TensorType::kQ4_K, w.data(), rows, cols, x.data(), y.data(), scratch);
    ++reps;
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return static_cast<float>(w.size() * static_cast<double>(reps) / seconds / 1e9);
}

float MeasureReadBandwidth(int threads) {
  using Clock = std::chrono::steady_clock;
  // Held as the engine holds weights (2 MiB-aligned, transparent huge pages where allowed), read
  // with the widest loads the CPU has (the best table's float dot of each slice with itself), so
  // the figure is what a weight stream can get rather than what a scalar loop gets.
  size_t bytes = size_t{2} << 30;
  Result<LargeBuffer> buf = LargeBuffer::Allocate(bytes);
  while (!buf.ok() && bytes > (size_t{256} << 20)) buf = LargeBuffer::Allocate(bytes /= 2);
  if (!buf.ok()) return 0;
  float* data = reinterpret_cast<float*>(buf->data());
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000) * 1e-3f;  // every page resident
  ThreadPool pool(threads);
  const KernelTable& k = Best();
  std::vector<float> sums(static_cast<size_t>(threads) * 16, 0.0f);  // a cache line per thread
  auto pass = [&] {
    const auto t0 = Clock::now();
    pool.Run([&](int t, int nt) {
      const Range r = SplitRange(n, t, nt, 64);
      sums[static_cast<size_t>(t) * 16] += k.f.dot(data + r.begin, data + r.begin, r.end - r.begin);
    });
    return static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  pass();
  // The best of 5 passes: the machine is shared and noise only slows a pass down.
  double best = 0;
  for (int i = 0; i < 5; ++i) best = std::max(best, pass());
  float total = 0;
  for (float v : sums) total += v;
  if (!(total >= 0)) return 0;  // keeps the sums alive
  return static_cast<float>(best / 1e9);
}

}  // namespace tandem::kernels
