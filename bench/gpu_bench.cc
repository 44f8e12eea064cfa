// GPU benchmarks (Vulkan): the device's read bandwidth (the read shader), and the mul shaders'
// matrix-vector products (decode) per weight type at the shapes of an 8B model, as bytes of
// weights read per second and as a percentage of that bandwidth; and their matrix products at 512
// tokens (GFLOP/s). Each timed iteration is one submission of 8 dispatches over 8 copies of the
// matrix (so a dispatch's weights do not come from the previous one's cache), timed on the host.
//
//   TANDEM_DEVICE=Vulkan0 build/bench/gpu_bench --benchmark_filter='MatVec/q4_K'
// Without TANDEM_DEVICE: the first GPU, else the first usable device (a software driver too, so
// that the program runs on a machine without a GPU; its figures then say nothing about GPUs).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "quant/quant.h"

namespace tandem {
namespace {

using gpu::Kernel;
using quant::TensorType;

std::shared_ptr<gpu::Device> BenchDevice() {
  static std::shared_ptr<gpu::Device> device = []() -> std::shared_ptr<gpu::Device> {
    const char* env = std::getenv("TANDEM_DEVICE");
    Result<gpu::DeviceChoice> c = gpu::ChooseDevice(env != nullptr ? env : "auto");
    if (c.ok() && c->device != nullptr) return c->device;
    Result<std::vector<gpu::DeviceInfo>> list = gpu::ListDevices();
    if (!list.ok()) return nullptr;
    for (const gpu::DeviceInfo& d : *list) {
      Result<std::unique_ptr<gpu::Device>> dev = gpu::Device::Open(d.index);
      if (dev.ok()) return std::shared_ptr<gpu::Device>(std::move(*dev));
    }
    return nullptr;
  }();
  return device;
}

double Bandwidth() {
  static double gbps = [] {
    Result<double> r = gpu::MeasureReadBandwidth(*BenchDevice());
    return r.ok() ? *r : 0.0;
  }();
  return gbps;
}

struct TypeCase {
  const char* name;
  TensorType type;
};
constexpr TypeCase kTypes[] = {
    {"q4_0", TensorType::kQ4_0}, {"q8_0", TensorType::kQ8_0}, {"q4_K", TensorType::kQ4_K},
    {"q5_K", TensorType::kQ5_K}, {"q6_K", TensorType::kQ6_K}, {"f16", TensorType::kF16},
};
constexpr int kCopies = 8;

// rows x cols of random weights of the type, kCopies times, and x with nt rows; then each
// iteration multiplies every copy once.
void Mul(benchmark::State& state, const TypeCase& tc, int64_t rows, int64_t cols, uint32_t nt) {
  std::shared_ptr<gpu::Device> dev = BenchDevice();
  if (dev == nullptr) return state.SkipWithError("no Vulkan device");
  const size_t row_bytes = quant::RowBytes(tc.type, cols);
  const uint64_t bytes = static_cast<uint64_t>(rows) * row_bytes;
  if (bytes > dev->info().max_binding_bytes) return state.SkipWithError("matrix larger than one binding");
  std::vector<uint8_t> w(bytes);
  std::vector<float> row(cols);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const quant::TypeOps* ops = quant::ReferenceOps(tc.type);
  for (int64_t r = 0; r < std::min<int64_t>(rows, 64); ++r) {
    for (float& v : row) v = normal(rng);
    ops->quantize_row(row.data(), &w[r * row_bytes], cols);
  }
  for (int64_t r = 64; r < rows; ++r) std::copy_n(&w[(r % 64) * row_bytes], row_bytes, &w[r * row_bytes]);
  std::vector<std::unique_ptr<gpu::Buffer>> copies;
  for (int c = 0; c < kCopies; ++c) {
    auto b = dev->NewBuffer(bytes, false, "weights");
    if (!b.ok() || !dev->Upload(**b, 0, w.data(), bytes).ok()) return state.SkipWithError("upload failed");
    copies.push_back(std::move(*b));
  }
  std::vector<float> x(static_cast<size_t>(nt) * cols);
  for (float& v : x) v = normal(rng);
  auto xb = dev->NewBuffer(x.size() * sizeof(float), false, "x");
  auto yb = dev->NewBuffer(static_cast<uint64_t>(nt) * rows * sizeof(float), false, "y");
  auto stream = dev->NewStream();
  if (!xb.ok() || !yb.ok() || !stream.ok() || !dev->Upload(**xb, 0, x.data(), x.size() * sizeof(float)).ok()) {
    return state.SkipWithError("buffers failed");
  }
  auto run = [&]() -> Status {
    TANDEM_RETURN_IF_ERROR((*stream)->Begin());
    for (int c = 0; c < kCopies; ++c) {
      gpu::MulPush p;
      p.cols = static_cast<uint32_t>(cols);
      p.nt = nt;
      p.x_stride = static_cast<uint32_t>(cols);
      p.y_stride = static_cast<uint32_t>(rows);
      p.row_bytes = static_cast<uint32_t>(row_bytes);
      gpu::RecordMul(**stream, *gpu::MulKernelFor(tc.type), *copies[c], **xb, **yb, p, rows);
    }
    return (*stream)->Submit();
  };
  if (Status st = run(); !st.ok()) return state.SkipWithError(st.ToString().c_str());  // builds the pipeline
  for (auto _ : state) {
    if (Status st = run(); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  }
  const double per_iter = static_cast<double>(bytes) * kCopies;
  state.SetBytesProcessed(static_cast<int64_t>(per_iter * state.iterations()));
  if (nt == 1) {
    state.counters["GBps"] = benchmark::Counter(per_iter / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["pct_of_read_bw"] =
        benchmark::Counter(100.0 * per_iter / 1e9 / std::max(Bandwidth(), 1e-9), benchmark::Counter::kIsIterationInvariantRate);
  } else {
    state.counters["GFLOPs"] = benchmark::Counter(2.0 * rows * cols * nt * kCopies / 1e9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  }
}

void ReadBandwidth(benchmark::State& state) {
  if (BenchDevice() == nullptr) return state.SkipWithError("no Vulkan device");
  for (auto _ : state) benchmark::DoNotOptimize(Bandwidth());
  state.counters["GBps"] = Bandwidth();
}

void Register() {
  BENCHMARK(ReadBandwidth)->Iterations(1);
  // An 8B model's attention output (4096 x 4096) and FFN down (4096 rows of 14336).
  for (const TypeCase& tc : kTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}}) {
      const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
      benchmark::RegisterBenchmark(("MatVec/" + std::string(tc.name) + "/" + shape).c_str(),
                                   [tc, rows, cols](benchmark::State& s) { Mul(s, tc, rows, cols, 1); })
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark(("MatMul512/" + std::string(tc.name) + "/4096x4096").c_str(),
                                 [tc](benchmark::State& s) { Mul(s, tc, 4096, 4096, 512); })
        ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Register();
  benchmark::Initialize(&argc, argv);
  if (std::shared_ptr<tandem::gpu::Device> d = tandem::BenchDevice()) {
    std::printf("device: %s (%s%s)\n", d->info().name.c_str(), d->info().description.c_str(),
                d->info().software ? ", a software driver: these figures say nothing about GPUs" : "");
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
