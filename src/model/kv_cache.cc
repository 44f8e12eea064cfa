#include "model/kv_cache.h"

#include <algorithm>
#include <new>
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

int64_t WindowCells(const ModelParams& p, int64_t n_ctx) {
  if (p.n_swa <= 0) return n_ctx;
  return std::min(n_ctx, p.n_swa + kWindowRollback + kWindowBatch);
}

bool WindowKeepsPrefix(const ModelParams& p, int64_t from, int64_t seen) {
  if (p.n_swa <= 0 || from <= 0) return true;
  // Every batch so far started at a position below `seen`, so the window cells dropped are below
  // floor = seen - n_swa - kWindowRollback; a token at `from` needs from - n_swa + 1 on.
  const int64_t floor = seen - p.n_swa - kWindowRollback;
  return floor <= 0 || from - p.n_swa + 1 >= floor;
}

KvCache::KvCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim, quant::TensorType type_k,
                 quant::TensorType type_v, std::vector<bool> window, int64_t n_swa, int64_t window_cells,
                 int64_t host_layers)
    : n_layer_(n_layer),
      n_ctx_(n_ctx),
      n_head_kv_(n_head_kv),
      head_dim_(head_dim),
      n_swa_(n_swa),
      type_k_(type_k),
      type_v_(type_v),
      k_row_bytes_(quant::RowBytes(type_k, head_dim)),
      v_row_bytes_(quant::RowBytes(type_v, head_dim)),
      window_(std::move(window)),
      index_(static_cast<size_t>(n_layer)) {
  if (n_swa_ <= 0) window_.clear();
  window_.resize(static_cast<size_t>(n_layer), false);
  if (host_layers < 0 || host_layers > n_layer) host_layers = n_layer;
  for (int64_t l = 0; l < n_layer; ++l) {
    Cells& c = pools_[pool_of(l)];
    ++c.n_layer;
    index_[l] = l < host_layers ? c.n_host++ : -1;
  }
  pools_[kFull].cap = n_ctx;
  pools_[kWindow].cap = pools_[kWindow].n_layer > 0 ? std::clamp<int64_t>(window_cells, 1, n_ctx) : 0;
  for (Cells& c : pools_) {
    c.k.resize(static_cast<size_t>(c.n_host * n_head_kv_ * c.cap) * k_row_bytes_);
    c.v.resize(static_cast<size_t>(c.n_host * n_head_kv_ * c.cap) * v_row_bytes_);
    c.seq.assign(static_cast<size_t>(c.cap), -1);
    c.pos.assign(static_cast<size_t>(c.cap), -1);
  }
}

int32_t KvCache::FloorOf(int32_t seq) const {
  for (const Floor& f : floors_) {
    if (f.seq == seq) return f.floor;
  }
  return 0;
}

void KvCache::SetFloor(int32_t seq, int32_t floor) {
  for (Floor& f : floors_) {
    if (f.seq == seq) {
      f.floor = floor;
      return;
    }
  }
  floors_.push_back({seq, floor});
}

void KvCache::Claim(Cells& c, int32_t seq, int32_t pos, int64_t* from, int64_t* cell) {
  while (c.seq[*from] >= 0) ++*from;  // the caller checked that a free cell exists
  c.seq[*from] = seq;
  c.pos[*from] = pos;
  *cell = *from;
  c.high = std::max(c.high, *from + 1);
  ++c.used;
}

void KvCache::Drop(Cells& c, int32_t seq, int32_t from_pos, int32_t below_pos) {
  for (int64_t i = 0; i < c.high; ++i) {
    if (c.seq[i] == seq && (c.pos[i] >= from_pos || c.pos[i] < below_pos)) {
      c.seq[i] = -1;
      c.pos[i] = -1;
      --c.used;
    }
  }
  while (c.high > 0 && c.seq[c.high - 1] < 0) --c.high;
}

Status KvCache::Grow(int64_t cap) {
  Cells& c = pools_[kWindow];
  try {
    for (auto [rows, row_bytes] : {std::pair{&c.k, k_row_bytes_}, std::pair{&c.v, v_row_bytes_}}) {
      std::vector<uint8_t> wider(static_cast<size_t>(c.n_host * n_head_kv_ * cap) * row_bytes);
      for (int64_t b = 0; b < c.n_host * n_head_kv_; ++b) {  // each (layer, head)'s rows
        std::copy_n(rows->begin() + static_cast<ptrdiff_t>(b * c.cap * row_bytes), c.high * row_bytes,
                    wider.begin() + static_cast<ptrdiff_t>(b * cap * row_bytes));
      }
      rows->swap(wider);
    }
    c.seq.resize(static_cast<size_t>(cap), -1);
    c.pos.resize(static_cast<size_t>(cap), -1);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("no memory to grow the sliding-window KV cache to " + std::to_string(cap) +
                                     " cells");
  }
  c.cap = cap;
  return Status::Ok();
}

Status KvCache::Allocate(const int32_t* seq, const int32_t* pos, int64_t n, int64_t* cells, int64_t* window_cells) {
  Cells& full = pools_[kFull];
  if (n > full.cap - full.used) {
    return Status::OutOfRange("context is full: " + std::to_string(n) + " more tokens need cells, " +
                              std::to_string(full.cap - full.used) + " of " + std::to_string(n_ctx_) +
                              " are free (raise -c)");
  }
  if (has_window()) {
    // Each sequence's lowest position in the batch: what its window must still hold.
    batch_seqs_.clear();
    batch_p0_.clear();
    for (int64_t i = 0; i < n; ++i) {
      const auto it = std::find(batch_seqs_.begin(), batch_seqs_.end(), seq[i]);
      if (it == batch_seqs_.end()) {
        batch_seqs_.push_back(seq[i]);
        batch_p0_.push_back(pos[i]);
      } else {
        int32_t& p0 = batch_p0_[it - batch_seqs_.begin()];
        p0 = std::min(p0, pos[i]);
      }
    }
    for (size_t j = 0; j < batch_seqs_.size(); ++j) {
      const int64_t need = std::max<int64_t>(0, batch_p0_[j] - n_swa_ + 1), floor = FloorOf(batch_seqs_[j]);
      if (floor > need) {
        return Status::InvalidArgument(
            "sequence " + std::to_string(batch_seqs_[j]) + " continues at position " + std::to_string(batch_p0_[j]) +
            ", whose sliding window needs positions " + std::to_string(need) + " on, but the window layers dropped "
            "those below " + std::to_string(floor) + " (truncated further back than " +
            std::to_string(kWindowRollback) + " positions behind its window; start it again from position 0)");
      }
    }
    // Drop what no token from p0 on reaches, keeping the rollback margin.
    Cells& win = pools_[kWindow];
    for (size_t j = 0; j < batch_seqs_.size(); ++j) {
      const int64_t keep = static_cast<int64_t>(batch_p0_[j]) - n_swa_ + 1 - kWindowRollback;
      if (keep > FloorOf(batch_seqs_[j])) {
        Drop(win, batch_seqs_[j], INT32_MAX, static_cast<int32_t>(keep));
        SetFloor(batch_seqs_[j], static_cast<int32_t>(keep));
      }
    }
    if (n > win.cap - win.used) {
      TANDEM_RETURN_IF_ERROR(Grow(std::min(n_ctx_, std::max(win.used + n, win.cap + win.cap / 2))));
    }
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) Claim(win, seq[i], pos[i], &at, &window_cells[i]);
  } else {
    std::fill(window_cells, window_cells + n, int64_t{-1});
  }
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) Claim(full, seq[i], pos[i], &at, &cells[i]);
  return Status::Ok();
}

void KvCache::Truncate(int32_t seq, int32_t from_pos) {
  for (Cells& c : pools_) Drop(c, seq, from_pos, INT32_MIN);
  if (from_pos <= 0) {
    floors_.erase(std::remove_if(floors_.begin(), floors_.end(), [&](const Floor& f) { return f.seq == seq; }),
                  floors_.end());
  }
}

uint64_t KvCache::bytes() const {
  uint64_t b = 0;
  for (const Cells& c : pools_) b += c.k.size() + c.v.size();
  return b;
}

void KvCache::Clear() {
  for (Cells& c : pools_) {
    std::fill(c.seq.begin(), c.seq.end(), -1);
    std::fill(c.pos.begin(), c.pos.end(), -1);
    c.used = c.high = 0;
  }
  floors_.clear();
}

}  // namespace tandem::model
