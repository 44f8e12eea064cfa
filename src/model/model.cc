#include "model/model.h"

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
    TANDEM_RETURN_IF_ERROR(b.VectorOf(n + "ffn_norm.weight", p.n_embd, &w.ffn_norm));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_gate.weight", p.n_embd, p.n_ff, &w.gate));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_up.weight", p.n_embd, p.n_ff, &w.up));
    TANDEM_RETURN_IF_ERROR(b.MatrixOf(n + "ffn_down.weight", p.n_ff, p.n_embd, &w.down));
  }
  return Status::Ok();
}

}  // namespace tandem::model
