#include "pipeline/planner.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

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

}  // namespace

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
  f.kv_bytes_per_layer = model::KvCacheBytes(p, n_ctx, 1, type_k, type_v);
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
      for (const NodeInfo& ni : nodes) w.push_back(static_cast<double>(ni.free_memory));
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
  Plan plan;
  for (int i = 0; i < n; ++i) {
    PlannedStage s;
    s.node = i;
    s.layer_begin = ranges[i].first;
    s.layer_end = ranges[i].second;
    for (int64_t l = s.layer_begin; l < s.layer_end; ++l) s.weight_bytes += m.layer_bytes[l];
    s.weight_bytes += m.shared_bytes;
    if (i == 0) s.weight_bytes += m.embd_bytes;
    if (i == n - 1) s.weight_bytes += m.head_bytes;
    s.kv_bytes = m.kv_bytes_per_layer * (s.layer_end - s.layer_begin);
    plan.stages.push_back(s);
  }
  for (const PlannedStage& s : plan.stages) {
    const NodeInfo& ni = nodes[s.node];
    if (ni.free_memory > 0 && s.weight_bytes + s.kv_bytes > ni.free_memory) {
      return Status::ResourceExhausted(
          "the plan does not fit: " + ni.name + " would hold layers " + std::to_string(s.layer_begin) +
          ".." + std::to_string(s.layer_end - 1) + " = " + MiB(s.weight_bytes) + " of weights + " +
          MiB(s.kv_bytes) + " of KV cache, but has " + MiB(ni.free_memory) +
          " free\n" + plan.ToString(nodes));
    }
  }
  return plan;
}

std::string Plan::ToString(const std::vector<NodeInfo>& nodes) const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %-9s %12s %12s %12s\n", "node", "layers", "weights", "kv cache", "free");
  out += line;
  for (const PlannedStage& s : stages) {
    char range[32];
    std::snprintf(range, sizeof range, "%ld-%ld", static_cast<long>(s.layer_begin), static_cast<long>(s.layer_end - 1));
    const NodeInfo& ni = nodes[s.node];
    std::snprintf(line, sizeof line, "%-24s %-9s %12s %12s %12s\n", ni.name.c_str(), range,
                  MiB(s.weight_bytes).c_str(), MiB(s.kv_bytes).c_str(),
                  ni.free_memory ? MiB(ni.free_memory).c_str() : "?");
    out += line;
  }
  return out;
}

}  // namespace tandem::pipeline
