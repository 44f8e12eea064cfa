#include "model/layout.h"

#include "model/kv_cache.h"

#include <charconv>

namespace tandem::model {

TensorPart PartOf(std::string_view name, int64_t* layer) {
  *layer = -1;
  constexpr std::string_view kBlk = "blk.";
  if (name.substr(0, kBlk.size()) == kBlk) {
    const char* b = name.data() + kBlk.size();
    const char* e = name.data() + name.size();
    int64_t v = -1;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec == std::errc() && p != b && p < e && *p == '.' && v >= 0) {
      *layer = v;
      return TensorPart::kLayer;
    }
  }
  if (name == "token_embd.weight") return TensorPart::kEmbedding;
  if (name == "output.weight" || name == "output_norm.weight") return TensorPart::kHead;
  return TensorPart::kShared;
}

bool HeadIsTied(const gguf::GgufFile& file) { return file.FindTensor("output.weight") == nullptr; }

StageTensors TensorsOfStage(const gguf::GgufFile& file, int64_t layer_begin, int64_t layer_end,
                            bool first, bool last) {
  StageTensors s;
  const bool tied = HeadIsTied(file);
  for (const gguf::TensorInfo& t : file.tensors()) {
    int64_t layer = -1;
    bool want = false;
    switch (PartOf(t.name, &layer)) {
      case TensorPart::kLayer: want = layer >= layer_begin && layer < layer_end; break;
      case TensorPart::kEmbedding: want = first || (last && tied); break;
      case TensorPart::kHead: want = last; break;
      case TensorPart::kShared: want = true; break;
    }
    if (want) {
      s.tensors.push_back(&t);
      s.bytes += t.n_bytes;
    }
  }
  return s;
}

uint64_t KvCacheBytes(const ModelParams& p, int64_t n_ctx, int64_t layer_begin, int64_t layer_end,
                      quant::TensorType type_k, quant::TensorType type_v) {
  const uint64_t row = quant::RowBytes(type_k, p.kv_dim()) + quant::RowBytes(type_v, p.kv_dim());
  uint64_t bytes = 0;
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    bytes += row * static_cast<uint64_t>(p.IsLocalLayer(il) ? WindowCells(p, n_ctx) : n_ctx);
  }
  return bytes;
}

}  // namespace tandem::model
