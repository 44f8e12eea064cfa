// The Vulkan device layer on this machine's driver (lavapipe in CI, installed by
// scripts/install-deps.sh): devices are listed, errors are values, and the matrix products of
// every weight type give what the quantization's own dequantized rows give.
#include "gpu/device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "quant/quant.h"

namespace tandem::gpu {
namespace {

std::unique_ptr<Device> OpenFirst() {
  Result<std::vector<DeviceInfo>> devices = ListDevices();
  EXPECT_TRUE(devices.ok()) << devices.status().ToString();
  if (!devices.ok()) return nullptr;
  for (const DeviceInfo& d : *devices) {
    if (!d.unusable.empty()) continue;
    Result<std::unique_ptr<Device>> dev = Device::Open(d.index);
    EXPECT_TRUE(dev.ok()) << dev.status().ToString();
    if (dev.ok()) return std::move(*dev);
  }
  ADD_FAILURE() << "no usable Vulkan device (install mesa-vulkan-drivers: scripts/install-deps.sh)";
  return nullptr;
}

TEST(GpuDeviceTest, ListsDevicesWithTheirLimits) {
  Result<std::vector<DeviceInfo>> devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_FALSE(devices->empty());
  for (const DeviceInfo& d : *devices) {
    EXPECT_EQ(d.name, "Vulkan" + std::to_string(d.index));
    EXPECT_FALSE(d.description.empty());
    EXPECT_GT(d.max_binding_bytes, 0u);
    EXPECT_GT(d.subgroup_size, 0u);
    std::printf("%s: %s, %llu MiB, binding %llu MiB, subgroup %u%s%s\n", d.name.c_str(), d.description.c_str(),
                static_cast<unsigned long long>(d.memory_bytes >> 20),
                static_cast<unsigned long long>(d.max_binding_bytes >> 20), d.subgroup_size,
                d.software ? ", software" : "", d.unusable.empty() ? "" : (" - unusable: " + d.unusable).c_str());
  }
}

TEST(GpuDeviceTest, ErrorsAreValues) {
  Result<std::unique_ptr<Device>> none = Device::Open(1000);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("Vulkan1000"), std::string::npos) << none.status().ToString();
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  // One binding cannot span more than maxStorageBufferRange: refused, naming what wanted it.
  Result<std::unique_ptr<Buffer>> big = dev->NewBuffer(dev->info().max_binding_bytes + 1, false, "a test tensor");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("a test tensor"), std::string::npos) << big.status().ToString();
  // A dispatch with the wrong number of buffers is an error of the stream, not a crash.
  Result<std::unique_ptr<Buffer>> b = dev->NewBuffer(256, false, "x");
  ASSERT_TRUE(b.ok());
  Result<std::unique_ptr<Stream>> s = dev->NewStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Begin().ok());
  const uint32_t push[2] = {64, 1};
  (*s)->Dispatch(Kernel::kAdd, {b->get()}, push, 1);
  EXPECT_FALSE((*s)->Submit().ok());
}

// What a failing driver answers (injected: lavapipe does not fail) comes back as an error naming
// the device and what failed, nothing aborts, and the Device says when it is lost for good.
TEST(GpuDeviceTest, AShaderThatDoesNotBuildAndALostDeviceAreErrorsNamingTheDevice) {
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  const std::string name = dev->info().name;
  Result<std::unique_ptr<Buffer>> a = dev->NewBuffer(256, false, "a");
  Result<std::unique_ptr<Buffer>> b = dev->NewBuffer(256, false, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  Result<std::unique_ptr<Stream>> s = dev->NewStream();
  ASSERT_TRUE(s.ok());
  const uint32_t push[2] = {64, 1};
  dev->InjectFaultForTesting(Device::Fault::kShaderBuild);
  ASSERT_TRUE((*s)->Begin().ok());
  (*s)->Dispatch(Kernel::kAdd, {a->get(), b->get()}, push, 1);
  Status st = (*s)->Submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(name), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("building shader add"), std::string::npos) << st.ToString();
  EXPECT_FALSE(dev->lost());
  // The device still runs what needs no new shader.
  const std::vector<uint8_t> data(256, 7);
  EXPECT_TRUE(dev->Upload(**a, 0, data.data(), data.size()).ok());

  dev->InjectFaultForTesting(Device::Fault::kDeviceLost);
  st = dev->Upload(**a, 0, data.data(), data.size());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << st.ToString();
  EXPECT_TRUE(dev->lost());
  // Everything later fails at once, saying why, without calling the driver again.
  std::vector<uint8_t> back(256);
  st = dev->Download(**b, 0, back.data(), back.size());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the device was lost"), std::string::npos) << st.ToString();
}

// The profile counts each command of the recordings made while it is on, every time they run,
// and nothing recorded before it started.
TEST(GpuDeviceTest, AProfileTimesEachShaderOfTheRecordingsMadeWhileItIsOn) {
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  if (dev->info().timestamp_ns <= 0) {  // a driver without compute timestamps: refused, saying so
    const Status st = dev->StartProfile();
    EXPECT_EQ(st.code(), Code::kUnsupported) << st.ToString();
    return;
  }
  Result<std::unique_ptr<Buffer>> a = dev->NewBuffer(1 << 16, false, "a");
  Result<std::unique_ptr<Buffer>> b = dev->NewBuffer(1 << 16, false, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  Result<std::unique_ptr<Stream>> s = dev->NewStream();
  ASSERT_TRUE(s.ok());
  const uint32_t push[2] = {1 << 14, 1};
  ASSERT_TRUE((*s)->Begin().ok());
  (*s)->Dispatch(Kernel::kAdd, {a->get(), b->get()}, push, 64);
  ASSERT_TRUE((*s)->Submit().ok());
  ASSERT_TRUE(dev->StartProfile().ok());
  EXPECT_TRUE(dev->profiling());
  ASSERT_TRUE((*s)->Replay().ok());  // recorded before the profile started: not timed
  ASSERT_TRUE((*s)->Begin().ok());
  for (int i = 0; i < 3; ++i) (*s)->Dispatch(Kernel::kAdd, {a->get(), b->get()}, push, 64);
  (*s)->Copy(**a, 0, **b, 0, 1 << 16);
  ASSERT_TRUE((*s)->Submit().ok());
  ASSERT_TRUE((*s)->Replay().ok());
  const std::vector<Device::ProfileEntry> profile = dev->StopProfile();
  EXPECT_FALSE(dev->profiling());
  ASSERT_EQ(profile.size(), 2u);
  double total = 0;
  for (const Device::ProfileEntry& e : profile) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(e.name == "add" || e.name == "copy");
    EXPECT_EQ(e.calls, e.name == "add" ? 6u : 2u);
    EXPECT_GE(e.ms, 0.0);
    total += e.ms;
  }
  EXPECT_GT(total, 0.0);
  EXPECT_GE(profile[0].ms, profile[1].ms);  // the longest first
  EXPECT_TRUE(dev->StopProfile().empty());  // nothing since
}

TEST(GpuDeviceTest, UploadAndDownloadRoundTrip) {
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  std::vector<uint8_t> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  Result<std::unique_ptr<Buffer>> b = dev->NewBuffer(data.size() + 64, false, "round trip");
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(dev->Upload(**b, 64, data.data(), data.size()).ok());
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE(dev->Download(**b, 64, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
}

Kernel MulKernel(quant::TensorType t, bool expert = false) {
  std::optional<Kernel> k = MulKernelFor(t, expert);
  EXPECT_TRUE(k.has_value());
  return k.value_or(Kernel::kMulF32);
}

// Every weight type: rows of random values quantized by the reference, times token rows, against
// the dot products of the dequantized rows (double). The row kernels at 1, 5 and 11 tokens (one
// workgroup takes 8), 512 and 2304 columns wide (a thread takes several blocks); the tiled ones
// at 11 and 70 tokens over 133 rows (partial tiles of both), the 70 from the automatic choice. A
// float matrix 100 columns wide too (a partial chunk of 32). Then each again accumulating into y.
TEST(GpuDeviceTest, MatrixProductsOfEveryWeightTypeMatchTheDequantizedRows) {
  using quant::TensorType;
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  Result<std::unique_ptr<Stream>> stream = dev->NewStream();
  ASSERT_TRUE(stream.ok());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  struct Case {
    uint32_t nt;
    int64_t rows;
    MulPath path;
  };
  const Case cases[] = {{1, 37, MulPath::kRows},   {5, 37, MulPath::kRows},   {11, 37, MulPath::kRows},
                        {11, 133, MulPath::kTiles}, {70, 133, MulPath::kAuto}};
  for (TensorType t : {TensorType::kF32, TensorType::kF16, TensorType::kBF16, TensorType::kQ4_0, TensorType::kQ4_1,
                       TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ2_K, TensorType::kQ3_K,
                       TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    const quant::TypeOps* ops = quant::ReferenceOps(t);
    ASSERT_NE(ops, nullptr);
    const bool is_float = t == TensorType::kF32 || t == TensorType::kF16 || t == TensorType::kBF16;
    for (const int64_t cols : {int64_t{512}, int64_t{2304}, int64_t{100}}) {
      if (cols == 100 && !is_float) continue;
      for (const Case& k : cases) {
        if (cols == 2304 && k.path != MulPath::kRows) continue;  // several blocks a thread: the row kernel's loop
        SCOPED_TRACE(std::string(KernelName(MulKernel(t))) + " cols " + std::to_string(cols) + " tokens " +
                     std::to_string(k.nt) + " rows " + std::to_string(k.rows) +
                     (k.path == MulPath::kRows ? " row kernel" : " tiled kernel"));
        const int64_t rows = k.rows;
        const uint32_t nt = k.nt;
        const size_t row_bytes = quant::RowBytes(t, cols);
        std::vector<uint8_t> w(rows * row_bytes);
        std::vector<float> deq(rows * cols), src(cols);
        for (int64_t r = 0; r < rows; ++r) {
          for (float& v : src) v = normal(rng);
          ops->quantize_row(src.data(), &w[r * row_bytes], cols);
          ops->dequantize_row(&w[r * row_bytes], &deq[r * cols], cols);
        }
        std::vector<float> x(nt * cols);
        for (float& v : x) v = normal(rng);
        auto wb = dev->NewBuffer(w.size(), false, "w");
        auto xb = dev->NewBuffer(x.size() * 4, false, "x");
        // Outputs go to columns 3.. of rows 5 floats wider than the matrix (the strides and
        // offsets the forward pass uses).
        const uint32_t y_stride = rows + 5;
        auto yb = dev->NewBuffer(nt * y_stride * 4, true, "y");
        ASSERT_TRUE(wb.ok() && xb.ok() && yb.ok());
        ASSERT_TRUE(dev->Upload(**wb, 0, w.data(), w.size()).ok());
        ASSERT_TRUE(dev->Upload(**xb, 0, x.data(), x.size() * 4).ok());
        float* y = static_cast<float*>((*yb)->mapped());
        std::fill_n(y, nt * y_stride, -1.0f);
        ASSERT_TRUE((*stream)->Begin().ok());
        // Two records of the rows (a matrix split into parts past one binding), the second
        // starting at a row that is not a tile's first.
        const int64_t first = 20;
        MulPush p{0, static_cast<uint32_t>(cols), nt, static_cast<uint32_t>(cols), y_stride, 3,
                  static_cast<uint32_t>(row_bytes)};
        RecordMul(**stream, MulKernel(t), **wb, **xb, **yb, p, first, k.path);
        p.row_base = first;
        RecordMul(**stream, MulKernel(t), **wb, **xb, **yb, p, rows - first, k.path);
        ASSERT_TRUE((*stream)->Submit().ok());
        for (uint32_t tk = 0; tk < nt; ++tk) {
          // Nothing written outside the outputs.
          for (const int64_t c : {int64_t{0}, int64_t{1}, int64_t{2}, rows + 3, rows + 4}) {
            ASSERT_EQ(y[tk * y_stride + c], -1.0f) << "token " << tk << " column " << c;
          }
          for (int64_t r = 0; r < rows; ++r) {
            double want = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              want += static_cast<double>(deq[r * cols + c]) * x[tk * cols + c];
              mag += std::fabs(static_cast<double>(deq[r * cols + c]) * x[tk * cols + c]);
            }
            ASSERT_NEAR(y[tk * y_stride + 3 + r], want, 1e-5 * mag + 1e-6) << "token " << tk << " row " << r;
          }
        }
        // Accumulating (a residual): the same products added to what y holds, so twice them.
        const std::vector<float> once(y, y + nt * y_stride);
        ASSERT_TRUE((*stream)->Begin().ok());
        p.accumulate = 1;
        p.row_base = 0;
        RecordMul(**stream, MulKernel(t), **wb, **xb, **yb, p, rows, k.path);
        ASSERT_TRUE((*stream)->Submit().ok());
        for (uint32_t tk = 0; tk < nt; ++tk) {
          ASSERT_EQ(y[tk * y_stride + 2], -1.0f);
          for (int64_t r = 0; r < rows; ++r) {
            const float o = once[tk * y_stride + 3 + r];
            ASSERT_EQ(y[tk * y_stride + 3 + r], o + o) << "accumulating, token " << tk << " row " << r;
          }
        }
      }
    }
  }
}

// The expert products (mul built with MUL_ID): experts split over two buffers as a model's
// expert tensor is when it exceeds one binding; each (token, choice) pair takes its own expert's
// rows and its token's activations (x_div pairs per token); a pair whose expert is in the other
// buffer is left to that buffer's dispatch.
TEST(GpuDeviceTest, ExpertProductsTakeEachPairsOwnExpert) {
  using quant::TensorType;
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  Result<std::unique_ptr<Stream>> stream = dev->NewStream();
  ASSERT_TRUE(stream.ok());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const int64_t rows = 19, cols = 256, n_expert = 3, k = 2, n_tok = 3;
  for (TensorType t : {TensorType::kQ4_K, TensorType::kQ8_0, TensorType::kF16}) {
    const quant::TypeOps* ops = quant::ReferenceOps(t);
    SCOPED_TRACE(static_cast<int>(t));
    const size_t row_bytes = quant::RowBytes(t, cols);
    std::vector<uint8_t> w(n_expert * rows * row_bytes);
    std::vector<float> deq(n_expert * rows * cols), src(cols);
    for (int64_t r = 0; r < n_expert * rows; ++r) {
      for (float& v : src) v = normal(rng);
      ops->quantize_row(src.data(), &w[r * row_bytes], cols);
      ops->dequantize_row(&w[r * row_bytes], &deq[r * cols], cols);
    }
    std::vector<float> x(n_tok * cols);
    for (float& v : x) v = normal(rng);
    const std::vector<int32_t> ids = {2, 0, 1, 2, 0, 1};  // token t's choices: ids[t * k ..]
    const uint64_t part0 = 2 * rows * row_bytes, part1 = rows * row_bytes;
    auto w0 = dev->NewBuffer(part0, false, "experts 0-1");
    auto w1 = dev->NewBuffer(part1, false, "expert 2");
    auto xb = dev->NewBuffer(x.size() * 4, false, "x");
    auto ib = dev->NewBuffer(ids.size() * 4, false, "ids");
    auto yb = dev->NewBuffer(n_tok * k * rows * 4, true, "y");
    ASSERT_TRUE(w0.ok() && w1.ok() && xb.ok() && ib.ok() && yb.ok());
    ASSERT_TRUE(dev->Upload(**w0, 0, w.data(), part0).ok());
    ASSERT_TRUE(dev->Upload(**w1, 0, w.data() + part0, part1).ok());
    ASSERT_TRUE(dev->Upload(**xb, 0, x.data(), x.size() * 4).ok());
    ASSERT_TRUE(dev->Upload(**ib, 0, ids.data(), ids.size() * 4).ok());
    ASSERT_TRUE((*stream)->Begin().ok());
    for (auto [buf, first, count] : {std::tuple{w0->get(), 0u, 2u}, std::tuple{w1->get(), 2u, 1u}}) {
      MulPush p;
      p.cols = cols;
      p.nt = n_tok * k;
      p.x_stride = cols;
      p.y_stride = rows;
      p.row_bytes = static_cast<uint32_t>(row_bytes);
      p.expert_rows = rows;
      p.expert_first = first;
      p.experts = count;
      p.x_div = k;
      const Kernel kernel = MulKernel(t, /*expert=*/true);
      (*stream)->Dispatch(kernel, {buf, xb->get(), yb->get(), ib->get()}, p, rows, n_tok * k);
    }
    ASSERT_TRUE((*stream)->Submit().ok());
    const float* y = static_cast<const float*>((*yb)->mapped());
    for (int64_t pair = 0; pair < n_tok * k; ++pair) {
      const int64_t e = ids[pair], tok = pair / k;
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double term = static_cast<double>(deq[(e * rows + r) * cols + c]) * x[tok * cols + c];
          want += term;
          mag += std::fabs(term);
        }
        ASSERT_NEAR(y[pair * rows + r], want, 1e-5 * mag + 1e-6) << "pair " << pair << " row " << r;
      }
    }
  }
}

// RMSNorm and the gated activation built to round what they write (kRmsNormQ8_*, kActMulQ8_*)
// give the bits of the plain kernel followed by act_round, and those are the CPU's quantized
// activations (its reference quantization, dequantized): blocks of 32 for Q8_0, 256 for Q8_K,
// with blocks of very different sizes and one of zeros.
TEST(GpuDeviceTest, FusedRoundingsGiveTheBitsOfActRound) {
  using quant::TensorType;
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  Result<std::unique_ptr<Stream>> stream = dev->NewStream();
  ASSERT_TRUE(stream.ok());
  struct NormPush {
    uint32_t len, x_stride, y_stride;
    float eps;
    uint32_t row0;
  };
  struct ActPush {
    uint32_t n, gelu;
  };
  struct RoundPush {
    uint32_t blocks;
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const uint32_t rows = 3, len = 512, n = rows * len;
  std::vector<float> x(n), w(len), u(n);
  for (uint32_t i = 0; i < n; ++i) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / 32 % 7) - 3);
  std::fill(x.begin() + len, x.begin() + len + 256, 0.0f);  // a block of zeros in row 1
  for (float& v : w) v = 0.5f + std::fabs(normal(rng));
  for (float& v : u) v = normal(rng);
  auto buf = [&](const char* what) {
    Result<std::unique_ptr<Buffer>> b = dev->NewBuffer(n * 4, true, what);
    EXPECT_TRUE(b.ok());
    return b.ok() ? std::move(*b) : nullptr;
  };
  std::unique_ptr<Buffer> xb = buf("x"), wb = buf("w"), ub = buf("u"), y0 = buf("y0"), r0 = buf("r0"), y1 = buf("y1"),
                          r1 = buf("r1");
  ASSERT_TRUE(xb && wb && ub && y0 && r0 && y1 && r1);
  auto f = [](const std::unique_ptr<Buffer>& b) { return static_cast<float*>(b->mapped()); };
  std::copy(x.begin(), x.end(), f(xb));
  std::copy(w.begin(), w.end(), f(wb));
  std::copy(u.begin(), u.end(), f(ub));
  auto same_bits = [&](const char* what) {
    EXPECT_EQ(std::memcmp(f(y0), f(y1), n * 4), 0) << what << ": the outputs differ";
    EXPECT_EQ(std::memcmp(f(r0), f(r1), n * 4), 0) << what << ": the roundings differ";
  };
  for (const TensorType act : {TensorType::kQ8_0, TensorType::kQ8_K}) {
    const bool k = act == TensorType::kQ8_K;
    SCOPED_TRACE(k ? "q8_k" : "q8_0");
    const uint32_t blocks = n / (k ? 256 : 32);
    const Kernel round = k ? Kernel::kActRoundQ8_K : Kernel::kActRoundQ8_0;
    const NormPush np{len, len, len, 1e-5f, 0};
    ASSERT_TRUE((*stream)->Begin().ok());
    (*stream)->Dispatch(Kernel::kRmsNorm, {xb.get(), wb.get(), y0.get()}, np, rows);
    (*stream)->Dispatch(round, {y0.get(), r0.get()}, RoundPush{blocks}, (blocks + 63) / 64);
    (*stream)->Dispatch(k ? Kernel::kRmsNormQ8_K : Kernel::kRmsNormQ8_0, {xb.get(), wb.get(), y1.get(), r1.get()}, np,
                        rows);
    ASSERT_TRUE((*stream)->Submit().ok());
    same_bits("rmsnorm");
    // act_round against the CPU: its quantization dequantized, exact here but for a quotient a
    // driver's division may round differently (one step d of the block at most).
    const quant::TypeOps* ops = quant::ReferenceOps(act);
    const uint32_t bl = k ? 256 : 32;
    std::vector<uint8_t> q(quant::RowBytes(act, len));
    std::vector<float> cpu(len);
    int exact = 0;
    for (uint32_t r = 0; r < rows; ++r) {
      ops->quantize_row(f(y0) + r * len, q.data(), len);
      ops->dequantize_row(q.data(), cpu.data(), len);
      for (uint32_t b = 0; b < len; b += bl) {
        float d = 0;  // the block's largest value is 127 d
        for (uint32_t i = b; i < b + bl; ++i) d = std::max(d, std::fabs(cpu[i]) / 127);
        for (uint32_t i = b; i < b + bl; ++i) {
          const float got = f(r0)[r * len + i];
          exact += got == cpu[i];
          ASSERT_LE(std::fabs(got - cpu[i]), d * 1.001f) << "row " << r << " element " << i;
        }
      }
    }
    EXPECT_GE(exact, static_cast<int>(n) * 99 / 100);
    for (uint32_t i = len; i < len + 256; ++i) ASSERT_EQ(f(r0)[i], 0.0f);  // the block of zeros
    for (const uint32_t gelu : {0u, 1u}) {
      SCOPED_TRACE(gelu ? "gelu" : "silu");
      std::copy(x.begin(), x.end(), f(y0));  // gate, in place
      std::copy(x.begin(), x.end(), f(y1));
      ASSERT_TRUE((*stream)->Begin().ok());
      (*stream)->Dispatch(Kernel::kActMul, {y0.get(), ub.get()}, ActPush{n, gelu}, (n + 255) / 256);
      (*stream)->Dispatch(round, {y0.get(), r0.get()}, RoundPush{blocks}, (blocks + 63) / 64);
      (*stream)->Dispatch(k ? Kernel::kActMulQ8_K : Kernel::kActMulQ8_0, {y1.get(), ub.get(), r1.get()}, ActPush{n, gelu},
                          1);
      ASSERT_TRUE((*stream)->Submit().ok());
      same_bits("act_mul");
      for (uint32_t i = 0; i < n; ++i) {
        const float g = x[i], a = gelu ? g / (1 + std::exp(-2 * 0.7978845608f * g * (1 + 0.044715f * g * g)))
                                       : g / (1 + std::exp(-g));
        ASSERT_NEAR(f(y0)[i], a * u[i], 1e-5f * (1 + std::fabs(a * u[i]))) << i;
      }
    }
  }
}

// A stack of matrices in one buffer (MulPush::split1; queries, keys and values): one record sends
// each matrix's products to its own output, with the row kernel and the tiled one, for a stack
// of three and of two; nothing is written past an output's rows.
TEST(GpuDeviceTest, AStackOfMatricesSendsEachProductToItsOwnOutput) {
  using quant::TensorType;
  std::unique_ptr<Device> dev = OpenFirst();
  ASSERT_NE(dev, nullptr);
  Result<std::unique_ptr<Stream>> stream = dev->NewStream();
  ASSERT_TRUE(stream.ok());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const TensorType t = TensorType::kQ4_K;
  const quant::TypeOps* ops = quant::ReferenceOps(t);
  const int64_t cols = 512, rows[3] = {37, 20, 20}, all = 77;
  const size_t row_bytes = quant::RowBytes(t, cols);
  std::vector<uint8_t> w(all * row_bytes);
  std::vector<float> deq(all * cols), src(cols);
  for (int64_t r = 0; r < all; ++r) {
    for (float& v : src) v = normal(rng);
    ops->quantize_row(src.data(), &w[r * row_bytes], cols);
    ops->dequantize_row(&w[r * row_bytes], &deq[r * cols], cols);
  }
  auto wb = dev->NewBuffer(w.size(), false, "w");
  ASSERT_TRUE(wb.ok());
  ASSERT_TRUE(dev->Upload(**wb, 0, w.data(), w.size()).ok());
  for (const int count : {3, 2}) {
    for (const uint32_t nt : {1u, 70u}) {
      SCOPED_TRACE("a stack of " + std::to_string(count) + ", tokens " + std::to_string(nt));
      const int64_t stacked = count == 3 ? all : rows[0] + rows[1];
      std::vector<float> x(nt * cols);
      for (float& v : x) v = normal(rng);
      auto xb = dev->NewBuffer(x.size() * 4, false, "x");
      ASSERT_TRUE(xb.ok());
      ASSERT_TRUE(dev->Upload(**xb, 0, x.data(), x.size() * 4).ok());
      // Output o: rows[o] + 1 floats a token (the last one must stay untouched).
      const uint32_t y0_stride = static_cast<uint32_t>(rows[0] + 1), split_stride = static_cast<uint32_t>(rows[1] + 1);
      std::unique_ptr<Buffer> ys[3];
      for (int o = 0; o < 3; ++o) {
        auto b = dev->NewBuffer(nt * (rows[o] + 1) * 4, true, "y");
        ASSERT_TRUE(b.ok());
        ys[o] = std::move(*b);
        std::fill_n(static_cast<float*>(ys[o]->mapped()), nt * (rows[o] + 1), -1.0f);
      }
      MulPush p{0, static_cast<uint32_t>(cols), nt, static_cast<uint32_t>(cols), y0_stride, 0,
                static_cast<uint32_t>(row_bytes)};
      p.split1 = static_cast<uint32_t>(rows[0]);
      p.split2 = static_cast<uint32_t>(count == 3 ? rows[0] + rows[1] : stacked);
      p.split_stride = split_stride;
      ASSERT_TRUE((*stream)->Begin().ok());
      RecordMul(**stream, MulKernel(t), **wb, **xb, *ys[0], p, stacked, MulPath::kAuto, ys[1].get(),
                count == 3 ? ys[2].get() : nullptr);
      ASSERT_TRUE((*stream)->Submit().ok());
      int64_t first = 0;
      for (int o = 0; o < 3; ++o) {
        const float* y = static_cast<const float*>(ys[o]->mapped());
        const int64_t stride = rows[o] + 1;
        for (uint32_t tk = 0; tk < nt; ++tk) {
          ASSERT_EQ(y[tk * stride + rows[o]], -1.0f) << "output " << o << " token " << tk << ": past its rows";
          for (int64_t r = 0; r < rows[o]; ++r) {
            if (o == 2 && count == 2) {
              ASSERT_EQ(y[tk * stride + r], -1.0f) << "a stack of two wrote a third output";
              continue;
            }
            double want = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double term = static_cast<double>(deq[(first + r) * cols + c]) * x[tk * cols + c];
              want += term;
              mag += std::fabs(term);
            }
            ASSERT_NEAR(y[tk * stride + r], want, 1e-5 * mag + 1e-6) << "output " << o << " token " << tk << " row " << r;
          }
        }
        first += rows[o];
      }
    }
  }
}

}  // namespace
}  // namespace tandem::gpu
