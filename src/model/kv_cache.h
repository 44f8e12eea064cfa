// KvCache: keys and values of every layer for up to n_ctx token cells, each stored as F16 (the
// default), F32 or Q8_0 (chosen separately for keys and values, like llama.cpp's --cache-type-k
// and --cache-type-v). A row holds the kv_dim values of one cell in one layer, heads one after
// another; with Q8_0 every head starts a block (head_dim is a multiple of 32, see
// CheckKvCacheTypes). Each cell belongs to one sequence at one position, so one cache can hold
// several sequences (a server batches requests); a sequence can be truncated (speculative
// decoding, resumption) or removed.
//
// Thread safety: none; the owner serialises calls. Forward() writes cells from several threads
// but only cells it allocated for the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "quant/quant.h"

namespace tandem::model {

// Ok if keys of `type_k` and values of `type_v` can be cached for heads of `head_dim` values:
// each type is F32, F16 or Q8_0, and with Q8_0 head_dim is a multiple of 32.
Status CheckKvCacheTypes(quant::TensorType type_k, quant::TensorType type_v, int64_t head_dim);

class KvCache {
 public:
  // REQUIRES: CheckKvCacheTypes(type_k, type_v, head_dim) is ok for the model's head_dim.
  KvCache(int64_t n_layer, int64_t n_ctx, int64_t kv_dim,
          quant::TensorType type_k = quant::TensorType::kF16,
          quant::TensorType type_v = quant::TensorType::kF16);

  int64_t n_layer() const { return n_layer_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t used() const { return used_; }
  quant::TensorType type_k() const { return type_k_; }
  quant::TensorType type_v() const { return type_v_; }

  // Claims `n` free cells for tokens of `seq` at `pos[i]`; writes their indices to `cells`.
  // OutOfRange (and nothing claimed) if fewer than n cells are free.
  Status Allocate(int32_t seq, const int32_t* pos, int64_t n, int64_t* cells);
  // Frees the cells of `seq` at positions >= from_pos (0: the whole sequence).
  void Truncate(int32_t seq, int32_t from_pos);
  void Clear();

  int32_t seq_of(int64_t cell) const { return seq_[cell]; }
  int32_t pos_of(int64_t cell) const { return pos_[cell]; }
  // The row of a cell in a layer: kv_dim values of type_k() / type_v(). The values of head h
  // (of head_dim values) start RowBytes(type, h * head_dim) bytes in.
  uint8_t* k(int64_t layer, int64_t cell) { return &k_[(layer * n_ctx_ + cell) * k_row_bytes_]; }
  uint8_t* v(int64_t layer, int64_t cell) { return &v_[(layer * n_ctx_ + cell) * v_row_bytes_]; }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  // One past the highest cell in use (attention scans cells below it).
  int64_t high_water() const { return high_; }

 private:
  int64_t n_layer_, n_ctx_, kv_dim_;
  quant::TensorType type_k_, type_v_;
  size_t k_row_bytes_, v_row_bytes_;
  std::vector<uint8_t> k_, v_;
  std::vector<int32_t> seq_, pos_;  // seq -1: free
  int64_t used_ = 0, high_ = 0;
};

}  // namespace tandem::model
