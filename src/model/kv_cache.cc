#include "model/kv_cache.h"

#include <algorithm>
#include <string>

#include "gguf/format.h"

namespace tandem::model {

Status CheckKvCacheTypes(quant::TensorType type_k, quant::TensorType type_v, int64_t head_dim) {
  using quant::TensorType;
  for (TensorType t : {type_k, type_v}) {
    if (t != TensorType::kF32 && t != TensorType::kF16 && t != TensorType::kQ8_0) {
      return Status::InvalidArgument("KV cache type " + std::string(gguf::TensorTypeName(t)) +
                                     " is not supported (f32, f16, q8_0)");
    }
    if (t == TensorType::kQ8_0 && head_dim % quant::kQK != 0) {
      return Status::InvalidArgument(
          "a q8_0 KV cache needs a head size that is a multiple of 32 (this model's is " +
          std::to_string(head_dim) + ")");
    }
  }
  return Status::Ok();
}

KvCache::KvCache(int64_t n_layer, int64_t n_ctx, int64_t kv_dim, quant::TensorType type_k,
                 quant::TensorType type_v)
    : n_layer_(n_layer),
      n_ctx_(n_ctx),
      kv_dim_(kv_dim),
      type_k_(type_k),
      type_v_(type_v),
      k_row_bytes_(quant::RowBytes(type_k, kv_dim)),
      v_row_bytes_(quant::RowBytes(type_v, kv_dim)),
      k_(static_cast<size_t>(n_layer * n_ctx) * k_row_bytes_),
      v_(static_cast<size_t>(n_layer * n_ctx) * v_row_bytes_),
      seq_(static_cast<size_t>(n_ctx), -1),
      pos_(static_cast<size_t>(n_ctx), -1) {}

Status KvCache::Allocate(int32_t seq, const int32_t* pos, int64_t n, int64_t* cells) {
  if (n > n_ctx_ - used_) {
    return Status::OutOfRange("context is full: " + std::to_string(n) + " more tokens need cells, " +
                              std::to_string(n_ctx_ - used_) + " of " + std::to_string(n_ctx_) +
                              " are free (raise -c)");
  }
  int64_t found = 0;
  for (int64_t c = 0; c < n_ctx_ && found < n; ++c) {
    if (seq_[c] >= 0) continue;
    seq_[c] = seq;
    pos_[c] = pos[found];
    cells[found++] = c;
    if (c + 1 > high_) high_ = c + 1;
  }
  used_ += n;
  return Status::Ok();
}

void KvCache::Truncate(int32_t seq, int32_t from_pos) {
  for (int64_t c = 0; c < high_; ++c) {
    if (seq_[c] == seq && pos_[c] >= from_pos) {
      seq_[c] = -1;
      pos_[c] = -1;
      --used_;
    }
  }
  while (high_ > 0 && seq_[high_ - 1] < 0) --high_;
}

void KvCache::Clear() {
  std::fill(seq_.begin(), seq_.end(), -1);
  std::fill(pos_.begin(), pos_.end(), -1);
  used_ = high_ = 0;
}

}  // namespace tandem::model
