#include "model/forward.h"

#include <algorithm>
#include <cmath>

namespace tandem::model {

using kernels::MatMul;
using quant::TensorType;

Context::Context(const Model& model, int64_t n_ctx, int n_threads, int64_t layer_begin,
                 int64_t layer_end)
    : model_(model),
      p_(model.params()),
      k_(kernels::Best()),
      layer_begin_(layer_begin),
      layer_end_(layer_end < 0 ? model.params().n_layer : layer_end),
      pool_(n_threads),
      cache_(layer_end_ - layer_begin_, n_ctx, model.params().kv_dim()) {
  const int64_t half = p_.head_dim / 2;
  rope_inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(p_.rope_base), -2.0 * i / p_.head_dim);
    if (model.rope_freqs != nullptr) f /= model.rope_freqs[i];
    rope_inv_freq_[i] = static_cast<float>(f / p_.rope_scale);
  }
  rope_cs_.resize(p_.head_dim);
  scores_.resize(static_cast<size_t>(n_threads) * n_ctx);
  vacc_.resize(static_cast<size_t>(n_threads) * p_.head_dim);
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
  gate_.resize(n * p_.n_ff);
  up_.resize(n * p_.n_ff);
  cells_.resize(n);
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
  }
  return Status::Ok();
}

Status Context::Forward(const Batch& b, const float* hidden_in) {
  const int64_t n = b.size();
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
  // Claim cache cells, one run per sequence so positions stay with their sequence.
  for (int64_t t = 0; t < n; ++t) {
    Status st = cache_.Allocate(b.seq[t], &b.pos[t], 1, &cells_[t]);
    if (!st.ok()) {
      for (int64_t u = 0; u < t; ++u) cache_.Truncate(b.seq[u], b.pos[u]);
      return st;
    }
  }
  for (int64_t il = layer_begin_; il < layer_end_; ++il) Layer(il, b, cells_.data());
  n_logits_ = 0;
  if (is_last()) Head(b);
  return Status::Ok();
}

void Context::Layer(int64_t il, const Batch& b, const int64_t* cells) {
  const LayerWeights& w = model_.layers[il];
  const int64_t n = b.size(), E = p_.n_embd, D = p_.head_dim;
  const int64_t qd = p_.q_dim(), kvd = p_.kv_dim();
  const kernels::FloatOps& f = k_.f;
  auto mm = [&](const Matrix& m, const float* in, int64_t nt, float* out) {
    MatMul(k_, pool_, m.type, m.data, m.rows, m.cols, in, nt, out, m.rows, scratch_);
  };

  // Attention block: norm, projections.
  for (int64_t t = 0; t < n; ++t) f.rmsnorm(&x_[t * E], w.attn_norm, &xn_[t * E], E, p_.rms_eps);
  mm(w.wq, xn_.data(), n, q_.data());
  mm(w.wk, xn_.data(), n, k_buf_.data());
  mm(w.wv, xn_.data(), n, v_buf_.data());
  const int64_t half = D / 2;
  std::vector<float>& cs = rope_cs_;  // cos[half], sin[half] for one position
  for (int64_t t = 0; t < n; ++t) {
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
    for (int64_t i = 0; i < half; ++i) {
      const float theta = static_cast<float>(b.pos[t]) * rope_inv_freq_[i];
      cs[i] = std::cos(theta);
      cs[half + i] = std::sin(theta);
    }
    const bool halves = p_.rope_order == RopeOrder::kHalves;
    for (int64_t h = 0; h < p_.n_head; ++h) f.rope(q + h * D, D, cs.data(), cs.data() + half, halves);
    for (int64_t h = 0; h < p_.n_head_kv; ++h) f.rope(k + h * D, D, cs.data(), cs.data() + half, halves);
    // Store K and V in the cache as F16.
    uint16_t* kc = cache_.k(il - layer_begin_, cells[t]);
    uint16_t* vc = cache_.v(il - layer_begin_, cells[t]);
    for (int64_t i = 0; i < kvd; ++i) {
      kc[i] = quant::Fp32ToFp16(k[i]);
      vc[i] = quant::Fp32ToFp16(v[i]);
    }
  }
  Attention(il, b, n);
  mm(w.wo, att_.data(), n, xn_.data());
  for (int64_t t = 0; t < n; ++t) f.add(&x_[t * E], &xn_[t * E], &x_[t * E], E);

  // Feed-forward block: norm, SwiGLU, residual.
  for (int64_t t = 0; t < n; ++t) f.rmsnorm(&x_[t * E], w.ffn_norm, &xn_[t * E], E, p_.rms_eps);
  mm(w.gate, xn_.data(), n, gate_.data());
  mm(w.up, xn_.data(), n, up_.data());
  f.silu_mul(gate_.data(), up_.data(), gate_.data(), n * p_.n_ff);
  mm(w.down, gate_.data(), n, xn_.data());
  for (int64_t t = 0; t < n; ++t) f.add(&x_[t * E], &xn_[t * E], &x_[t * E], E);
}

// Each (token, head) pair attends over the cells of its sequence at positions <= its own.
void Context::Attention(int64_t il, const Batch& b, int64_t n) {
  const int64_t D = p_.head_dim, qd = p_.q_dim();
  const int64_t group = p_.n_head / p_.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t high = cache_.high_water();
  const kernels::TypeKernels& f16 = k_.of(TensorType::kF16);
  const int64_t layer = il - layer_begin_;
  pool_.Run([&](int th, int nth) {
    float* scores = &scores_[static_cast<size_t>(th) * cache_.n_ctx()];
    float* acc = &vacc_[static_cast<size_t>(th) * D];
    const Range r = SplitRange(n * p_.n_head, th, nth);
    for (int64_t job = r.begin; job < r.end; ++job) {
      const int64_t t = job / p_.n_head, h = job % p_.n_head, kvh = h / group;
      const float* q = &q_[t * qd + h * D];
      int64_t m = 0;
      float mx = -INFINITY;
      for (int64_t c = 0; c < high; ++c) {
        if (cache_.seq_of(c) != b.seq[t] || cache_.pos_of(c) > b.pos[t]) {
          continue;
        }
        const float s = f16.vec_dot(D, cache_.k(layer, c) + kvh * D, q) * scale;
        scores[c] = s;
        mx = std::max(mx, s);
        ++m;
      }
      for (int64_t i = 0; i < D; ++i) acc[i] = 0;
      double sum = 0;
      for (int64_t c = 0; c < high; ++c) {
        if (cache_.seq_of(c) != b.seq[t] || cache_.pos_of(c) > b.pos[t]) continue;
        const float e = std::exp(scores[c] - mx);
        sum += e;
        const uint16_t* v = cache_.v(layer, c) + kvh * D;
        for (int64_t i = 0; i < D; ++i) acc[i] += e * quant::Fp16ToFp32(v[i]);
      }
      float* out = &att_[t * qd + h * D];
      const float inv = m > 0 ? static_cast<float>(1.0 / sum) : 0.0f;
      for (int64_t i = 0; i < D; ++i) out[i] = acc[i] * inv;
    }
  });
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
  MatMul(k_, pool_, o.type, o.data, o.rows, o.cols, xn_.data(), n_logits_, logits_.data(),
         p_.n_vocab, scratch_);
}

}  // namespace tandem::model
