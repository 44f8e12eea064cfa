#include "pipeline/planner.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>
#include <tuple>

#include "model/layout.h"

namespace tandem::pipeline {
namespace {

std::string MiB(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", b / 1048576.0);
  return s;
}

Result<std::vector<std::pair<int64_t, int64_t>>> ParseLayers(const std::string& s, int64_t n_layer) {
  std::vector<std::pair<int64_t, int64_t>> out;
  std::stringstream ss(s);
  std::string part;
  int64_t next = 0;
  while (std::getline(ss, part, ',')) {
    int64_t a = -1, b = -1;
    char dash = 0, extra = 0;
    if (std::sscanf(part.c_str(), "%" SCNd64 " %c %" SCNd64 " %c", &a, &dash, &b, &extra) != 3 || dash != '-') {
      return Status::InvalidArgument("--layers: '" + part + "' is not FIRST-LAST");
    }
    if (a != next || b < a || b >= n_layer) {
      return Status::InvalidArgument("--layers: ranges must be contiguous from 0 to " +
                                     std::to_string(n_layer - 1) + " without gaps; '" + part +
                                     "' does not follow");
    }
    out.emplace_back(a, b + 1);
    next = b + 1;
  }
  if (next != n_layer) {
    return Status::InvalidArgument("--layers covers layers 0.." + std::to_string(next - 1) + " of " +
                                   std::to_string(n_layer));
  }
  return out;
}

// Bytes a stage holds: its layers, the shared tensors, the embedding (first stage), the head
// (last stage).
uint64_t StageBytes(const ModelFootprint& m, int64_t begin, int64_t end, bool first, bool last) {
  uint64_t b = m.shared_bytes;
  for (int64_t l = begin; l < end; ++l) b += m.layer_bytes[l];
  if (first) b += m.embd_bytes;
  if (last) b += m.head_bytes;
  return b;
}

uint64_t KvBytes(const ModelFootprint& m, int64_t begin, int64_t end) {
  uint64_t b = 0;
  for (int64_t il = begin; il < end && il < static_cast<int64_t>(m.kv_bytes.size()); ++il) b += m.kv_bytes[il];
  return b;
}

// Bytes a decode step reads there: every weight but the embedding (one row of it).
uint64_t DecodeBytes(const ModelFootprint& m, int64_t begin, int64_t end, bool last) {
  return StageBytes(m, begin, end, false, last);
}

// A node's memory for weights and KV cache: its host memory and its GPU's.
uint64_t NodeMemory(const NodeInfo& n) { return n.free_memory + n.gpu_memory; }

bool Fits(const ModelFootprint& m, const NodeInfo& n, int64_t begin, int64_t end, bool first, bool last) {
  return n.free_memory == 0 ||
         StageBytes(m, begin, end, first, last) + KvBytes(m, begin, end) <= NodeMemory(n);
}

// Predicted ms of a decode step reading `bytes` on node `n`: what fits in its GPU's memory (the
// stage's last layers go there) at the GPU's speed, the rest at the CPU's.
double ComputeMs(const NodeInfo& n, uint64_t bytes) {
  const double on_gpu = n.gpu_gbps > 0 ? std::min<double>(static_cast<double>(bytes), 0.9 * n.gpu_memory) : 0;
  const double on_cpu = static_cast<double>(bytes) - on_gpu;
  double ms = on_cpu > 0 ? on_cpu / (n.matvec_gbps * 1e6) : 0;
  if (on_gpu > 0) ms += on_gpu / (n.gpu_gbps * 1e6);
  return ms;
}

// Predicted ms of node `n` holding [begin, end): compute, and the hops into it (and back, last).
double StageMs(const ModelFootprint& m, const NodeInfo& n, int64_t begin, int64_t end, bool worker, bool last) {
  double ms = ComputeMs(n, DecodeBytes(m, begin, end, last));
  if (worker) ms += n.rtt_ms / 2 * (last ? 2 : 1);
  return ms;
}

Plan Build(const ModelFootprint& m, const std::vector<std::tuple<int, int64_t, int64_t>>& ranges) {
  Plan plan;
  for (size_t i = 0; i < ranges.size(); ++i) {
    PlannedStage s;
    std::tie(s.node, s.layer_begin, s.layer_end) = ranges[i];
    s.weight_bytes = StageBytes(m, s.layer_begin, s.layer_end, i == 0, i + 1 == ranges.size());
    s.kv_bytes = KvBytes(m, s.layer_begin, s.layer_end);
    plan.stages.push_back(s);
  }
  return plan;
}

// The contiguous ranges, over the nodes in order (the main node always first, any worker left
// out), with the least predicted time per decode step that fit every node's memory.
Result<Plan> FastestPlan(const ModelFootprint& m, const std::vector<NodeInfo>& nodes) {
  const int64_t L = static_cast<int64_t>(m.layer_bytes.size());
  const int n = static_cast<int>(nodes.size());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[j][l]: least time for layers [0, l) on a chain of nodes ending with node j (j holding
  // the last of them, not the head unless l == L); from[j][l]: the previous (node, layer).
  std::vector<std::vector<double>> best(n, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<std::pair<int, int64_t>>> from(n, std::vector<std::pair<int, int64_t>>(L + 1, {-1, 0}));
  for (int64_t l = 1; l <= L; ++l) {
    if (Fits(m, nodes[0], 0, l, true, l == L)) best[0][l] = StageMs(m, nodes[0], 0, l, false, l == L);
  }
  for (int j = 1; j < n; ++j) {
    for (int i = 0; i < j; ++i) {
      for (int64_t k = 1; k < L; ++k) {
        if (best[i][k] == kInf) continue;
        for (int64_t l = k + 1; l <= L; ++l) {
          if (!Fits(m, nodes[j], k, l, false, l == L)) continue;
          const double t = best[i][k] + StageMs(m, nodes[j], k, l, true, l == L);
          if (t < best[j][l]) {
            best[j][l] = t;
            from[j][l] = {i, k};
          }
        }
      }
    }
  }
  int end_node = -1;
  for (int j = 0; j < n; ++j) {
    if (best[j][L] < kInf && (end_node < 0 || best[j][L] < best[end_node][L])) end_node = j;
  }
  if (end_node < 0) return Status::ResourceExhausted("no placement over these nodes fits their memory");
  std::vector<std::tuple<int, int64_t, int64_t>> ranges;
  for (int j = end_node, l = static_cast<int>(L); j >= 0;) {
    const auto [i, k] = from[j][l];
    ranges.emplace_back(j, j == 0 ? 0 : k, l);
    if (j == 0) break;
    j = i;
    l = static_cast<int>(k);
  }
  std::reverse(ranges.begin(), ranges.end());
  Plan plan = Build(m, ranges);
  plan.how = "speed";
  return plan;
}

}  // namespace

void Predict(const ModelFootprint& m, const std::vector<NodeInfo>& nodes, Plan* plan) {
  for (size_t i = 0; i < plan->stages.size(); ++i) {
    PlannedStage& s = plan->stages[i];
    const NodeInfo& n = nodes[s.node];
    const bool last = i + 1 == plan->stages.size();
    s.compute_ms = n.matvec_gbps > 0 ? ComputeMs(n, DecodeBytes(m, s.layer_begin, s.layer_end, last)) : 0;
    s.link_ms = i == 0 ? 0 : n.rtt_ms / 2 * (last ? 2 : 1);
  }
}

double Plan::predicted_ms() const {
  double t = 0;
  for (const PlannedStage& s : stages) {
    if (s.compute_ms <= 0) return 0;
    t += s.compute_ms + s.link_ms;
  }
  return t;
}

ModelFootprint Footprint(const gguf::GgufFile& file, const model::ModelParams& p, int64_t n_ctx,
                         quant::TensorType type_k, quant::TensorType type_v) {
  ModelFootprint f;
  f.layer_bytes.assign(p.n_layer, 0);
  for (const gguf::TensorInfo& t : file.tensors()) {
    int64_t layer = -1;
    switch (model::PartOf(t.name, &layer)) {
      case model::TensorPart::kLayer:
        if (layer < p.n_layer) f.layer_bytes[layer] += t.n_bytes;
        break;
      case model::TensorPart::kEmbedding: f.embd_bytes += t.n_bytes; break;
      case model::TensorPart::kHead: f.head_bytes += t.n_bytes; break;
      case model::TensorPart::kShared: f.shared_bytes += t.n_bytes; break;
    }
  }
  if (model::HeadIsTied(file)) {  // the last node needs the embedding table as its head
    const gguf::TensorInfo* e = file.FindTensor("token_embd.weight");
    if (e != nullptr) f.head_bytes += e->n_bytes;
  }
  for (int64_t il = 0; il < p.n_layer; ++il) f.kv_bytes.push_back(model::KvCacheBytes(p, n_ctx, il, il + 1, type_k, type_v));
  return f;
}

Result<std::vector<double>> ParseTensorSplit(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    const double x = std::strtod(part.c_str(), &end);
    if (part.empty() || *end != 0 || !std::isfinite(x) || x < 0) {
      return Status::InvalidArgument("--tensor-split: '" + part + "' is not a non-negative number");
    }
    v.push_back(x);
  }
  return v;
}

Result<Plan> MakePlan(const ModelFootprint& m, const std::vector<NodeInfo>& nodes, const PlanOptions& o) {
  const int64_t n_layer = static_cast<int64_t>(m.layer_bytes.size());
  const int n = static_cast<int>(nodes.size());
  if (n == 0) return Status::InvalidArgument("no nodes to place layers on");
  if (n > n_layer) {
    return Status::InvalidArgument(std::to_string(n) + " nodes but the model has only " +
                                   std::to_string(n_layer) + " layers");
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (!o.layers.empty()) {
    TANDEM_ASSIGN_OR_RETURN(ranges, ParseLayers(o.layers, n_layer));
    if (static_cast<int>(ranges.size()) != n) {
      return Status::InvalidArgument("--layers gives " + std::to_string(ranges.size()) +
                                     " ranges for " + std::to_string(n) + " nodes (main + workers)");
    }
  } else {
    std::vector<double> w = o.tensor_split;
    if (w.empty()) {
      for (const NodeInfo& ni : nodes) w.push_back(static_cast<double>(NodeMemory(ni)));
    } else if (static_cast<int>(w.size()) != n) {
      return Status::InvalidArgument("--tensor-split gives " + std::to_string(w.size()) +
                                     " proportions for " + std::to_string(n) + " nodes (main + workers)");
    }
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    if (!(total > 0)) return Status::InvalidArgument("the split proportions add up to 0");
    // Cumulative boundaries by layer count; every node keeps at least one layer.
    int64_t begin = 0;
    double acc = 0;
    for (int i = 0; i < n; ++i) {
      acc += w[i];
      int64_t end = i + 1 == n ? n_layer : static_cast<int64_t>(std::llround(acc / total * n_layer));
      end = std::max(end, begin + 1);
      end = std::min(end, n_layer - (n - 1 - i));
      ranges.emplace_back(begin, end);
      begin = end;
    }
  }
  std::vector<std::tuple<int, int64_t, int64_t>> with_nodes;
  for (int i = 0; i < n; ++i) with_nodes.emplace_back(i, ranges[i].first, ranges[i].second);
  Plan plan = Build(m, with_nodes);
  plan.how = !o.layers.empty() ? "layers" : !o.tensor_split.empty() ? "tensor split" : "memory";
  Predict(m, nodes, &plan);
  // By speed: when every node measured its speed and the fastest plan is clearly faster.
  bool speeds = o.mode == PlanMode::kAuto && o.layers.empty() && o.tensor_split.empty();
  for (const NodeInfo& ni : nodes) speeds = speeds && ni.matvec_gbps > 0;
  if (speeds) {
    Result<Plan> fast = FastestPlan(m, nodes);
    if (fast.ok()) {
      Predict(m, nodes, &*fast);
      bool fits = true;
      for (const PlannedStage& s : plan.stages) fits = fits && Fits(m, nodes[s.node], s.layer_begin, s.layer_end, s.node == 0, &s == &plan.stages.back());
      if (!fits || fast->predicted_ms() < 0.9 * plan.predicted_ms()) return fast;
    }
  }
  for (const PlannedStage& s : plan.stages) {
    const NodeInfo& ni = nodes[s.node];
    if (ni.free_memory > 0 && s.weight_bytes + s.kv_bytes > NodeMemory(ni)) {
      return Status::ResourceExhausted(
          "the plan does not fit: " + ni.name + " would hold layers " + std::to_string(s.layer_begin) +
          ".." + std::to_string(s.layer_end - 1) + " = " + MiB(s.weight_bytes) + " of weights + " +
          MiB(s.kv_bytes) + " of KV cache, but has " + MiB(ni.free_memory) + " free" +
          (ni.gpu_memory > 0 ? " + " + MiB(ni.gpu_memory) + " on its GPU" : "") + "\n" + plan.ToString(nodes));
    }
  }
  return plan;
}

std::string Plan::ToString(const std::vector<NodeInfo>& nodes) const {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "%-24s %-9s %12s %12s %12s %22s\n", "node", "layers", "weights", "kv cache", "free",
                "predicted ms/token");
  out += line;
  for (const PlannedStage& s : stages) {
    char range[32], predicted[64] = "?";
    std::snprintf(range, sizeof range, "%ld-%ld", static_cast<long>(s.layer_begin), static_cast<long>(s.layer_end - 1));
    if (s.compute_ms > 0) std::snprintf(predicted, sizeof predicted, "%.2f + link %.2f", s.compute_ms, s.link_ms);
    const NodeInfo& ni = nodes[s.node];
    std::snprintf(line, sizeof line, "%-24s %-9s %12s %12s %12s %22s\n", ni.name.c_str(), range,
                  MiB(s.weight_bytes).c_str(), MiB(s.kv_bytes).c_str(),
                  ni.free_memory ? (MiB(ni.free_memory) + (ni.gpu_memory > 0 ? " + " + MiB(ni.gpu_memory) + " GPU" : "")).c_str() : "?",
                  predicted);
    out += line;
  }
  std::string left_out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    bool used = false;
    for (const PlannedStage& s : stages) used = used || s.node == static_cast<int>(i);
    if (!used) left_out += (left_out.empty() ? "" : ", ") + nodes[i].name;
  }
  out += "plan by " + how;
  if (const double t = predicted_ms(); t > 0) {
    std::snprintf(line, sizeof line, ", predicted %.2f ms per token", t);
    out += line;
  }
  if (!left_out.empty()) out += "; not used (slower with them): " + left_out;
  out += "\n";
  return out;
}

}  // namespace tandem::pipeline
