// Decode allocates nothing per token once warm: counts every operator new in this process while
// single-token decode steps run on a reference model.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "model/forward.h"
#include "test_support.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tandem {
namespace {

// Both attention algorithms, with F16 and Q8_0 KV caches; a dense model, one with sliding-window
// layers and one with experts.
TEST(DecodeAllocTest, DecodeStepsAllocateNothingOnceWarm) {
  for (const char* name : {"tiny-q4_k_m.gguf", "tiny-gemma3-q4_k_m.gguf", "tiny-qwen3moe-q4_k_m.gguf"}) {
  SCOPED_TRACE(name);
  const auto path = testing::SharedDir() / "reference/models" / name;
  TANDEM_REQUIRE_SHARED(path);
  Result<model::Model> m = model::Model::Load(path.string());
  ASSERT_TRUE(m.ok());
  for (bool flash : {false, true}) {
    for (quant::TensorType cache : {quant::TensorType::kF16, quant::TensorType::kQ8_0}) {
      SCOPED_TRACE(std::string(flash ? "flash" : "standard") +
                   (cache == quant::TensorType::kF16 ? ", f16 cache" : ", q8_0 cache"));
      model::Context ctx(*m, 128, 2, model::ContextOptions{flash, cache, cache});
      model::Batch b;
      b.Add(1, 0, 0, true);
      ASSERT_TRUE(ctx.Decode(b).ok());  // warm-up: buffers grow to their decode size here
      b.Clear();
      b.Add(5, 1, 0, true);
      ASSERT_TRUE(ctx.Decode(b).ok());
      const long before = g_allocations.load();
      for (int32_t pos = 2; pos < 40; ++pos) {
        b.Clear();  // keeps the batch's capacity
        b.Add(pos % 500, pos, 0, true);
        ASSERT_TRUE(ctx.Decode(b).ok());
      }
      EXPECT_EQ(g_allocations.load() - before, 0) << "allocations during 38 warm decode steps";
    }
  }
  }
}

}  // namespace
}  // namespace tandem
