#include "kernels/speed.h"

#include <chrono>
#include <random>
#include <vector>

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
  const size_t n = (size_t{1} << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);  // written once: every page is resident before timing
  ThreadPool pool(threads);
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8, 0);  // a cache line per thread
  auto pass = [&] {
    pool.Run([&](int t, int nt) {
      const size_t b = n * t / nt, e = n * (t + 1) / nt;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      sums[static_cast<size_t>(t) * 8] += s0 + s1 + s2 + s3;
    });
  };
  pass();
  const auto t0 = Clock::now();
  constexpr int kPasses = 4;
  for (int r = 0; r < kPasses; ++r) pass();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  uint64_t total = 0;
  for (uint64_t v : sums) total += v;
  if (total == 0) return 0;  // keeps the sums alive
  return static_cast<float>(static_cast<double>(n * sizeof(uint64_t)) * kPasses / seconds / 1e9);
}

}  // namespace tandem::kernels
