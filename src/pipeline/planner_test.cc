#include "pipeline/planner.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/layout.h"

namespace tandem::pipeline {
namespace {

ModelFootprint Uniform(int layers, uint64_t per_layer) {
  ModelFootprint f;
  f.layer_bytes.assign(layers, per_layer);
  f.embd_bytes = 100;
  f.head_bytes = 200;
  f.kv_bytes.assign(layers, 10);
  return f;
}

TEST(PlannerTest, SplitsByFreeMemory) {
  const std::vector<NodeInfo> nodes = {{"main", 1000000}, {"a", 3000000}};
  Result<Plan> p = MakePlan(Uniform(8, 1000), nodes, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->stages.size(), 2u);
  EXPECT_EQ(p->stages[0].layer_begin, 0);
  EXPECT_EQ(p->stages[0].layer_end, 2);
  EXPECT_EQ(p->stages[1].layer_begin, 2);
  EXPECT_EQ(p->stages[1].layer_end, 8);
  EXPECT_EQ(p->stages[0].weight_bytes, 2 * 1000u + 100);  // + embedding
  EXPECT_EQ(p->stages[1].weight_bytes, 6 * 1000u + 200);  // + head
  EXPECT_EQ(p->stages[1].kv_bytes, 60u);
}

TEST(PlannerTest, TensorSplitAndExplicitLayers) {
  const std::vector<NodeInfo> nodes = {{"main", 0}, {"a", 0}, {"b", 0}};
  PlanOptions o;
  o.tensor_split = {1, 1, 2};
  Result<Plan> p = MakePlan(Uniform(8, 1), nodes, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->stages[0].layer_end, 2);
  EXPECT_EQ(p->stages[1].layer_end, 4);
  EXPECT_EQ(p->stages[2].layer_end, 8);

  o = {};
  o.layers = "0-0,1-5,6-7";
  p = MakePlan(Uniform(8, 1), nodes, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->stages[0].layer_end, 1);
  EXPECT_EQ(p->stages[1].layer_end, 6);
  EXPECT_EQ(p->stages[2].layer_begin, 6);

  for (const char* bad : {"0-3,5-7,8-8", "0-7", "1-3,4-5,6-7", "0-2,3-9,10-11", "a-b,c,d"}) {
    o.layers = bad;
    EXPECT_FALSE(MakePlan(Uniform(8, 1), nodes, o).ok()) << bad;
  }
}

TEST(PlannerTest, EveryNodeGetsALayerEvenWithTinyShares) {
  const std::vector<NodeInfo> nodes = {{"main", 1000}, {"a", 1000000000}, {"b", 1000}};
  Result<Plan> p = MakePlan(Uniform(4, 1), nodes, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const PlannedStage& s : p->stages) EXPECT_GE(s.layer_end - s.layer_begin, 1);
  EXPECT_EQ(p->stages.back().layer_end, 4);
}

TEST(PlannerTest, RefusesAPlanThatDoesNotFitWithTheNumbers) {
  const std::vector<NodeInfo> nodes = {{"main", 1 << 30}, {"small:1", 5000}};
  PlanOptions o;
  o.layers = "0-3,4-7";
  Result<Plan> p = MakePlan(Uniform(8, 2 << 20), nodes, o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kResourceExhausted);
  EXPECT_NE(p.status().message().find("small:1"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("MiB"), std::string::npos);
}

TEST(PlannerTest, MoreNodesThanLayersIsAnError) {
  EXPECT_FALSE(MakePlan(Uniform(2, 1), {{"m", 0}, {"a", 0}, {"b", 0}}, {}).ok());
  EXPECT_FALSE(ParseTensorSplit("1,x").ok());
  Result<std::vector<double>> v = ParseTensorSplit("3,1.5");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 2u);
}

// Nodes with a speed (GB/s) and a round trip (ms), and 1 TiB free each.
std::vector<NodeInfo> Timed(const std::vector<std::pair<double, double>>& speed_rtt) {
  std::vector<NodeInfo> v;
  for (size_t i = 0; i < speed_rtt.size(); ++i) {
    v.push_back({i == 0 ? "main" : "w" + std::to_string(i), uint64_t{1} << 40, speed_rtt[i].first, speed_rtt[i].second});
  }
  return v;
}

int64_t LayersOn(const Plan& p, int node) {
  int64_t n = 0;
  for (const PlannedStage& s : p.stages) {
    if (s.node == node) n += s.layer_end - s.layer_begin;
  }
  return n;
}

PlanOptions Auto() {
  PlanOptions o;
  o.mode = PlanMode::kAuto;
  return o;
}

// Each stage's predicted time: its bytes over the node's speed, plus half the round trip into
// a worker (and half again back from the last one).
TEST(PlannerTest, PredictsEachStagesMilliseconds) {
  // 8 layers of 10 MB, head 200 bytes; 10 GB/s = 1 ms per 10 MB.
  Result<Plan> p = MakePlan(Uniform(8, 10000000), Timed({{10, 0}, {10, 4}}), {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->stages.size(), 2u);
  EXPECT_NEAR(p->stages[0].compute_ms, 4.0, 1e-3);
  EXPECT_EQ(p->stages[0].link_ms, 0);
  EXPECT_NEAR(p->stages[1].compute_ms, 4.0, 1e-3);
  EXPECT_NEAR(p->stages[1].link_ms, 4.0, 1e-9);  // 2 in, 2 back
  EXPECT_NEAR(p->predicted_ms(), 12.0, 1e-3);
  EXPECT_EQ(p->how, "memory");
  EXPECT_NE(p->ToString(Timed({{10, 0}, {10, 4}})).find("predicted 12.00 ms per token"), std::string::npos);
}

// A worker half as fast gets fewer layers than the memory plan gives it, or none; a worker
// behind a 20 ms link is left out; nodes alike on a fast link keep the memory plan.
TEST(PlannerTest, AutoPlacesBySpeedAndLeavesOutNodesThatDoNotPay) {
  const ModelFootprint m = Uniform(12, 10000000);
  const std::vector<NodeInfo> slow = Timed({{10, 0}, {10, 0.1}, {5, 0.1}});
  Result<Plan> mem = MakePlan(m, slow, {});
  Result<Plan> fast = MakePlan(m, slow, Auto());
  ASSERT_TRUE(mem.ok() && fast.ok());
  EXPECT_EQ(LayersOn(*mem, 2), 4);
  EXPECT_LT(LayersOn(*fast, 2), LayersOn(*mem, 2));
  EXPECT_EQ(fast->how, "speed");
  EXPECT_LT(fast->predicted_ms(), 0.9 * mem->predicted_ms());

  const std::vector<NodeInfo> far = Timed({{10, 0}, {10, 0.1}, {10, 40}});
  Result<Plan> p = MakePlan(m, far, Auto());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(LayersOn(*p, 2), 0);
  EXPECT_NE(p->ToString(far).find("not used (slower with them): "), std::string::npos) << p->ToString(far);
  EXPECT_NE(p->ToString(far).find("w2"), std::string::npos);

  const std::vector<NodeInfo> alike = Timed({{10, 0}, {10, 0.1}, {10, 0.1}});
  Result<Plan> same = MakePlan(m, alike, Auto());
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->how, "memory");  // within 10%: balanced, every worker used
  EXPECT_EQ(same->stages.size(), 3u);
}

// The speed plan respects memory: a fast main node that cannot hold the model keeps what fits
// and the rest goes to the workers; explicit splits and --plan memory never move by speed.
TEST(PlannerTest, AutoStaysWithinMemoryAndManualPlansWin) {
  const ModelFootprint m = Uniform(10, 1000);
  std::vector<NodeInfo> nodes = Timed({{100, 0}, {10, 0.1}, {10, 0.1}});
  nodes[0].free_memory = 4 * 1010 + 100 + 1000;  // room for 4 layers (+ KV, embedding, slack)
  Result<Plan> p = MakePlan(m, nodes, Auto());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(LayersOn(*p, 0), 4);
  EXPECT_EQ(LayersOn(*p, 1) + LayersOn(*p, 2), 6);
  PlanOptions split = Auto();
  split.tensor_split = {1, 1, 1};
  nodes[0].free_memory = uint64_t{1} << 40;
  Result<Plan> q = MakePlan(m, nodes, split);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->how, "tensor split");
  EXPECT_EQ(q->stages.size(), 3u);
  Result<Plan> r = MakePlan(m, nodes, PlanOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->how, "memory");
}

}  // namespace
}  // namespace tandem::pipeline

namespace tandem::pipeline {
namespace {

// The plan's KV bytes follow the cache types (main before this change counted F16 for -ctk q8_0
// too), and its stages' weights add up to the file's tensors, shared ones counted on each stage.
TEST(PlannerTest, FootprintFollowsTheCacheTypesAndTheLayout) {
  const auto path = std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/tiny-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared reference model at " << path;
  Result<gguf::GgufFile> f = gguf::GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok());
  Result<model::ModelParams> p = model::ReadParams(*f);
  ASSERT_TRUE(p.ok());
  const ModelFootprint f16 = Footprint(*f, *p, 256);
  const ModelFootprint q8 = Footprint(*f, *p, 256, quant::TensorType::kQ8_0, quant::TensorType::kQ8_0);
  ASSERT_EQ(f16.kv_bytes.size(), static_cast<size_t>(p->n_layer));
  for (int64_t il = 0; il < p->n_layer; ++il) {
    EXPECT_EQ(f16.kv_bytes[il], model::KvCacheBytes(*p, 256, il, il + 1, quant::TensorType::kF16, quant::TensorType::kF16));
    EXPECT_EQ(q8.kv_bytes[il], model::KvCacheBytes(*p, 256, il, il + 1, quant::TensorType::kQ8_0, quant::TensorType::kQ8_0));
    EXPECT_LT(q8.kv_bytes[il] * 10, f16.kv_bytes[il] * 6);  // 34/64 of F16
  }
  Result<Plan> plan = MakePlan(q8, {{"main", 1ull << 40}, {"w", 1ull << 40}}, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  uint64_t weights = 0;
  for (const PlannedStage& s : plan->stages) {
    EXPECT_EQ(s.kv_bytes, q8.kv_bytes[0] * (s.layer_end - s.layer_begin));
    weights += s.weight_bytes;
    const model::StageTensors t = model::TensorsOfStage(*f, s.layer_begin, s.layer_end, s.node == 0,
                                                        s.layer_end == p->n_layer);
    EXPECT_EQ(s.weight_bytes, t.bytes) << "stage " << s.node;
  }
  EXPECT_GE(weights, model::TensorsOfStage(*f, 0, p->n_layer, true, true).bytes);
}

}  // namespace
}  // namespace tandem::pipeline

namespace tandem::pipeline {
namespace {

// A worker's GPU memory counts as its memory (its stage's last layers go there): the memory
// plan splits by host + GPU memory, a stage that fits only with the GPU is placed, and the speed
// plan reads the bytes on the GPU at the GPU's measured speed.
TEST(PlannerTest, GpuMemoryAndSpeedCount) {
  NodeInfo main{"main", 1000000}, a{"a", 1000000};
  a.gpu_memory = 2000000;
  Result<Plan> p = MakePlan(Uniform(8, 1000), {main, a}, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->stages[0].layer_end, 2);  // 1 : 3, as host 1 + GPU 2 against 1
  // 6000 bytes of layers, 3000 of host memory: fits only with the GPU.
  NodeInfo small{"small", 3000};
  small.gpu_memory = 10000;
  PlanOptions o;
  o.layers = "0-1,2-7";
  EXPECT_TRUE(MakePlan(Uniform(8, 1000), {main, small}, o).ok());
  small.gpu_memory = 0;
  Result<Plan> refused = MakePlan(Uniform(8, 1000), {main, small}, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("does not fit"), std::string::npos) << refused.status().ToString();
  // Speed: the main node's CPU reads 1 GB/s, the worker's GPU 100 GB/s and holds everything: the
  // fastest plan gives the worker all but the main node's one layer, predicting its stage at the
  // GPU's speed.
  NodeInfo cpu{"main", 1ull << 40, 1.0};
  NodeInfo gpu_node{"gpu", 1ull << 40, 1.0, 0.1};
  gpu_node.gpu_memory = 1ull << 40;
  gpu_node.gpu_gbps = 100.0;
  PlanOptions fast;
  fast.mode = PlanMode::kAuto;
  Result<Plan> f = MakePlan(Uniform(8, 1000000), {cpu, gpu_node}, fast);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->stages.size(), 2u);
  EXPECT_EQ(f->stages[0].layer_end, 1);
  EXPECT_NEAR(f->stages[1].compute_ms, (7 * 1000000.0 + 200) / (100.0 * 1e6), 1e-9);
}

}  // namespace
}  // namespace tandem::pipeline
