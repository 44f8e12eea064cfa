// KvCache: keys and values of every layer for up to n_ctx token cells, each stored as F16 (the
// default), F32 or Q8_0 (chosen separately for keys and values, like llama.cpp's --cache-type-k
// and --cache-type-v). A row holds the head_dim values of one KV head of one cell in one layer;
// a layer keeps each head's rows together, cell after cell ([layer][head][cell]), so attention,
// which works one KV head at a time, reads each head's keys and values as one sequential stream
// (with the heads of a cell side by side it read 1 row in n_head_kv, a stride the hardware
// prefetchers did not follow). With Q8_0 a row is whole blocks (head_dim is a multiple of 32, see
// CheckKvCacheTypes). Each cell belongs to one sequence at one position, so one cache can hold
// several sequences (a server batches requests); a sequence can be truncated (speculative
// decoding, resumption) or removed.
//
// Sliding-window layers (Gemma 3's local layers, where a token at p sees positions > p - n_swa)
// keep their rows in a second pool of cells. When a batch arrives, each of its sequences drops
// the window cells no token from the batch's lowest position p0 on can reach, keeping
// kWindowRollback positions more: positions >= p0 - n_swa + 1 - kWindowRollback stay. So a long
// context costs memory mainly on the global layers. The window pool starts at WindowCells() cells
// and grows when several sequences need more (never past n_ctx).
// Because the dropped cells are gone, a sequence can afterwards be truncated only so far back
// (WindowKeepsPrefix says how far, from what the main node knows); a batch that would need a
// dropped cell is refused with an error naming the positions, never computed without them.
// Every stage of a pipeline sees the same batches and truncations, so all drop the same cells.
//
// Thread safety: none; the owner serialises calls. Forward() writes cells from several threads
// but only cells it allocated for the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/params.h"
#include "quant/quant.h"

namespace tandem::model {

// Positions a sequence keeps behind its window, so that truncating back this far (a chat's next
// turn that re-renders the end of the previous answer) keeps its cache.
constexpr int64_t kWindowRollback = 32;
// The largest batch a window pool is sized for at the start (a micro-batch, exec/stage.h).
constexpr int64_t kWindowBatch = 512;

// Ok if keys of `type_k` and values of `type_v` can be cached for heads of `head_dim` values:
// each type is F32, F16 or Q8_0, and with Q8_0 head_dim is a multiple of 32.
Status CheckKvCacheTypes(quant::TensorType type_k, quant::TensorType type_v, int64_t head_dim);

// Cells a sliding-window layer starts with for a context of n_ctx: one sequence's window, the
// rollback margin and a full batch; n_ctx if that is less. n_ctx for a model without a window.
int64_t WindowCells(const ModelParams& p, int64_t n_ctx);

// Whether a sequence whose cells once reached position seen - 1 (the highest position it has had
// since it was last emptied) can be truncated to its first `from` positions and continued from
// there: true if the window layers still hold every position a token at `from` needs. The main
// node's rule (it owns the committed tokens); when false it starts the sequence again from 0.
bool WindowKeepsPrefix(const ModelParams& p, int64_t from, int64_t seen);

class KvCache {
 public:
  // `window[l]` (empty: none) says whether cache layer l is a sliding-window layer of `n_swa`.
  // Layers from `host_layers` on (-1: none) keep their rows on a GPU (model/gpu_layers.h): this
  // cache only places their cells, and k() / v() must not be called for them.
  // REQUIRES: CheckKvCacheTypes(type_k, type_v, head_dim) is ok for the model's head_dim.
  KvCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim,
          quant::TensorType type_k = quant::TensorType::kF16,
          quant::TensorType type_v = quant::TensorType::kF16, std::vector<bool> window = {},
          int64_t n_swa = 0, int64_t window_cells = 0, int64_t host_layers = -1);

  int64_t n_layer() const { return n_layer_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_dim() const { return n_head_kv_ * head_dim_; }
  int64_t n_head_kv() const { return n_head_kv_; }
  int64_t head_dim() const { return head_dim_; }
  // Tokens held (cells of the full pool in use).
  int64_t used() const { return pools_[kFull].used; }
  quant::TensorType type_k() const { return type_k_; }
  quant::TensorType type_v() const { return type_v_; }

  // Claims cells for the n tokens of a batch (token i of sequence seq[i] at pos[i]): cells[i] in
  // the full pool and window_cells[i] in the window pool (-1 when this cache has no window
  // layers), after dropping the window cells the batch's sequences no longer reach (see above).
  // OutOfRange (nothing claimed) if fewer than n cells are free; FailedPrecondition (nothing
  // claimed) if a sequence needs window positions it has dropped.
  Status Allocate(const int32_t* seq, const int32_t* pos, int64_t n, int64_t* cells, int64_t* window_cells);
  // Frees the cells of `seq` at positions >= from_pos (0: the whole sequence).
  void Truncate(int32_t seq, int32_t from_pos);
  void Clear();

  // The pool a layer's rows are in: kFull, or kWindow for a sliding-window layer.
  enum Pool { kFull = 0, kWindow = 1 };
  Pool pool_of(int64_t layer) const { return window_[layer] ? kWindow : kFull; }
  bool has_window() const { return pools_[kWindow].n_layer > 0; }
  int32_t seq_of(Pool p, int64_t cell) const { return pools_[p].seq[cell]; }
  int32_t pos_of(Pool p, int64_t cell) const { return pools_[p].pos[cell]; }
  // One past the highest cell of a pool in use (attention scans cells below it).
  int64_t high_water(Pool p = kFull) const { return pools_[p].high; }
  int64_t used(Pool p) const { return pools_[p].used; }
  int64_t capacity(Pool p) const { return pools_[p].cap; }
  // The row of KV head `head` of a cell (of the layer's pool) in a layer: head_dim values of
  // type_k() / type_v(), k_row_bytes() / v_row_bytes() long. The next cell's row of the same head
  // follows it (cells of one head are contiguous).
  uint8_t* k(int64_t layer, int64_t cell, int64_t head) {
    return Row(pools_[pool_of(layer)].k, layer, cell, head, k_row_bytes_);
  }
  uint8_t* v(int64_t layer, int64_t cell, int64_t head) {
    return Row(pools_[pool_of(layer)].v, layer, cell, head, v_row_bytes_);
  }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  // Bytes of keys and values allocated now (in host memory).
  uint64_t bytes() const;

 private:
  struct Cells {
    int64_t n_layer = 0, cap = 0;  // layers of this pool, cells per layer
    int64_t n_host = 0;            // of them, those whose rows are here
    std::vector<uint8_t> k, v;     // [n_host][n_head_kv][cap] rows
    std::vector<int32_t> seq, pos;  // seq -1: free
    int64_t used = 0, high = 0;
  };
  // A sequence whose window cells below `floor` are dropped.
  struct Floor {
    int32_t seq, floor;
  };
  uint8_t* Row(std::vector<uint8_t>& rows, int64_t layer, int64_t cell, int64_t head, size_t row_bytes) {
    const Cells& c = pools_[pool_of(layer)];
    return &rows[((index_[layer] * n_head_kv_ + head) * c.cap + cell) * row_bytes];
  }
  int32_t FloorOf(int32_t seq) const;
  void SetFloor(int32_t seq, int32_t floor);
  Status Grow(int64_t cap);  // the window pool to `cap` cells per layer
  static void Claim(Cells& c, int32_t seq, int32_t pos, int64_t* from, int64_t* cell);
  static void Drop(Cells& c, int32_t seq, int32_t from_pos, int32_t below_pos);

  int64_t n_layer_, n_ctx_, n_head_kv_, head_dim_, n_swa_;
  quant::TensorType type_k_, type_v_;
  size_t k_row_bytes_, v_row_bytes_;
  std::vector<bool> window_;     // per layer
  std::vector<int64_t> index_;   // per layer: its index within its pool
  Cells pools_[2];
  std::vector<Floor> floors_;    // sequences that dropped window cells
  std::vector<int32_t> batch_seqs_, batch_p0_;  // Allocate's per-sequence lowest positions
};

}  // namespace tandem::model
