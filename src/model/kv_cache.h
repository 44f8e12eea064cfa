// KvCache: keys and values of every layer for up to n_ctx token cells, stored as F16. Each cell
// belongs to one sequence at one position, so one cache can hold several sequences (a server
// batches requests); a sequence can be truncated (speculative decoding, resumption) or removed.
//
// Thread safety: none; the owner serialises calls. Forward() writes cells from several threads
// but only cells it allocated for the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace tandem::model {

class KvCache {
 public:
  KvCache(int64_t n_layer, int64_t n_ctx, int64_t kv_dim);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t used() const { return used_; }

  // Claims `n` free cells for tokens of `seq` at `pos[i]`; writes their indices to `cells`.
  // OutOfRange (and nothing claimed) if fewer than n cells are free.
  Status Allocate(int32_t seq, const int32_t* pos, int64_t n, int64_t* cells);
  // Frees the cells of `seq` at positions >= from_pos (0: the whole sequence).
  void Truncate(int32_t seq, int32_t from_pos);
  void Clear();

  int32_t seq_of(int64_t cell) const { return seq_[cell]; }
  int32_t pos_of(int64_t cell) const { return pos_[cell]; }
  uint16_t* k(int64_t layer, int64_t cell) { return &k_[(layer * n_ctx_ + cell) * kv_dim_]; }
  uint16_t* v(int64_t layer, int64_t cell) { return &v_[(layer * n_ctx_ + cell) * kv_dim_]; }
  // One past the highest cell in use (attention scans cells below it).
  int64_t high_water() const { return high_; }

 private:
  int64_t n_layer_, n_ctx_, kv_dim_;
  std::vector<uint16_t> k_, v_;
  std::vector<int32_t> seq_, pos_;  // seq -1: free
  int64_t used_ = 0, high_ = 0;
};

}  // namespace tandem::model
