#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/moe.h"

namespace tandem::model {

using kernels::MatMul;
using quant::TensorType;

namespace {

// Query rows (tokens x heads of one KV head) per attention tile, cells per flash block (a
// block's fixed costs, the queries transposed for the score kernel and each row's max,
// exponentials and rescaling, are paid once per block: 256 ran pp512 @ d2048 1.5x as fast as
// 32), the most score floats a thread holds for the standard algorithm (its tiles shrink to
// fit), and the cells per step of its products.
constexpr int64_t kTileRows = 64;
constexpr int64_t kFlashBlock = 256;
constexpr int64_t kStandardScoreFloats = int64_t{1} << 20;
constexpr int64_t kStandardChunk = 64;

// The largest of x[0..n), n >= 1, in four independent chains (a max is exact, so the order
// does not change it; one chain waited on each comparison).
float RowMax(const float* x, int64_t n) {
  float m0 = x[0], m1 = x[0], m2 = x[0], m3 = x[0];
  int64_t j = 1;
  for (; j + 4 <= n; j += 4) {
    m0 = std::max(m0, x[j]);
    m1 = std::max(m1, x[j + 1]);
    m2 = std::max(m2, x[j + 2]);
    m3 = std::max(m3, x[j + 3]);
  }
  for (; j < n; ++j) m0 = std::max(m0, x[j]);
  return std::max(std::max(m0, m1), std::max(m2, m3));
}

ContextOptions Checked(const ModelParams& p, const ContextOptions& o) {
  if (CheckContextOptions(p, o).ok()) return o;
  ContextOptions f16 = o;
  f16.type_k = f16.type_v = TensorType::kF16;
  return f16;
}

// f(t) for each token t < n of a batch: one token on the calling thread, several spread over the
// pool (a token's row is a piece: its result is the same bits either way). The per-token steps of
// a layer (norms, residual adds) of an 8-token batch took about 40 us a layer on one thread of
// the Xeon VM, a tenth of the batch's time outside the matrix products.
template <typename F>
void ForEachToken(ThreadPool& pool, int64_t n, F&& f) {
  if (n == 1) return f(int64_t{0});
  pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) f(t);
  });
}

// Which of layers [begin, end) keep only their window's cells.
std::vector<bool> WindowLayers(const ModelParams& p, int64_t begin, int64_t end, const ContextOptions& o) {
  std::vector<bool> w;
  for (int64_t il = begin; il < end; ++il) w.push_back(!o.swa_full && p.IsLocalLayer(il));
  return w;
}

}  // namespace

int64_t GpuLayerCount(const Model& model, int64_t n_ctx, int64_t begin, int64_t end, const ContextOptions& o) {
  if (o.device == nullptr) return 0;
  if (o.gpu_layers >= 0) return std::clamp<int64_t>(o.gpu_layers, 0, end - begin);
  if (!GpuRefusal(model.params(), o.type_k, o.type_v).empty()) return 0;
  return GpuLayersThatFit(model, n_ctx, begin, end, end == model.params().n_layer, o.type_k, o.type_v,
                          o.device->info().memory_bytes, o.device->info().max_binding_bytes);
}

Status CheckContextOptions(const ModelParams& params, const ContextOptions& options) {
  return CheckKvCacheTypes(options.type_k, options.type_v, params.head_dim);
}

Context::Context(const Model& model, int64_t n_ctx, int n_threads, int64_t layer_begin,
                 int64_t layer_end, const ContextOptions& options)
    : model_(model),
      p_(model.params()),
      options_(Checked(model.params(), options)),
      k_(kernels::Best()),
      layer_begin_(layer_begin),
      layer_end_(layer_end < 0 ? model.params().n_layer : layer_end),
      host_end_(layer_end_ - GpuLayerCount(model, n_ctx, layer_begin_, layer_end_, options_)),
      pool_(n_threads),
      cache_(layer_end_ - layer_begin_, n_ctx, model.params().n_head_kv, model.params().head_dim, options_.type_k,
             options_.type_v,
             WindowLayers(model.params(), layer_begin_, layer_end_, options_), model.params().n_swa,
             WindowCells(model.params(), n_ctx), host_end_ - layer_begin_) {
  const int64_t half = p_.head_dim / 2;
  rope_inv_freq_.resize(half);
  rope_inv_freq_local_.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(p_.rope_base), -2.0 * i / p_.head_dim);
    if (model.rope_freqs != nullptr) f /= model.rope_freqs[i];
    rope_inv_freq_[i] = static_cast<float>(f / p_.rope_scale);
    rope_inv_freq_local_[i] = static_cast<float>(std::pow(static_cast<double>(p_.rope_base_swa), -2.0 * i / p_.head_dim));
  }

  // Attention scratch per thread, sized once (a decode step allocates nothing).
  const int64_t group = p_.n_head / p_.n_head_kv;
  tile_tokens_ = std::max<int64_t>(1, kTileRows / group);
  if (options_.flash_attn) {
    tile_rows_ = tile_tokens_ * group;
    score_floats_ = tile_rows_ * kFlashBlock;
    row_ptrs_ = kFlashBlock;
  } else {
    tile_tokens_ = std::clamp<int64_t>(kStandardScoreFloats / (group * n_ctx), 1, tile_tokens_);
    tile_rows_ = tile_tokens_ * group;
    score_floats_ = tile_rows_ * n_ctx;
    row_ptrs_ = n_ctx;
  }
  const size_t nt = static_cast<size_t>(n_threads);
  att_q_.resize(nt * tile_rows_ * p_.head_dim);
  att_o_.resize(nt * tile_rows_ * p_.head_dim);
  att_s_.resize(nt * score_floats_);
  att_m_.resize(nt * tile_rows_);
  att_l_.resize(nt * tile_rows_);
  att_kp_.resize(nt * row_ptrs_);
  att_vp_.resize(nt * row_ptrs_);
  for (KvCache::Pool pool : {KvCache::kFull, KvCache::kWindow}) {
    cell_plans_[pool].seq_cells.resize(cache_.capacity(pool));
    cell_plans_[pool].seq_pos.resize(cache_.capacity(pool));
  }
  if (host_end_ < layer_end_) {
    GpuLayers::Config g;
    g.layer_begin = host_end_;
    g.layer_end = layer_end_;
    g.head = is_last();
    g.cache_layer0 = host_end_ - layer_begin_;
    g.type_k = options_.type_k;
    g.type_v = options_.type_v;
    g.cells[KvCache::kFull] = cache_.capacity(KvCache::kFull);
    g.cells[KvCache::kWindow] = cache_.capacity(KvCache::kWindow);
    for (int64_t il = host_end_; il < layer_end_; ++il) g.window.push_back(cache_.pool_of(il - layer_begin_) == KvCache::kWindow);
    Result<std::unique_ptr<GpuLayers>> gpu = GpuLayers::Create(options_.device, model, g);
    if (gpu.ok()) {
      gpu_ = std::move(*gpu);
    } else {
      gpu_status_ = gpu.status();
    }
  }
}

void Context::Reserve(int64_t n) {
  if (n <= reserved_) return;
  reserved_ = n;
  x_.resize(n * p_.n_embd);
  xn_.resize(n * p_.n_embd);
  tmp_.resize(n * p_.n_embd);
  q_.resize(n * p_.q_dim());
  att_.resize(n * p_.q_dim());
  k_buf_.resize(n * p_.kv_dim());
  v_buf_.resize(n * p_.kv_dim());
  rope_cs_.resize(n * p_.head_dim);
  if (p_.n_swa > 0) rope_cs_local_.resize(n * p_.head_dim);
  // With experts a decode step holds every chosen expert's gate and up (n_expert_used rows).
  const int64_t ff = std::max({n * p_.n_ff, n * p_.n_ff_exp, p_.n_expert_used * p_.n_ff_exp, n * p_.n_ff_shexp});
  gate_.resize(ff);
  up_.resize(ff);
  if (p_.ffn_act == FfnActivation::kGelu) gelu_.resize(ff);
  cells_.resize(n);
  window_cells_.resize(n);
  if (p_.is_moe()) {
    router_.resize(n * p_.n_expert);
    chosen_e_.resize(n * p_.n_expert_used);
    expert_order_.resize(p_.n_expert_used);
    chosen_w_.resize(n * p_.n_expert_used);
    xe_.resize(n * p_.n_embd);
    ye_.resize(std::max(n, p_.n_expert_used) * p_.n_embd);
    if (p_.n_ff_shexp > 0) shexp_out_.resize(n * p_.n_embd);
    expert_rows_.resize(n * p_.n_expert_used);
    expert_begin_.resize(p_.n_expert + 1);
    expert_next_.resize(p_.n_expert);
    expert_jobs_.resize(2 * p_.n_expert_used);
  }
  plan_seqs_.reserve(n);
  tok_order_.resize(n);
  for (CellPlan& c : cell_plans_) {
    c.seq_begin.reserve(n + 1);
    c.tok_len.resize(n);
    c.tok_start.resize(n);
  }
  tiles_.reserve(n);
}

Status Context::Embed(const Batch& b) {
  const quant::TypeOps* ops = quant::ReferenceOps(model_.token_embd.type);
  const size_t row_bytes = quant::RowBytes(model_.token_embd.type, p_.n_embd);
  const uint8_t* base = static_cast<const uint8_t*>(model_.token_embd.data);
  for (int64_t t = 0; t < b.size(); ++t) {
    const int32_t id = b.tokens[t];
    if (id < 0 || id >= p_.n_vocab) {
      return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                                     std::to_string(p_.n_vocab) + ")");
    }
    ops->dequantize_row(base + id * row_bytes, &x_[t * p_.n_embd], p_.n_embd);
    if (p_.embd_scale) k_.f.scale(&x_[t * p_.n_embd], std::sqrt(static_cast<float>(p_.n_embd)), p_.n_embd);
  }
  return Status::Ok();
}

Status Context::Forward(const Batch& b, const float* hidden_in) {
  const int64_t n = b.size();
  if (!gpu_status_.ok()) return gpu_status_;
  if (n == 0) return Status::InvalidArgument("empty batch");
  const bool embed = hidden_in == nullptr;
  if (embed && !is_first()) {
    return Status::InvalidArgument("a stage that starts at layer " + std::to_string(layer_begin_) +
                                   " needs hidden states, not tokens");
  }
  if ((embed && static_cast<int64_t>(b.tokens.size()) != n) ||
      static_cast<int64_t>(b.seq.size()) != n || static_cast<int64_t>(b.logits.size()) != n) {
    return Status::InvalidArgument("batch fields have different lengths");
  }
  Reserve(n);
  if (embed) {
    TANDEM_RETURN_IF_ERROR(Embed(b));
  } else {
    std::copy(hidden_in, hidden_in + n * p_.n_embd, x_.begin());
  }
  TANDEM_RETURN_IF_ERROR(cache_.Allocate(b.seq.data(), b.pos.data(), n, cells_.data(), window_cells_.data()));
  PlanAttention(b);
  RopeAngles(b);
  for (int64_t il = layer_begin_; il < host_end_; ++il) {
    Layer(il, b, cache_.pool_of(il - layer_begin_) == KvCache::kWindow ? window_cells_.data() : cells_.data());
  }
  n_logits_ = 0;
  if (gpu_ != nullptr) {
    Status st = RunGpu(b);
    if (!st.ok()) {
      // No cell of the batch stays claimed: each sequence from its lowest position in it.
      for (int32_t seq : plan_seqs_) {
        int32_t low = INT32_MAX;
        for (int64_t t = 0; t < n; ++t) {
          if (b.seq[t] == seq) low = std::min(low, b.pos[t]);
        }
        cache_.Truncate(seq, low);
      }
      return st;
    }
  } else if (is_last()) {
    Head(b);
  }
  return Status::Ok();
}

// The batch as the GPU layers see it: each token's cells, each pool's cells by sequence and
// position with each token's part of them, the RoPE angles, the rows wanting logits.
Status Context::RunGpu(const Batch& b) {
  const int64_t n = b.size();
  if (cache_.capacity(KvCache::kWindow) > 0) TANDEM_RETURN_IF_ERROR(gpu_->GrowWindow(cache_.capacity(KvCache::kWindow)));
  GpuBatch g;
  g.n = n;
  for (int pool = 0; pool < 2; ++pool) {
    if (pool == KvCache::kWindow && !cache_.has_window()) continue;
    const int64_t* cells = pool == KvCache::kFull ? cells_.data() : window_cells_.data();
    const CellPlan& cp = cell_plans_[pool];
    gpu_cells_[pool].assign(cells, cells + n);
    const int64_t listed = cp.seq_begin.back();
    gpu_seq_cells_[pool].assign(cp.seq_cells.begin(), cp.seq_cells.begin() + listed);
    gpu_tok_[pool].resize(3 * n);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t k = std::lower_bound(plan_seqs_.begin(), plan_seqs_.end(), b.seq[t]) - plan_seqs_.begin();
      gpu_tok_[pool][3 * t] = static_cast<int32_t>(cp.seq_begin[k]);
      gpu_tok_[pool][3 * t + 1] = static_cast<int32_t>(cp.tok_start[t]);
      gpu_tok_[pool][3 * t + 2] = static_cast<int32_t>(cp.tok_len[t]);
    }
    g.cells[pool] = gpu_cells_[pool].data();
    g.seq_cells[pool] = &gpu_seq_cells_[pool];
    g.tok[pool] = &gpu_tok_[pool];
  }
  g.rope_cs = rope_cs_.data();
  g.rope_cs_local = p_.n_swa > 0 ? rope_cs_local_.data() : nullptr;  // only sliding layers read it
  gpu_logit_rows_.clear();
  if (is_last()) {
    for (int64_t t = 0; t < n; ++t) {
      if (b.logits[t]) gpu_logit_rows_.push_back(static_cast<int32_t>(t));
    }
    if (logits_.size() < gpu_logit_rows_.size() * p_.n_vocab) logits_.resize(gpu_logit_rows_.size() * p_.n_vocab);
  }
  g.logit_rows = gpu_logit_rows_.data();
  g.n_logits = static_cast<int64_t>(gpu_logit_rows_.size());
  TANDEM_RETURN_IF_ERROR(gpu_->Forward(g, x_.data(), logits_.data(), expert_log_));
  n_logits_ = g.n_logits;
  return Status::Ok();
}

void Context::Mul(const Matrix& m, const float* in, int64_t nt, float* out, int64_t stride) {
  if (m.interleaved) {
    kernels::MatMulInterleaved(k_, pool_, m.type, m.data, m.rows, m.cols, in, nt, out, stride, scratch_);
  } else {
    MatMul(k_, pool_, m.type, m.data, m.rows, m.cols, in, nt, out, stride, scratch_);
  }
}

void Context::MulSameInput(std::initializer_list<Product> products, const float* in, int64_t nt) {
  constexpr size_t kMax = 3;
  if (products.size() > kMax) {
    for (const Product& p : products) Mul(*p.m, in, nt, p.out, p.m->rows);
    return;
  }
  if (nt != 1) {
    // Interleaved weights (prompts, batches): one quantization of the input and one pass of the
    // pool for all of them.
    const int64_t cols = products.begin()->m->cols;
    const bool together = std::all_of(products.begin(), products.end(),
                                      [&](const Product& p) { return p.m->interleaved && p.m->cols == cols; });
    if (!together) {
      for (const Product& p : products) Mul(*p.m, in, nt, p.out, p.m->rows);
      return;
    }
    kernels::GemmJob jobs[kMax];
    size_t n = 0;
    for (const Product& p : products) jobs[n++] = {p.m->type, p.m->data, p.m->rows, p.out, p.m->rows};
    kernels::MatMulInterleavedSameInput(k_, pool_, std::span(jobs, n), cols, in, nt, scratch_);
    return;
  }
  kernels::MatVecJob jobs[kMax];
  size_t n = 0;
  for (const Product& p : products) {
    jobs[n++] = {p.m->type, p.m->data, p.m->rows, p.m->cols, in, p.out, p.m->interleaved};
  }
  kernels::MatVecBatch(k_, pool_, std::span(jobs, n), scratch_);
}

void Context::Layer(int64_t il, const Batch& b, const int64_t* cells) {
  const LayerWeights& w = model_.layers[il];
  const int64_t n = b.size(), E = p_.n_embd, D = p_.head_dim;
  const int64_t qd = p_.q_dim(), kvd = p_.kv_dim();
  const kernels::FloatOps& f = k_.f;
  auto mm = [&](const Matrix& m, const float* in, int64_t nt, float* out) {
    Mul(m, in, nt, out, m.rows);
  };

  // Attention block: norm, projections.
  ForEachToken(pool_, n, [&](int64_t t) { f.rmsnorm(&x_[t * E], w.attn_norm, &xn_[t * E], E, p_.rms_eps); });
  MulSameInput({{&w.wq, q_.data()}, {&w.wk, k_buf_.data()}, {&w.wv, v_buf_.data()}}, xn_.data(), n);
  auto store = [&](TensorType type, const float* x, uint8_t* row) {  // one head's row
    switch (type) {
      case TensorType::kF16: k_.attn.fp32_to_fp16(x, reinterpret_cast<uint16_t*>(row), D); break;
      case TensorType::kQ8_0: k_.quantize_act[static_cast<uint32_t>(type)](x, row, D); break;
      default: std::memcpy(row, x, D * sizeof(float)); break;
    }
  };
  const int64_t half = D / 2;
  const float* rope_cs = p_.IsLocalLayer(il) ? rope_cs_local_.data() : rope_cs_.data();
  // Per token (on the pool's threads when there are several): biases, norms, rotation, the cache.
  ForEachToken(pool_, n, [&](int64_t t) {
    const float* cs = rope_cs + t * D;  // cos[half], sin[half] at the token's position
    float* q = &q_[t * qd];
    float* k = &k_buf_[t * kvd];
    float* v = &v_buf_[t * kvd];
    if (w.bq != nullptr) {
      f.add(q, w.bq, q, qd);
      f.add(k, w.bk, k, kvd);
      f.add(v, w.bv, v, kvd);
    }
    if (w.q_norm != nullptr) {
      for (int64_t h = 0; h < p_.n_head; ++h) f.rmsnorm(q + h * D, w.q_norm, q + h * D, D, p_.rms_eps);
      for (int64_t h = 0; h < p_.n_head_kv; ++h) f.rmsnorm(k + h * D, w.k_norm, k + h * D, D, p_.rms_eps);
    }
    const bool halves = p_.rope_order == RopeOrder::kHalves;
    for (int64_t h = 0; h < p_.n_head; ++h) f.rope(q + h * D, D, cs, cs + half, halves);
    for (int64_t h = 0; h < p_.n_head_kv; ++h) f.rope(k + h * D, D, cs, cs + half, halves);
    // Store K and V in the cache in its types.
    for (int64_t h = 0; h < p_.n_head_kv; ++h) {
      store(cache_.type_k(), k + h * D, cache_.k(il - layer_begin_, cells[t], h));
      store(cache_.type_v(), v + h * D, cache_.v(il - layer_begin_, cells[t], h));
    }
  });
  Attention(il, b, n);
  // A small batch adds the output projection to the residual as it is made (MatMulInterleavedAdd:
  // the same bits as the product then the add, without writing the product out).
  const bool small = kernels::SmallBatch(n);
  if (small && w.wo.interleaved && w.post_attn_norm == nullptr) {
    kernels::MatMulInterleavedAdd(k_, pool_, w.wo.type, w.wo.data, w.wo.rows, w.wo.cols, att_.data(), n, x_.data(), E,
                                  scratch_);
    ForEachToken(pool_, n, [&](int64_t t) { f.rmsnorm(&x_[t * E], w.ffn_norm, &xn_[t * E], E, p_.rms_eps); });
  } else {
    mm(w.wo, att_.data(), n, xn_.data());
    // Residual, then the feed-forward block's norm.
    ForEachToken(pool_, n, [&](int64_t t) {
      if (w.post_attn_norm != nullptr) f.rmsnorm(&xn_[t * E], w.post_attn_norm, &xn_[t * E], E, p_.rms_eps);
      f.add(&x_[t * E], &xn_[t * E], &x_[t * E], E);
      f.rmsnorm(&x_[t * E], w.ffn_norm, &xn_[t * E], E, p_.rms_eps);
    });
  }
  // Feed-forward block: the FFN (or the experts), its norm, residual (added by the FFN itself
  // where it can).
  if (!FeedForward(w, n, tmp_.data(), small && w.post_ffn_norm == nullptr ? x_.data() : nullptr)) {
    ForEachToken(pool_, n, [&](int64_t t) {
      if (w.post_ffn_norm != nullptr) f.rmsnorm(&tmp_[t * E], w.post_ffn_norm, &tmp_[t * E], E, p_.rms_eps);
      f.add(&x_[t * E], &tmp_[t * E], &x_[t * E], E);
    });
  }
}

// gate = gelu(gate) * up with GELU's tanh approximation (Gemma's gelu_pytorch_tanh), written as
// gelu(x) = x * sigmoid(2u) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), so the
// kernels' vector exp does the work, on every thread.
void Context::GeluMul(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  float* e = gelu_.data();
  pool_.Run([&](int t, int nt) {
    const int64_t b = n * t / nt, end = n * (t + 1) / nt;
    for (int64_t i = b; i < end; ++i) {
      const float x = gate[i];
      e[i] = -2.0f * kSqrt2OverPi * x * (1.0f + 0.044715f * x * x);
    }
    if (end > b) k_.attn.exp_sum(e + b, 0.0f, e + b, end - b);
    for (int64_t i = b; i < end; ++i) gate[i] = gate[i] * up[i] / (1.0f + e[i]);
  });
}

bool Context::FeedForward(const LayerWeights& w, int64_t n, float* out, float* residual) {
  if (p_.is_moe()) {
    MixtureOfExperts(w, n, out);
    return false;
  }
  auto mm = [&](const Matrix& m, const float* in, int64_t nt, float* o) {
    Mul(m, in, nt, o, m.rows);
  };
  if (p_.ffn_act == FfnActivation::kSilu && w.gate.interleaved && w.up.interleaved && w.gate.rows == w.up.rows &&
      kernels::SiluMulFusable(k_, w.gate.type, w.up.type, w.gate.cols, n)) {
    // A small batch: gate, up and the gating in one pass, only the gated rows written; where the
    // down matrix allows, as its activations (matmul.h).
    const kernels::GemmJob gate{w.gate.type, w.gate.data, w.gate.rows}, up{w.up.type, w.up.data, w.up.rows};
    if (w.down.interleaved &&
        kernels::SiluMulActsFusable(k_, w.gate.type, w.up.type, w.down.type, w.gate.cols, w.gate.rows, n)) {
      const size_t stride = kernels::MatMulInterleavedSiluMulActs(k_, pool_, gate, up, w.down.type, w.gate.cols,
                                                                  xn_.data(), n, gated_act_, scratch_);
      if (residual != nullptr) {  // added to it as the products are made (MatMulInterleavedAdd)
        kernels::MatMulInterleavedActs(k_, pool_, w.down.type, w.down.data, w.down.rows, w.down.cols,
                                       gated_act_.data(), stride, n, residual, p_.n_embd, true);
        return true;
      }
      kernels::MatMulInterleavedActs(k_, pool_, w.down.type, w.down.data, w.down.rows, w.down.cols, gated_act_.data(),
                                     stride, n, out, w.down.rows);
      return false;
    }
    kernels::MatMulInterleavedSiluMul(k_, pool_, gate, up, w.gate.cols, xn_.data(), n, gate_.data(), p_.n_ff, scratch_);
    mm(w.down, gate_.data(), n, out);
    return false;
  }
  MulSameInput({{&w.gate, gate_.data()}, {&w.up, up_.data()}}, xn_.data(), n);
  if (p_.ffn_act == FfnActivation::kGelu) {
    GeluMul(gate_.data(), up_.data(), n * p_.n_ff);
  } else {
    float* g = gate_.data();
    const float* u = up_.data();
    ForEachToken(pool_, n, [&](int64_t t) { k_.f.silu_mul(g + t * p_.n_ff, u + t * p_.n_ff, g + t * p_.n_ff, p_.n_ff); });
  }
  mm(w.down, gate_.data(), n, out);
  return false;
}

// Each token's experts (model/moe.h), then per expert: its tokens gathered, one
// pass of gate, up and down over them, and each output added to its token with the weight.
void Context::MixtureOfExperts(const LayerWeights& w, int64_t n, float* out) {
  const int64_t E = p_.n_embd, F = p_.n_ff_exp, ne = p_.n_expert, k = p_.n_expert_used;
  auto mm = [&](const Matrix& m, const float* in, int64_t nt, float* o) {
    Mul(m, in, nt, o, m.rows);
  };
  mm(w.router, xn_.data(), n, router_.data());
  std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    SelectExperts(&router_[t * ne], ne, k, p_.expert_weights_norm, &chosen_e_[t * k], &chosen_w_[t * k]);
    for (int64_t j = 0; j < k; ++j) ++expert_begin_[chosen_e_[t * k + j] + 1];
  }
  if (expert_log_ != nullptr) expert_log_->insert(expert_log_->end(), chosen_e_.begin(), chosen_e_.begin() + n * k);
  if (margin_log_ != nullptr) {
    for (int64_t t = 0; t < n; ++t) {
      const float* prob = &router_[t * ne];  // the softmax, after SelectExperts
      const int32_t* e = &chosen_e_[t * k];
      float left_out = 0;
      for (int32_t c = 0; c < ne; ++c) {
        if (std::find(e, e + k, c) == e + k) left_out = std::max(left_out, prob[c]);
      }
      margin_log_->push_back(left_out > 0 ? std::log(prob[e[k - 1]]) - std::log(left_out) : INFINITY);
    }
  }
  // Counting sort of the (token, choice) pairs by expert.
  for (int64_t c = 0; c < ne; ++c) expert_begin_[c + 1] += expert_begin_[c];
  std::vector<int64_t>& cursor = expert_rows_;  // the (token, choice) pairs, by expert
  std::copy(expert_begin_.begin(), expert_begin_.end() - 1, expert_next_.begin());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) cursor[expert_next_[chosen_e_[t * k + j]]++] = t * k + j;
  }
  std::fill(out, out + n * E, 0.0f);
  if (n == 1) {
    // A decode step: k experts of one token, in two passes of the pool (gate and up of every
    // chosen expert, then their downs) rather than three per expert.
    kernels::MatVecJob* jobs = expert_jobs_.data();
    for (int64_t j = 0; j < k; ++j) {
      const Matrix g = w.gate_exps.Expert(chosen_e_[j]), u = w.up_exps.Expert(chosen_e_[j]);
      jobs[2 * j] = {g.type, g.data, g.rows, g.cols, xn_.data(), &gate_[j * F], g.interleaved};
      jobs[2 * j + 1] = {u.type, u.data, u.rows, u.cols, xn_.data(), &up_[j * F], u.interleaved};
    }
    kernels::MatVecBatch(k_, pool_, std::span(jobs, 2 * k), scratch_);
    k_.f.silu_mul(gate_.data(), up_.data(), gate_.data(), k * F);
    for (int64_t j = 0; j < k; ++j) {
      const Matrix d = w.down_exps.Expert(chosen_e_[j]);
      jobs[j] = {d.type, d.data, d.rows, d.cols, &gate_[j * F], &ye_[j * E], d.interleaved};
    }
    kernels::MatVecBatch(k_, pool_, std::span(jobs, k), scratch_);
    // Summed by expert id, as the batch path below sums them: a token gets the same bits alone
    // and in a batch (speculative verification, a server's batch).
    int64_t* order = expert_order_.data();
    for (int64_t j = 0; j < k; ++j) order[j] = j;
    std::sort(order, order + k, [&](int64_t a, int64_t b) { return chosen_e_[a] < chosen_e_[b]; });
    for (int64_t j = 0; j < k; ++j) k_.f.axpy(chosen_w_[order[j]], &ye_[order[j] * E], out, E);
    SharedExpert(w, n, out);
    return;
  }
  for (int64_t c = 0; c < ne; ++c) {
    const int64_t b = expert_begin_[c], m = expert_begin_[c + 1] - b;
    if (m == 0) continue;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = cursor[b + i] / k;
      std::memcpy(&xe_[i * E], &xn_[t * E], E * sizeof(float));
    }
    mm(w.gate_exps.Expert(c), xe_.data(), m, gate_.data());
    mm(w.up_exps.Expert(c), xe_.data(), m, up_.data());
    k_.f.silu_mul(gate_.data(), up_.data(), gate_.data(), m * F);
    mm(w.down_exps.Expert(c), gate_.data(), m, ye_.data());
    for (int64_t i = 0; i < m; ++i) {
      const int64_t pair = cursor[b + i];
      k_.f.axpy(chosen_w_[pair], &ye_[i * E], &out[(pair / k) * E], E);
    }
  }
  SharedExpert(w, n, out);
}

// qwen2moe: every token also goes through the shared expert (a SiLU-gated FFN), added to the
// routed experts' sum with the weight sigmoid(x . shexp_gate_inp).
void Context::SharedExpert(const LayerWeights& w, int64_t n, float* out) {
  if (w.shexp_gate_inp == nullptr) return;
  const int64_t E = p_.n_embd, F = p_.n_ff_shexp;
  Mul(w.gate_shexp, xn_.data(), n, gate_.data(), F);
  Mul(w.up_shexp, xn_.data(), n, up_.data(), F);
  k_.f.silu_mul(gate_.data(), up_.data(), gate_.data(), n * F);
  Mul(w.down_shexp, gate_.data(), n, shexp_out_.data(), E);
  for (int64_t t = 0; t < n; ++t) {
    const float g = 1.0f / (1.0f + std::exp(-k_.f.dot(&xn_[t * E], w.shexp_gate_inp, E)));
    k_.f.axpy(g, &shexp_out_[t * E], &out[t * E], E);
  }
}

void Context::RopeAngles(const Batch& b) {
  const int64_t D = p_.head_dim, half = D / 2;
  auto fill = [&](const std::vector<float>& inv_freq, std::vector<float>& cs) {
    ForEachToken(pool_, b.size(), [&](int64_t t) {
      for (int64_t i = 0; i < half; ++i) {
        const float theta = static_cast<float>(b.pos[t]) * inv_freq[i];
        cs[t * D + i] = std::cos(theta);
        cs[t * D + half + i] = std::sin(theta);
      }
    });
  };
  fill(rope_inv_freq_, rope_cs_);
  if (p_.n_swa > 0) fill(rope_inv_freq_local_, rope_cs_local_);
}

// Lists the cells of each sequence of the batch by position, in each pool of the cache its
// layers use (a token attends to the prefix of its sequence's list at positions <= its own),
// and cuts the batch's tokens into tiles.
void Context::PlanAttention(const Batch& b) {
  const int64_t n = b.size();
  plan_seqs_.assign(b.seq.begin(), b.seq.end());
  std::sort(plan_seqs_.begin(), plan_seqs_.end());
  plan_seqs_.erase(std::unique(plan_seqs_.begin(), plan_seqs_.end()), plan_seqs_.end());
  // Tokens by (sequence, position); tiles of consecutive tokens of one sequence.
  for (int64_t t = 0; t < n; ++t) tok_order_[t] = t;
  std::sort(tok_order_.begin(), tok_order_.begin() + n, [&](int64_t x, int64_t y) {
    if (b.seq[x] != b.seq[y]) return b.seq[x] < b.seq[y];
    return b.pos[x] != b.pos[y] ? b.pos[x] < b.pos[y] : x < y;
  });
  tiles_.clear();
  for (int64_t i = 0, k = -1; i < n; ++i) {
    const int32_t seq = b.seq[tok_order_[i]];
    if (i == 0 || seq != b.seq[tok_order_[i - 1]]) ++k;  // plan_seqs_[k] == seq
    if (tiles_.empty() || tiles_.back().seq != k || tiles_.back().end - tiles_.back().begin == tile_tokens_) {
      tiles_.push_back({k, i, i});
    }
    ++tiles_.back().end;
  }
  PlanCells(b, KvCache::kFull);
  if (cache_.has_window()) PlanCells(b, KvCache::kWindow);
}

void Context::PlanCells(const Batch& b, KvCache::Pool pool) {
  CellPlan& cp = cell_plans_[pool];
  const int64_t n = b.size(), ns = static_cast<int64_t>(plan_seqs_.size());
  auto index_of = [&](int32_t seq) -> int64_t {
    if (ns == 1) return plan_seqs_[0] == seq ? 0 : -1;
    const auto it = std::lower_bound(plan_seqs_.begin(), plan_seqs_.end(), seq);
    return it != plan_seqs_.end() && *it == seq ? it - plan_seqs_.begin() : -1;
  };
  if (static_cast<int64_t>(cp.seq_cells.size()) < cache_.capacity(pool)) {  // the window pool grew
    cp.seq_cells.resize(cache_.capacity(pool));
    cp.seq_pos.resize(cache_.capacity(pool));
  }
  // Counting sort of the cells by sequence, then each sequence's cells by position.
  std::vector<int64_t>& begin = cp.seq_begin;
  begin.assign(ns + 1, 0);
  const int64_t high = cache_.high_water(pool);
  for (int64_t c = 0; c < high; ++c) {
    if (cache_.seq_of(pool, c) < 0) continue;
    const int64_t k = index_of(cache_.seq_of(pool, c));
    if (k >= 0) ++begin[k + 1];
  }
  for (int64_t k = 0; k < ns; ++k) begin[k + 1] += begin[k];
  for (int64_t c = 0, k = 0; c < high; ++c) {  // one cursor per sequence: begin itself,
    if (cache_.seq_of(pool, c) < 0) continue;   // shifted down by one slot and restored below
    if ((k = index_of(cache_.seq_of(pool, c))) >= 0) cp.seq_cells[begin[k]++] = c;
  }
  for (int64_t k = ns; k > 0; --k) begin[k] = begin[k - 1];
  begin[0] = 0;
  for (int64_t k = 0; k < ns; ++k) {
    int64_t* first = &cp.seq_cells[begin[k]];
    int64_t* last = &cp.seq_cells[begin[k + 1]];
    std::sort(first, last, [&](int64_t x, int64_t y) {
      const int32_t px = cache_.pos_of(pool, x), py = cache_.pos_of(pool, y);
      return px != py ? px < py : x < y;
    });
    for (int64_t* c = first; c != last; ++c) cp.seq_pos[c - cp.seq_cells.data()] = cache_.pos_of(pool, *c);
  }
  // Each token attends to the cells of its sequence up to its position; a sliding-window layer
  // to positions p - n_swa + 1 .. p of them.
  for (int64_t t = 0; t < n; ++t) {
    const int64_t k = index_of(b.seq[t]);
    const int32_t* first = cp.seq_pos.data() + begin[k];
    const int32_t* last = cp.seq_pos.data() + begin[k + 1];
    cp.tok_len[t] = std::upper_bound(first, last, b.pos[t]) - first;
    cp.tok_start[t] = p_.n_swa > 0 ? std::lower_bound(first, last, static_cast<int64_t>(b.pos[t]) - p_.n_swa + 1) - first : 0;
  }
}

// Jobs are (tile, KV head) pairs, taken by the threads from a shared counter, the tiles latest in
// their sequence (the most cells) first.
void Context::Attention(int64_t il, const Batch&, int64_t) {
  const int64_t n_kv = p_.n_head_kv;
  const int64_t n_tiles = static_cast<int64_t>(tiles_.size()), n_jobs = n_tiles * n_kv;
  const int64_t layer = il - layer_begin_;
  const bool local = p_.IsLocalLayer(il);
  const CellPlan& plan = cell_plans_[cache_.pool_of(layer)];
  next_job_.store(0, std::memory_order_relaxed);
  pool_.Run([&](int th, int) {
    for (int64_t job; (job = next_job_.fetch_add(1, std::memory_order_relaxed)) < n_jobs;) {
      AttendTile(th, layer, tiles_[n_tiles - 1 - job / n_kv], job % n_kv, plan, local);
    }
  });
}

// One tile's query rows (token-major: row ti * group + g is head kvh * group + g of the tile's
// token ti) against the cells of its sequence. Tokens ascend by position, so each token's
// prefix of cells is at least as long as the previous token's.
void Context::AttendTile(int th, int64_t layer, const Tile& tile, int64_t kvh, const CellPlan& plan, bool local) {
  const kernels::FloatOps& f = k_.f;
  const kernels::AttnOps& a = k_.attn;
  const int64_t D = p_.head_dim, qd = p_.q_dim(), group = p_.n_head / p_.n_head_kv;
  const int64_t nt = tile.end - tile.begin, rows = nt * group;
  float* q = &att_q_[th * tile_rows_ * D];
  float* o = &att_o_[th * tile_rows_ * D];
  float* s = &att_s_[th * score_floats_];
  const void** kp = &att_kp_[th * row_ptrs_];
  const void** vp = &att_vp_[th * row_ptrs_];
  const int64_t* cells = &plan.seq_cells[plan.seq_begin[tile.seq]];
  const TensorType tk = cache_.type_k(), tv = cache_.type_v();
  auto len = [&](int64_t ti) { return plan.tok_len[tok_order_[tile.begin + ti]]; };
  // The first cell a row attends to: 0, or on a sliding-window layer its window's start.
  auto start = [&](int64_t ti) { return local ? plan.tok_start[tok_order_[tile.begin + ti]] : int64_t{0}; };
  auto point = [&](int64_t j0, int64_t nb) {  // row pointers of cells [j0, j0 + nb)
    for (int64_t j = 0; j < nb; ++j) {
      kp[j] = cache_.k(layer, cells[j0 + j], kvh);
      vp[j] = cache_.v(layer, cells[j0 + j], kvh);
    }
  };
  // Queries, scaled by 1/sqrt(head_dim) here rather than every score later.
  for (int64_t ti = 0; ti < nt; ++ti) {
    const int64_t t = tok_order_[tile.begin + ti];
    std::memcpy(q + ti * group * D, &q_[t * qd + kvh * group * D], group * D * sizeof(float));
  }
  f.scale(q, p_.AttentionScale(), rows * D);
  std::fill(o, o + rows * D, 0.0f);
  const int64_t n_max = len(nt - 1);

  if (!options_.flash_attn) {
    // Standard: all scores of the tile, a softmax per row over its prefix, then the V sum. The
    // products go by chunks of cells (kept in cache), each for the rows that reach it.
    point(0, n_max);
    // The chunks reached by the same rows go in one call (so a tile of a few tokens, whose rows
    // all reach every cell, makes one): the kernels transpose the queries and start their
    // prefetches once a call. The products are the same bits in any chunking.
    auto span = [&](int64_t j0, int64_t t0) {  // the end of the chunks from j0 that rows t0.. reach
      int64_t j1 = std::min(n_max, j0 + kStandardChunk);
      while (j1 < n_max && len(t0) > j1) j1 = std::min(n_max, j1 + kStandardChunk);
      return j1;
    };
    for (int64_t j0 = 0, t0 = 0, j1; j0 < n_max; j0 = j1) {
      while (len(t0) <= j0) ++t0;
      j1 = span(j0, t0);
      a.scores(tk, D, q + t0 * group * D, D, rows - t0 * group, kp + j0, j1 - j0, s + t0 * group * n_max + j0, n_max);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * n_max;
      const int64_t n = len(r / group), first = std::min(start(r / group), n);
      if (n > first) f.softmax(row + first, n - first);
      std::fill(row, row + first, 0.0f);
      std::fill(row + n, row + n_max, 0.0f);
    }
    for (int64_t j0 = 0, t0 = 0, j1; j0 < n_max; j0 = j1) {
      while (len(t0) <= j0) ++t0;
      j1 = span(j0, t0);
      a.accumulate(tv, D, s + t0 * group * n_max + j0, n_max, rows - t0 * group, vp + j0, j1 - j0,
                   o + t0 * group * D, D);
    }
  } else {
    // Flash: blocks of cells; per row a running max m and sum l of exp(score - m), the
    // accumulated V rescaled by exp(m_old - m_new) whenever m grows.
    float* m = &att_m_[th * tile_rows_];
    float* l = &att_l_[th * tile_rows_];
    std::fill(m, m + rows, -INFINITY);
    std::fill(l, l + rows, 0.0f);
    // Blocks start at positions that are multiples of kFlashBlock, so a window pool that
    // dropped the cells before some position splits the rest as the full list does, and the
    // online softmax rescales at the same cells: the same bits with and without the dropped ones.
    const int64_t shift = plan.seq_pos[plan.seq_begin[tile.seq]] % kFlashBlock;
    int64_t t0 = 0;  // first token whose prefix reaches the block
    for (int64_t jb = -shift; jb < n_max; jb += kFlashBlock) {
      const int64_t j0 = std::max<int64_t>(jb, 0), nb = std::min(jb + kFlashBlock, n_max) - j0;
      while (len(t0) <= j0) ++t0;
      const int64_t r0 = t0 * group;
      point(j0, nb);
      a.scores(tk, D, q + r0 * D, D, rows - r0, kp, nb, s, kFlashBlock);
      for (int64_t r = r0; r < rows; ++r) {
        float* row = s + (r - r0) * kFlashBlock;
        const int64_t v = std::min(nb, len(r / group) - j0);
        // Cells before the row's window (sliding-window layers) do not count.
        const int64_t lo = std::clamp<int64_t>(start(r / group) - j0, 0, std::max<int64_t>(v, 0));
        if (lo >= v) {
          std::fill(row, row + nb, 0.0f);
          continue;
        }
        const float mx = RowMax(row + lo, v - lo);
        if (mx > m[r]) {
          if (m[r] != -INFINITY) {
            const float c = std::exp(m[r] - mx);
            l[r] *= c;
            f.scale(o + r * D, c, D);
          }
          m[r] = mx;
        }
        l[r] += a.exp_sum(row + lo, m[r], row + lo, v - lo);
        std::fill(row, row + lo, 0.0f);
        std::fill(row + v, row + nb, 0.0f);
      }
      a.accumulate(tv, D, s, kFlashBlock, rows - r0, vp, nb, o + r0 * D, D);
    }
    for (int64_t r = 0; r < rows; ++r) f.scale(o + r * D, l[r] > 0 ? 1.0f / l[r] : 0.0f, D);
  }
  for (int64_t ti = 0; ti < nt; ++ti) {
    const int64_t t = tok_order_[tile.begin + ti];
    std::memcpy(&att_[t * qd + kvh * group * D], o + ti * group * D, group * D * sizeof(float));
  }
}

void Context::Head(const Batch& b) {
  const int64_t E = p_.n_embd;
  n_logits_ = 0;
  for (int64_t t = 0; t < b.size(); ++t) {
    if (b.logits[t]) {
      k_.f.rmsnorm(&x_[t * E], model_.output_norm, &xn_[n_logits_ * E], E, p_.rms_eps);
      ++n_logits_;
    }
  }
  if (n_logits_ == 0) return;
  if (logits_.size() < static_cast<size_t>(n_logits_ * p_.n_vocab)) {
    logits_.resize(n_logits_ * p_.n_vocab);
  }
  const Matrix& o = model_.output;
  Mul(o, xn_.data(), n_logits_, logits_.data(), p_.n_vocab);
  if (p_.logit_softcap > 0) {
    const float c = p_.logit_softcap;
    for (int64_t i = 0; i < n_logits_ * p_.n_vocab; ++i) logits_[i] = c * std::tanh(logits_[i] / c);
  }
}

}  // namespace tandem::model
