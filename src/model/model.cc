#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "base/mapped_file.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"

namespace tandem::model {
namespace {

using quant::TensorType;

class Binder {
 public:
  Binder(const gguf::GgufFile& f, uint64_t* bytes) : f_(f), bytes_(bytes) {}

  Status MatrixOf(const std::string& name, int64_t cols, int64_t rows, Matrix* out) {
    const gguf::TensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return Status::NotFound("tensor '" + name + "' is missing");
    if (t->n_dims != 2 || static_cast<int64_t>(t->ne[0]) != cols ||
        static_cast<int64_t>(t->ne[1]) != rows) {
      return Status::Corruption("tensor '" + name + "' has shape " + t->ShapeString() +
                                ", expected [" + std::to_string(cols) + ", " +
                                std::to_string(rows) + "]");
    }
    const quant::TypeOps* ops = quant::ReferenceOps(t->type);
    if (ops == nullptr || ops->vec_dot == nullptr) {
      return Status::Unsupported("tensor '" + name + "' has type " +
                                 std::string(gguf::TensorTypeName(t->type)) +
                                 ", which tandem cannot compute with");
    }
    *out = Matrix{t->type, t->data, rows, cols};
    *bytes_ += t->n_bytes;
    return Status::Ok();
  }

  // A 3-D tensor [cols, rows, n_expert] of experts.
  Status ExpertsOf(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert, ExpertMatrices* out) {
    const gguf::TensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return Status::NotFound("tensor '" + name + "' is missing");
    if (t->n_dims != 3 || static_cast<int64_t>(t->ne[0]) != cols || static_cast<int64_t>(t->ne[1]) != rows ||
        static_cast<int64_t>(t->ne[2]) != n_expert) {
      return Status::Corruption("tensor '" + name + "' has shape " + t->ShapeString() + ", expected [" +
                                std::to_string(cols) + ", " + std::to_string(rows) + ", " + std::to_string(n_expert) + "]");
    }
    const quant::TypeOps* ops = quant::ReferenceOps(t->type);
    if (ops == nullptr || ops->vec_dot == nullptr) {
      return Status::Unsupported("tensor '" + name + "' has type " + std::string(gguf::TensorTypeName(t->type)) +
                                 ", which tandem cannot compute with");
    }
    out->all = Matrix{t->type, t->data, rows * n_expert, cols};
    out->n_expert = n_expert;
    *bytes_ += t->n_bytes;
    return Status::Ok();
  }

  Status VectorOf(const std::string& name, int64_t n, const float** out, bool optional = false) {
    const gguf::TensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) {
      if (optional) return Status::Ok();
      return Status::NotFound("tensor '" + name + "' is missing");
    }
    if (t->type != TensorType::kF32 || static_cast<int64_t>(t->n_elements) != n) {
      return Status::Unsupported("tensor '" + name + "' must be f32 with " + std::to_string(n) +
                                 " elements (it is " +
                                 std::string(gguf::TensorTypeName(t->type)) + " " +
                                 t->ShapeString() + ")");
    }
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
      return Status::Corruption("tensor '" + name + "' is not 4-byte aligned");
    }
    *out = reinterpret_cast<const float*>(t->data);
    *bytes_ += t->n_bytes;
    return Status::Ok();
  }

 private:
  const gguf::GgufFile& f_;
  uint64_t* bytes_;
};

}  // namespace

Result<Model> Model::Load(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::Open(path));
  Result<ModelParams> p = ReadParams(f);
  if (!p.ok()) return p.status().WithContext(path);
  Model m(std::move(f), *p);
  Status st = m.Bind();
  if (!st.ok()) return st.WithContext(path);
  return m;
}

Status Model::Bind() {
  const ModelParams& p = params_;
  Binder b(file_, &weight_bytes_);
  TANDEM_RETURN_IF_ERROR(b.MatrixOf("token_embd.weight", p.n_embd, p.n_vocab, &token_embd));
  TANDEM_RETURN_IF_ERROR(b.VectorOf("output_norm.weight", p.n_embd, &output_norm));
  if (file_.FindTensor("output.weight") != nullptr) {
    TANDEM_RETURN_IF_ERROR(b.MatrixOf("output.weight", p.n_embd, p.n_vocab, &output));
  } else {
    output = token_embd;  // tied head
  }
  TANDEM_RETURN_IF_ERROR(b.VectorOf("rope_freqs.weight", p.head_dim / 2, &rope_freqs, true));
  layers.resize(p.n_layer);
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const std::string n = "blk." + std::to_string(l) + ".";
    LayerWeights& w = layers[l];
    TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "attn_norm.weight", p.n_embd, &w.attn_norm));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "attn_q.weight", p.n_embd, p.q_dim(), &w.wq));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "attn_k.weight", p.n_embd, p.kv_dim(), &w.wk));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "attn_v.weight", p.n_embd, p.kv_dim(), &w.wv));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "attn_output.weight", p.q_dim(), p.n_embd, &w.wo));
    if (p.qkv_bias) {
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "attn_q.bias", p.q_dim(), &w.bq));
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "attn_k.bias", p.kv_dim(), &w.bk));
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "attn_v.bias", p.kv_dim(), &w.bv));
    }
    if (p.qk_norm) {
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "attn_q_norm.weight", p.head_dim, &w.q_norm));
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "attn_k_norm.weight", p.head_dim, &w.k_norm));
    }
    if (p.post_norms) {
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "post_attention_norm.weight", p.n_embd, &w.post_attn_norm));
      TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "post_ffw_norm.weight", p.n_embd, &w.post_ffn_norm));
    }
    TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "ffn_norm.weight", p.n_embd, &w.ffn_norm));
    if (p.is_moe()) {
      TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_gate_inp.weight", p.n_embd, p.n_expert, &w.router));
      TANDEM_RETURN_IF_ERROR(b.ExpertsOf(n + "ffn_gate_exps.weight", p.n_embd, p.n_ff_exp, p.n_expert, &w.gate_exps));
      TANDEM_RETURN_IF_ERROR(b.ExpertsOf(n + "ffn_up_exps.weight", p.n_embd, p.n_ff_exp, p.n_expert, &w.up_exps));
      TANDEM_RETURN_IF_ERROR(b.ExpertsOf(n + "ffn_down_exps.weight", p.n_ff_exp, p.n_embd, p.n_expert, &w.down_exps));
      if (p.n_ff_shexp > 0) {
        TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "ffn_gate_inp_shexp.weight", p.n_embd, &w.shexp_gate_inp));
        TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_gate_shexp.weight", p.n_embd, p.n_ff_shexp, &w.gate_shexp));
        TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_up_shexp.weight", p.n_embd, p.n_ff_shexp, &w.up_shexp));
        TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_down_shexp.weight", p.n_ff_shexp, p.n_embd, &w.down_shexp));
      }
    } else {
      TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_gate.weight", p.n_embd, p.n_ff, &w.gate));
      TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_up.weight", p.n_embd, p.n_ff, &w.up));
      TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_down.weight", p.n_ff, p.n_embd, &w.down));
    }
  }
  return Status::Ok();
}

uint64_t Model::DecodeWeightBytes(int64_t layer_begin, int64_t layer_end, bool head) const {
  const ModelParams& p = params_;
  auto bytes = [](const Matrix& m) -> uint64_t {
    return m.data == nullptr ? 0 : quant::RowBytes(m.type, m.cols) * static_cast<uint64_t>(m.rows);
  };
  const uint64_t vec = sizeof(float);
  uint64_t total = 0;
  for (int64_t l = std::max<int64_t>(layer_begin, 0); l < std::min<int64_t>(layer_end, p.n_layer); ++l) {
    const LayerWeights& w = layers[l];
    total += bytes(w.wq) + bytes(w.wk) + bytes(w.wv) + bytes(w.wo);
    total += vec * (2 * p.n_embd + (w.bq ? p.q_dim() + 2 * p.kv_dim() : 0) + (w.q_norm ? 2 * p.head_dim : 0) +
                    (w.post_attn_norm ? 2 * p.n_embd : 0));
    if (p.is_moe()) {
      const uint64_t experts = bytes(w.gate_exps.all) + bytes(w.up_exps.all) + bytes(w.down_exps.all);
      total += bytes(w.router) + experts / static_cast<uint64_t>(p.n_expert) * static_cast<uint64_t>(p.n_expert_used);
      total += bytes(w.gate_shexp) + bytes(w.up_shexp) + bytes(w.down_shexp) + (w.shexp_gate_inp ? vec * p.n_embd : 0);
    } else {
      total += bytes(w.gate) + bytes(w.up) + bytes(w.down);
    }
  }
  if (head) total += bytes(output) + vec * p.n_embd;
  return total;
}

Status Model::CopyIntoMemory(int64_t layer_begin, int64_t layer_end, bool head,
                             const std::function<bool(uint64_t, uint64_t)>& progress) {
  if (layer_begin < 0 || layer_end > params_.n_layer || layer_begin > layer_end) {
    return Status::InvalidArgument("layer range [" + std::to_string(layer_begin) + ", " +
                                   std::to_string(layer_end) + ") is outside the model's " +
                                   std::to_string(params_.n_layer) + " layers");
  }
  auto resident = [&](const void* p) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (const LargeBuffer& r : resident_) {
      if (b >= r.data() && b < r.data() + r.size()) return true;
    }
    return false;
  };
  // Q4_0 / Q5_0 / Q8_0 / Q4_K matrices whose rows come in whole groups of 16 go into the interleaved layout
  // when the kernels have it; so do experts whose rows do (each expert is then interleaved on its own,
  // and a decode step reads a chosen expert's groups with the one-row interleaved kernel).
  const kernels::KernelTable& k = kernels::Best();
  std::vector<Matrix*> todo;
  std::vector<bool> interleaved;
  auto add = [&](Matrix* m, int64_t row_unit) {
    if (m->data == nullptr || resident(m->data)) return;
    todo.push_back(m);
    interleaved.push_back(kernels::HasInterleavedLayout(m->type) &&
                          k.gemm_interleaved[static_cast<uint32_t>(m->type)] != nullptr &&
                          row_unit % kernels::kInterleaveRows == 0);
  };
  for (int64_t l = layer_begin; l < layer_end; ++l) {
    LayerWeights& w = layers[l];
    for (Matrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.gate, &w.up, &w.down, &w.router, &w.gate_shexp, &w.up_shexp,
                      &w.down_shexp}) {
      add(m, m->rows);
    }
    for (ExpertMatrices* e : {&w.gate_exps, &w.up_exps, &w.down_exps}) {
      if (e->n_expert > 0) add(&e->all, e->all.rows / e->n_expert);
    }
  }
  if (head) add(&output, output.rows);
  if (todo.empty()) return Status::Ok();
  constexpr size_t kAlign = 64;
  auto bytes_of = [](const Matrix& m) { return quant::RowBytes(m.type, m.cols) * static_cast<size_t>(m.rows); };
  size_t total = 0;
  for (const Matrix* m : todo) total += (bytes_of(*m) + kAlign - 1) / kAlign * kAlign;
  TANDEM_ASSIGN_OR_RETURN(LargeBuffer buf, LargeBuffer::Allocate(total));
  // Copy everything first and repoint only at the end, so that a cancelled copy leaves the
  // model as it was (reading from the map).
  std::vector<size_t> offsets;
  offsets.reserve(todo.size());
  size_t off = 0, reported = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    Matrix* m = todo[i];
    const size_t n = bytes_of(*m);
    if (interleaved[i]) {
      kernels::Interleave(m->type, m->data, buf.data() + off, m->rows, m->cols);
    } else {
      std::memcpy(buf.data() + off, m->data, n);
    }
    // The copy is what is read from now on: the file pages leave this process's resident set at
    // once, so that it never holds both (a cancelled copy faults them back in when read). A tied
    // head is still read as the embedding, so those pages stay.
    if (!(m == &output && output.data == token_embd.data)) ReleaseMappedPages(m->data, n);
    offsets.push_back(off);
    off += (n + kAlign - 1) / kAlign * kAlign;
    if (progress && (off - reported >= (size_t{256} << 20) || off == total)) {
      reported = off;
      if (!progress(off, total)) {
        return Status::Cancelled("copying the weights into memory was cancelled");
      }
    }
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    todo[i]->data = buf.data() + offsets[i];
    todo[i]->interleaved = interleaved[i];
  }
  resident_.push_back(std::move(buf));
  copied_bytes_ += off;
  return Status::Ok();
}

}  // namespace tandem::model
