// The GPU layers (model/gpu_layers.h) against the CPU path on the reference models, on the first
// Vulkan device (lavapipe in CI): -ngl splits inside one node, several sequences and a sliding
// window pool that grows, and what the GPU path refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "model/forward.h"
#include "synth/make_model.h"
#include "synth/model_shapes.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::MaxKl;
using testing::SharedDir;

std::shared_ptr<gpu::Device> TestGpu() {
  static std::shared_ptr<gpu::Device> device = [] {
    Result<gpu::DeviceChoice> c = gpu::ChooseDevice("Vulkan0");
    return c.ok() ? c->device : nullptr;
  }();
  return device;
}

std::optional<model::Model> Load(const char* name) {
  Result<model::Model> m = model::Model::Load((SharedDir() / "reference/models" / name).string());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return std::nullopt;
  return std::move(*m);
}

// Every batch's logits, in order, from a fresh context.
std::vector<float> RunBatches(const model::Model& m, const model::ContextOptions& o, const std::vector<model::Batch>& batches,
                       int64_t n_ctx = 256, uint64_t* replays = nullptr) {
  model::Context ctx(m, n_ctx, 2, o);
  struct Count {
    const model::Context& c;
    uint64_t* out;
    ~Count() {
      if (out != nullptr) *out = c.gpu_replays();
    }
  } count{ctx, replays};
  EXPECT_TRUE(ctx.status().ok()) << ctx.status().ToString();
  std::vector<float> out;
  for (const model::Batch& b : batches) {
    Status st = ctx.Decode(b);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return out;
    out.insert(out.end(), ctx.logits(), ctx.logits() + ctx.n_logits() * m.params().n_vocab);
  }
  return out;
}

// A 24-token prompt, then 12 decode steps of fixed tokens: past tiny-gemma3's window of 16.
std::vector<model::Batch> PromptAndSteps(int64_t vocab) {
  std::vector<model::Batch> batches(1);
  for (int i = 0; i < 24; ++i) batches[0].Add((i * 37 + 1) % vocab, i, 0, true);
  for (int i = 24; i < 36; ++i) {
    model::Batch b;
    b.Add((i * 11 + 5) % vocab, i, 0, true);
    batches.push_back(b);
  }
  return batches;
}

// -ngl 1, half and all-but-one of the layers on the GPU, the rest on the CPU (every decode step
// but the first replaying the recorded command buffer): the logits of the CPU alone within the reference README's bound for float weights (max KL 1e-3), for llama,
// qwen2 (biases), qwen3 (per-head norms), gemma3 (sliding window, post norms, GELU) and qwen3moe
// (experts; no router near-tie on these F16 weights, the README says).
TEST(GpuModelTest, NglSplitsInsideOneNodeGiveTheCpuLogits) {
  ASSERT_NE(TestGpu(), nullptr) << "no usable Vulkan device (scripts/install-deps.sh installs lavapipe)";
  for (const char* name : {"tiny-f16.gguf", "tiny-qwen2-f16.gguf", "tiny-qwen3-f16.gguf", "tiny-gemma3-f16.gguf",
                           "tiny-qwen3moe-f16.gguf"}) {
    TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models" / name);
    SCOPED_TRACE(name);
    std::optional<model::Model> m = Load(name);
    ASSERT_TRUE(m.has_value());
    const int64_t nl = m->params().n_layer;
    const std::vector<model::Batch> batches = PromptAndSteps(m->params().n_vocab);
    const std::vector<float> cpu = RunBatches(*m, {}, batches);
    for (int64_t ngl : {int64_t{1}, nl / 2, nl - 1}) {
      model::ContextOptions o;
      o.device = TestGpu();
      o.gpu_layers = ngl;
      {
        model::Context probe(*m, 256, 2, o);
        EXPECT_EQ(probe.gpu_layers(), ngl);
      }
      uint64_t replays = 0;
      const double kl = MaxKl(cpu, RunBatches(*m, o, batches, 256, &replays), m->params().n_vocab);
      std::printf("%s -ngl %lld: max KL %.2e against the CPU\n", name, static_cast<long long>(ngl), kl);
      // Every decode step after the first replays the recording of the one before.
      EXPECT_EQ(replays, batches.size() - 2);
      EXPECT_LE(kl, 1e-3) << "-ngl " << ngl;
      EXPECT_GT(kl, 0.0) << "-ngl " << ngl << ": bit-equal to the CPU, so the GPU did not compute";
    }
  }
}

// A cache of one type for keys and another for values (one dispatch stores both, rope_store.comp):
// both orders of F16 and Q8_0, every layer on the GPU, against the CPU with the same cache types
// (which round the rows the same way), within the float-weight bound.
TEST(GpuModelTest, MixedCacheTypesGiveTheCpuLogits) {
  ASSERT_NE(TestGpu(), nullptr) << "no usable Vulkan device (scripts/install-deps.sh installs lavapipe)";
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models/tiny-f16.gguf");
  std::optional<model::Model> m = Load("tiny-f16.gguf");
  ASSERT_TRUE(m.has_value());
  const std::vector<model::Batch> batches = PromptAndSteps(m->params().n_vocab);
  using quant::TensorType;
  for (auto [k, v] : {std::pair{TensorType::kF16, TensorType::kQ8_0}, std::pair{TensorType::kQ8_0, TensorType::kF16}}) {
    SCOPED_TRACE(std::string("K ") + (k == TensorType::kF16 ? "f16" : "q8_0") + ", V " +
                 (v == TensorType::kF16 ? "f16" : "q8_0"));
    model::ContextOptions o;
    o.type_k = k;
    o.type_v = v;
    const std::vector<float> cpu = RunBatches(*m, o, batches);
    o.device = TestGpu();
    o.gpu_layers = m->params().n_layer;
    const double kl = MaxKl(cpu, RunBatches(*m, o, batches), m->params().n_vocab);
    std::printf("mixed cache: max KL %.2e against the CPU\n", kl);
    EXPECT_LE(kl, 1e-3);
    EXPECT_GT(kl, 0.0) << "bit-equal to the CPU, so the GPU did not compute";
  }
}

// Twelve sequences in one batch, 60 tokens each, through every layer on the GPU: more cells than
// tiny-gemma3's window pool starts with (16 + 32 + 512), so it grows (keeping every row), and
// each token attends to its own sequence only. Then decode steps mixing the sequences. The
// logits are the CPU's within the float bound.
TEST(GpuModelTest, ManySequencesAndAGrowingWindowPool) {
  ASSERT_NE(TestGpu(), nullptr);
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models/tiny-gemma3-f16.gguf");
  std::optional<model::Model> m = Load("tiny-gemma3-f16.gguf");
  ASSERT_TRUE(m.has_value());
  const int64_t V = m->params().n_vocab;
  std::vector<model::Batch> batches(1);
  for (int i = 0; i < 60; ++i) {
    for (int s = 0; s < 12; ++s) batches[0].Add((i * 13 + s * 7 + 1) % V, i, s, i % 20 == 19);
  }
  for (int step = 0; step < 3; ++step) {
    model::Batch b;
    for (int s = 0; s < 12; s += 1 + step) b.Add((s * 5 + step) % V, 60 + step, s, true);
    batches.push_back(b);
  }
  const std::vector<float> cpu = RunBatches(*m, {}, batches, 1024);
  model::ContextOptions o;
  o.device = TestGpu();
  o.gpu_layers = m->params().n_layer;
  const double kl = MaxKl(cpu, RunBatches(*m, o, batches, 1024), V);
  std::printf("12 sequences: max KL %.2e against the CPU\n", kl);
  EXPECT_LE(kl, 1e-3);
}

// qwen2moe (no reference file: a small random-weight one made by synth, F32 so that neither path
// rounds activations): routed experts not renormalised and the shared expert with its sigmoid
// gate, every layer on the GPU against the CPU within the float bound.
TEST(GpuModelTest, Qwen2MoeSharedExpertMatchesTheCpu) {
  ASSERT_NE(TestGpu(), nullptr);
  std::optional<synth::ModelShape> shape = synth::FindShape("qwen1.5-moe-a2.7b");
  ASSERT_TRUE(shape.has_value());
  shape->n_layer = 2;
  shape->n_vocab = 512;
  shape->n_embd = 256;
  shape->n_head = 4;
  shape->n_head_kv = 4;
  shape->head_dim = 64;
  shape->n_expert = 8;
  shape->n_ff_exp = 64;
  shape->n_ff_shexp = 128;
  const std::string path = ::testing::TempDir() + "tandem_gpu_qwen2moe_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(synth::MakeModel({*shape, synth::FileType::kF32, 5}, path).ok());
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_GT(m->params().n_ff_shexp, 0);
  const std::vector<model::Batch> batches = PromptAndSteps(m->params().n_vocab);
  const std::vector<float> cpu = RunBatches(*m, {}, batches);
  model::ContextOptions o;
  o.device = TestGpu();
  o.gpu_layers = 99;
  const double kl = MaxKl(cpu, RunBatches(*m, o, batches), m->params().n_vocab);
  std::printf("qwen2moe: max KL %.2e against the CPU\n", kl);
  EXPECT_LE(kl, 1e-3);
  EXPECT_GT(kl, 0.0);
  std::remove(path.c_str());
}

// What the GPU path refuses, as values: an F32 cache with an explicit -ngl (every Forward then
// returns the error); with the default -1 such a context stays on the CPU.
TEST(GpuModelTest, RefusalsAreErrorsNamingWhy) {
  ASSERT_NE(TestGpu(), nullptr);
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models/tiny-q8_0.gguf");
  std::optional<model::Model> dense = Load("tiny-q8_0.gguf");
  ASSERT_TRUE(dense.has_value());
  model::ContextOptions f32 = {false, quant::TensorType::kF32, quant::TensorType::kF32};
  f32.device = TestGpu();
  f32.gpu_layers = 99;
  model::Context cache(*dense, 64, 1, f32);
  EXPECT_EQ(cache.status().code(), Code::kUnsupported);
  EXPECT_NE(cache.status().message().find("f16 or q8_0"), std::string::npos) << cache.status().ToString();
  model::Batch b;
  b.Add(1, 0, 0, true);
  EXPECT_EQ(cache.Decode(b).code(), Code::kUnsupported);
  f32.gpu_layers = -1;
  model::Context fallback(*dense, 64, 1, f32);
  EXPECT_TRUE(fallback.status().ok());
  EXPECT_EQ(fallback.gpu_layers(), 0);
  EXPECT_TRUE(fallback.Decode(b).ok());
}

// A driver that cannot build a shader, and a device lost in the middle of a sequence (both
// injected: lavapipe does not fail): the step returns an error naming the device and what failed,
// and nothing aborts. A lost device stays lost: later steps fail at once, saying so.
TEST(GpuModelTest, AShaderThatDoesNotBuildOrALostDeviceIsAnErrorOfTheStep) {
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models/tiny-q8_0.gguf");
  std::optional<model::Model> m = Load("tiny-q8_0.gguf");
  ASSERT_TRUE(m.has_value());
  model::Batch b;
  b.Add(1, 0, 0, true);
  model::Batch next;
  next.Add(2, 1, 0, true);
  for (const gpu::Device::Fault fault : {gpu::Device::Fault::kShaderBuild, gpu::Device::Fault::kDeviceLost}) {
    const bool lost = fault == gpu::Device::Fault::kDeviceLost;
    SCOPED_TRACE(lost ? "lost device" : "shader build");
    Result<gpu::DeviceChoice> own = gpu::ChooseDevice("Vulkan0");  // its own Device: the fault stays
    ASSERT_TRUE(own.ok() && own->device != nullptr) << own.status().ToString();
    model::ContextOptions o;
    o.device = own->device;
    o.gpu_layers = 99;
    if (!lost) own->device->InjectFaultForTesting(fault);
    model::Context ctx(*m, 64, 1, o);
    ASSERT_TRUE(ctx.status().ok()) << ctx.status().ToString();  // weights upload without shaders
    if (lost) {
      ASSERT_TRUE(ctx.Decode(b).ok());
      own->device->InjectFaultForTesting(fault);
    }
    Status st = ctx.Decode(lost ? next : b);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(own->device->info().name), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(lost ? "VK_ERROR_DEVICE_LOST" : "building shader"), std::string::npos)
        << st.ToString();
    EXPECT_EQ(own->device->lost(), lost);
    if (lost) {
      st = ctx.Decode(next);
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("the device was lost"), std::string::npos) << st.ToString();
    }
  }
}

// A stage whose weights and KV cache do not fit the device's free memory is refused before any
// upload, with the numbers and what to change; nothing was allocated for it. So is one whose
// layer cache would not fit one binding.
TEST(GpuModelTest, AStageThatDoesNotFitIsRefusedBeforeAnyUpload) {
  ASSERT_NE(TestGpu(), nullptr);
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models/tiny-q8_0.gguf");
  std::optional<model::Model> m = Load("tiny-q8_0.gguf");
  ASSERT_TRUE(m.has_value());
  const uint64_t before = TestGpu()->allocated_bytes();
  // Cells enough that 4 layers' F16 cache (512 bytes per cell and layer) outgrow the device.
  const int64_t n_ctx = static_cast<int64_t>(TestGpu()->info().memory_bytes / (4 * 512)) + 1024;
  model::ContextOptions o;
  o.device = TestGpu();
  o.gpu_layers = 99;
  model::Context ctx(*m, n_ctx, 1, o);
  EXPECT_EQ(ctx.status().code(), Code::kResourceExhausted);
  const std::string msg = ctx.status().message();
  EXPECT_NE(msg.find("layers 0..3 and the head need"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MiB on Vulkan0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-ngl"), std::string::npos) << msg;
  EXPECT_EQ(TestGpu()->allocated_bytes(), before);
  // With the default (-1) as many layers as fit go to the GPU: fewer than all (here none: one
  // layer's cache would also be larger than lavapipe's 128 MiB binding).
  o.gpu_layers = -1;
  model::Context fitted(*m, n_ctx, 1, o);
  EXPECT_TRUE(fitted.status().ok()) << fitted.status().ToString();
  EXPECT_LT(fitted.gpu_layers(), 4);
  const int64_t wide_ctx = static_cast<int64_t>(TestGpu()->info().max_binding_bytes / 256) + 1024;
  if (wide_ctx * 4 * 512 < static_cast<int64_t>(TestGpu()->info().memory_bytes)) {
    o.gpu_layers = 1;
    model::Context wide(*m, wide_ctx, 1, o);
    EXPECT_EQ(wide.status().code(), Code::kResourceExhausted);
    EXPECT_NE(wide.status().message().find("more than one binding"), std::string::npos) << wide.status().ToString();
  }
}

}  // namespace
}  // namespace tandem
