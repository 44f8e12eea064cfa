#include "model/gpu_layers.h"

#include <algorithm>
#include <cstring>

namespace tandem::model {

using gpu::Buffer;
using gpu::Kernel;
using quant::TensorType;

namespace {

// Groups per dispatch dimension every Vulkan device takes (maxComputeWorkGroupCount's minimum).
constexpr int64_t kMaxGroups = 65535;

using gpu::MulPush;
struct RoutePush {
  uint32_t n_expert, k, normalize;
};
struct CombinePush {
  uint32_t n, len, k;
};
struct NormPush {
  uint32_t len, x_stride, y_stride;
  float eps;
  uint32_t row0;
};
struct RopeStorePush {
  uint32_t head_dim, q_stride, kv_dim, halves, q_heads, kv_heads, k_row_bytes, v_row_bytes;
};
struct AddPush {
  uint32_t n, b_len;
};
struct ActPush {
  uint32_t n, gelu;
};
struct AttnPush {
  uint32_t q_dim, head_dim, group, k_row_bytes, v_row_bytes;
  float scale;
  uint32_t windowed;
};
struct GatherPush {
  uint32_t len;
};
struct SoftcapPush {
  uint32_t n;
  float cap;
};

// A matrix in device memory: its rows split into parts no larger than one binding.
// How the CPU's product rounds a weight type's activations (quant::TypeOps::act_type): not at all
// (float weights), to Q8_0 or Q8_1 blocks of 32 (the same values), or to Q8_K blocks of 256.
enum class ActRound { kNone, kQ8_0, kQ8_K };
ActRound ActRoundOf(TensorType t) {
  switch (quant::ReferenceOps(t)->act_type) {
    case TensorType::kQ8_0:
    case TensorType::kQ8_1: return ActRound::kQ8_0;
    case TensorType::kQ8_K: return ActRound::kQ8_K;
    default: return ActRound::kNone;
  }
}

struct GpuMatrix {
  ActRound act = ActRound::kNone;
  Kernel kernel = Kernel::kMulF32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  struct Part {
    std::unique_ptr<Buffer> buf;
    int64_t first = 0, rows = 0;
  };
  std::vector<Part> parts;
};

// The experts of one mixture-of-experts matrix: whole experts per part, each part no larger than
// one binding.
struct GpuExperts {
  ActRound act = ActRound::kNone;
  Kernel kernel = Kernel::kMulIdF32;
  int64_t rows = 0, cols = 0;  // per expert
  size_t row_bytes = 0;
  struct Part {
    std::unique_ptr<Buffer> buf;
    int64_t first = 0, count = 0;  // experts
  };
  std::vector<Part> parts;
};

// Matrices of one type and width that take the same input, in one buffer, so that one dispatch
// makes all their products (MulPush::split1): queries, keys and values (or the first two), the
// FFN's gate and up. Their own GpuMatrix keep the type and shape, without parts.
struct GpuStack {
  GpuMatrix m;  // the rows of all, in order; no parts when not stacked
  int count = 0;
  int64_t split1 = 0, split2 = 0;
};

struct GpuLayer {
  GpuMatrix router;
  GpuMatrix gate_shexp, up_shexp, down_shexp, shexp_gate;  // qwen2moe's shared expert and its gate
  GpuExperts gate_exps, up_exps, down_exps;
  std::unique_ptr<Buffer> expert_ids;  // host-visible [n][k]: each token's experts (for the log)
  std::unique_ptr<Buffer> attn_norm, bq, bk, bv, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  GpuMatrix wq, wk, wv, wo, gate, up, down;
  GpuStack qkv, gate_up;
  std::unique_ptr<Buffer> k_cache, v_cache;
  int pool = 0;        // KvCache::Pool of its cells
  bool local = false;  // a sliding-window layer (its RoPE base and window)
};

// Groups of at most kMaxGroups: calls f(first, count) per slice of n.
template <typename F>
void Slices(int64_t n, F f) {
  for (int64_t first = 0; first < n; first += kMaxGroups) f(first, std::min(kMaxGroups, n - first));
}

}  // namespace

std::string GpuRefusal(const ModelParams& p, TensorType type_k, TensorType type_v) {
  if (p.is_moe() && p.n_expert_used > 16) return "more than 16 experts per token do not run on the GPU";
  if (p.head_dim > 256) return "head size " + std::to_string(p.head_dim) + " is above the GPU attention's 256";
  for (TensorType t : {type_k, type_v}) {
    if (t != TensorType::kF16 && t != TensorType::kQ8_0) return "the GPU keeps its KV cache in f16 or q8_0";
  }
  return "";
}

int64_t GpuLayersThatFit(const Model& model, int64_t n_ctx, int64_t begin, int64_t end, bool head, TensorType type_k,
                         TensorType type_v, uint64_t device_bytes, uint64_t max_binding) {
  const ModelParams& p = model.params();
  const size_t widest_row = std::max(quant::RowBytes(type_k, p.kv_dim()), quant::RowBytes(type_v, p.kv_dim()));
  if (static_cast<uint64_t>(n_ctx) * widest_row > max_binding) return 0;
  constexpr int64_t kBatch = 512;
  const uint64_t activations = static_cast<uint64_t>(kBatch) *
                               (4 * p.n_embd + 2 * p.q_dim() + 2 * p.kv_dim() + 2 * p.n_ff) * sizeof(float);
  uint64_t budget = device_bytes - device_bytes / 10;
  auto take = [&](uint64_t bytes) {
    if (bytes > budget) return false;
    budget -= bytes;
    return true;
  };
  if (!take(activations)) return 0;
  if (head && !take(TensorsOfStage(model.file(), end, end, false, true).bytes)) return 0;
  int64_t n = 0;
  for (int64_t il = end - 1; il >= begin; --il, ++n) {
    const uint64_t layer = TensorsOfStage(model.file(), il, il + 1, false, false).bytes +
                           KvCacheBytes(p, n_ctx, il, il + 1, type_k, type_v);
    if (!take(layer)) break;
  }
  return n;
}

struct GpuLayers::Impl {
  std::shared_ptr<gpu::Device> dev;
  const Model& model;
  const ModelParams& p;
  Config cfg;
  std::vector<GpuLayer> layers;
  std::unique_ptr<Buffer> output_norm;
  GpuMatrix output;
  std::unique_ptr<gpu::Stream> stream;
  Kernel attn_kernel = Kernel::kAttnF16F16;
  Kernel store = Kernel::kRopeStoreF16F16;  // rope_store.comp
  size_t k_row_bytes = 0, v_row_bytes = 0;
  int64_t window_cells = 0;
  // Activations (device-local) for up to `reserved` tokens, and the batch's inputs and outputs
  // (host-visible).
  int64_t reserved = 0, logit_rows_cap = 0;
  std::unique_ptr<Buffer> x, xn, q, k, v, att, gate, up, tmp, logits;
  std::unique_ptr<Buffer> router, expert_w, ye, shexp_logit;  // mixture of experts
  // A product's input rounded as the CPU rounds it (per ActRound), and which buffer it holds
  // rounded: valid until something other than a product writes (epoch) or a product writes
  // that buffer, so q, k and v (gate and up) round their input once.
  std::unique_ptr<Buffer> rounded[3];
  struct RoundedFrom {
    const Buffer* src = nullptr;
    uint64_t epoch = 0;
  };
  RoundedFrom rounded_from[3];
  uint64_t epoch = 1;
  std::unique_ptr<Buffer> in_x, cs, cs_local, cells[2], seq_cells[2], tok[2], logit_rows, out;
  // The stream's last recording, and what it was recorded for: tokens, logit rows, and the
  // generation of the buffers (bumped whenever one is replaced).
  struct Shape {
    int64_t n = -1, n_logits = -1;
    uint64_t generation = 0;
    bool profiled = false;  // recorded while the device was profiling (gpu::Device::StartProfile)
    bool operator==(const Shape&) const = default;
  };
  Shape recorded;
  uint64_t generation = 0, replays = 0;

  Impl(std::shared_ptr<gpu::Device> d, const Model& m, Config c)
      : dev(std::move(d)), model(m), p(m.params()), cfg(std::move(c)) {}

  const std::string& name() const { return dev->info().name; }

  Result<std::unique_ptr<Buffer>> Vector(const float* data, int64_t n, const std::string& what) {
    if (data == nullptr) return std::unique_ptr<Buffer>();
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> b, dev->NewBuffer(n * sizeof(float), false, what));
    TANDEM_RETURN_IF_ERROR(dev->Upload(*b, 0, data, n * sizeof(float)));
    return b;
  }

  Status UploadMatrix(const Matrix& m, const std::string& what, GpuMatrix* dst) {
    if (m.interleaved) {
      return Status::Internal(what + " is in the CPU's interleaved layout; a GPU layer needs the file's");
    }
    const std::optional<Kernel> mul = gpu::MulKernelFor(m.type);
    if (!mul) return Status::Unsupported(what + ": no GPU product for type " + std::to_string(static_cast<int>(m.type)));
    dst->kernel = *mul;
    dst->act = ActRoundOf(m.type);
    dst->rows = m.rows;
    dst->cols = m.cols;
    dst->row_bytes = quant::RowBytes(m.type, m.cols);
    if (m.rows == 0) return Status::Ok();
    const int64_t per_part = std::max<int64_t>(1, static_cast<int64_t>(dev->info().max_binding_bytes / dst->row_bytes));
    for (int64_t first = 0; first < m.rows; first += per_part) {
      GpuMatrix::Part part;
      part.first = first;
      part.rows = std::min(per_part, m.rows - first);
      const uint64_t bytes = static_cast<uint64_t>(part.rows) * dst->row_bytes;
      TANDEM_ASSIGN_OR_RETURN(part.buf, dev->NewBuffer(bytes, false, what));
      TANDEM_RETURN_IF_ERROR(
          dev->Upload(*part.buf, 0, static_cast<const uint8_t*>(m.data) + first * dst->row_bytes, bytes));
      dst->parts.push_back(std::move(part));
    }
    return Status::Ok();
  }

  // Uploads ms (at least 2) as one stack when they share a type and width and fit one binding;
  // else leaves dst empty. Each of `own` then gets its type and shape (no parts).
  Status UploadStack(std::initializer_list<const Matrix*> ms, std::initializer_list<GpuMatrix*> own,
                     const std::string& what, GpuStack* dst) {
    const Matrix& first = **ms.begin();
    uint64_t bytes = 0;
    for (const Matrix* m : ms) {
      if (m->interleaved || m->type != first.type || m->cols != first.cols || m->rows == 0) return Status::Ok();
      bytes += static_cast<uint64_t>(m->rows) * quant::RowBytes(m->type, m->cols);
    }
    const std::optional<Kernel> mul = gpu::MulKernelFor(first.type);
    if (!mul || bytes > dev->info().max_binding_bytes) return Status::Ok();
    GpuMatrix& m = dst->m;
    m.kernel = *mul;
    m.act = ActRoundOf(first.type);
    m.cols = first.cols;
    m.row_bytes = quant::RowBytes(first.type, first.cols);
    GpuMatrix::Part part;
    TANDEM_ASSIGN_OR_RETURN(part.buf, dev->NewBuffer(bytes, false, what));
    auto o = own.begin();
    for (const Matrix* src : ms) {
      TANDEM_RETURN_IF_ERROR(dev->Upload(*part.buf, m.rows * m.row_bytes, src->data, src->rows * m.row_bytes));
      if (dst->count == 1) dst->split1 = m.rows;
      if (dst->count == 2) dst->split2 = m.rows;
      m.rows += src->rows;
      **o = GpuMatrix{m.act, m.kernel, src->rows, src->cols, m.row_bytes, {}};
      ++o;
      ++dst->count;
    }
    if (dst->count == 2) dst->split2 = m.rows;
    part.rows = m.rows;
    m.parts.push_back(std::move(part));
    return Status::Ok();
  }

  Status UploadExperts(const ExpertMatrices& m, const std::string& what, GpuExperts* dst) {
    const std::optional<Kernel> mul = gpu::MulKernelFor(m.all.type, /*expert=*/true);
    if (!mul) return Status::Unsupported(what + ": no GPU product for type " + std::to_string(static_cast<int>(m.all.type)));
    dst->kernel = *mul;
    dst->act = ActRoundOf(m.all.type);
    dst->rows = m.all.rows / m.n_expert;
    dst->cols = m.all.cols;
    dst->row_bytes = quant::RowBytes(m.all.type, m.all.cols);
    const uint64_t expert_bytes = static_cast<uint64_t>(dst->rows) * dst->row_bytes;
    if (expert_bytes > dev->info().max_binding_bytes) {
      return Status::Unsupported(name() + ": one expert of " + what + " (" + std::to_string(expert_bytes >> 20) +
                                 " MiB) is larger than one binding");
    }
    const int64_t per_part = static_cast<int64_t>(dev->info().max_binding_bytes / expert_bytes);
    for (int64_t first = 0; first < m.n_expert; first += per_part) {
      GpuExperts::Part part;
      part.first = first;
      part.count = std::min(per_part, m.n_expert - first);
      const uint64_t bytes = static_cast<uint64_t>(part.count) * expert_bytes;
      TANDEM_ASSIGN_OR_RETURN(part.buf, dev->NewBuffer(bytes, false, what));
      TANDEM_RETURN_IF_ERROR(dev->Upload(*part.buf, 0, static_cast<const uint8_t*>(m.all.data) + first * expert_bytes, bytes));
      dst->parts.push_back(std::move(part));
    }
    return Status::Ok();
  }

  // Grows b to at least `bytes`; a new buffer makes a new generation (recordings naming the old
  // one cannot be replayed).
  Status Ensure(gpu::Device& d, std::unique_ptr<Buffer>& b, uint64_t bytes, bool host, const char* what) {
    bytes = std::max<uint64_t>(bytes, 16);
    if (b != nullptr && b->size() >= bytes) return Status::Ok();
    ++generation;
    b.reset();
    TANDEM_ASSIGN_OR_RETURN(b, d.NewBuffer(bytes, host, what));
    return Status::Ok();
  }

  Status Reserve(int64_t n, int64_t n_logits) {
    gpu::Device& d = *dev;
    if (n > reserved) {
      const uint64_t f = sizeof(float);
      const int64_t ff = std::max<int64_t>({p.n_ff, p.n_expert_used * p.n_ff_exp, p.n_ff_shexp, 1});
      TANDEM_RETURN_IF_ERROR(Ensure(d, x, n * p.n_embd * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, xn, n * p.n_embd * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, tmp, n * p.n_embd * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, q, n * p.q_dim() * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, att, n * p.q_dim() * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, k, n * p.kv_dim() * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, v, n * p.kv_dim() * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, gate, n * ff * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, up, n * ff * f, false, "activations"));
      const int64_t widest = std::max({n * ff, n * p.n_embd, n * p.q_dim()});
      for (int a = 1; a < 3; ++a) TANDEM_RETURN_IF_ERROR(Ensure(d, rounded[a], widest * f, false, "activations"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, in_x, n * p.n_embd * f, true, "the batch's input"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, cs, n * p.head_dim * f, true, "the batch's input"));
      TANDEM_RETURN_IF_ERROR(Ensure(d, cs_local, n * p.head_dim * f, true, "the batch's input"));
      for (int pool = 0; pool < 2; ++pool) {
        TANDEM_RETURN_IF_ERROR(Ensure(d, cells[pool], n * 4, true, "the batch's input"));
        TANDEM_RETURN_IF_ERROR(Ensure(d, tok[pool], n * 12, true, "the batch's input"));
      }
      TANDEM_RETURN_IF_ERROR(Ensure(d, logit_rows, n * 4, true, "the batch's input"));
      if (p.is_moe()) {
        const int64_t k_used = p.n_expert_used;
        TANDEM_RETURN_IF_ERROR(Ensure(d, router, n * p.n_expert * f, false, "activations"));
        TANDEM_RETURN_IF_ERROR(Ensure(d, expert_w, n * k_used * f, false, "activations"));
        TANDEM_RETURN_IF_ERROR(Ensure(d, ye, n * k_used * p.n_embd * f, false, "activations"));
        TANDEM_RETURN_IF_ERROR(Ensure(d, shexp_logit, n * f, false, "activations"));
        for (GpuLayer& g : layers) {
          TANDEM_RETURN_IF_ERROR(Ensure(d, g.expert_ids, n * k_used * sizeof(int32_t), true, "expert choices"));
        }
      }
      TANDEM_RETURN_IF_ERROR(Ensure(d, out, n * p.n_embd * f, true, "the batch's output"));
      reserved = n;
    }
    if (cfg.head && n_logits > 0) {
      // The logits of as many rows as fit in one binding per pass (Forward loops over passes).
      const int64_t row_bytes = p.n_vocab * static_cast<int64_t>(sizeof(float));
      const int64_t rows = std::min<int64_t>(n_logits, static_cast<int64_t>(d.info().max_binding_bytes) / row_bytes);
      if (rows < 1) return Status::Unsupported(name() + ": one row of logits does not fit in one binding");
      if (rows > logit_rows_cap) {
        TANDEM_RETURN_IF_ERROR(Ensure(d, logits, rows * row_bytes, false, "logits"));
        std::unique_ptr<Buffer> o;
        TANDEM_RETURN_IF_ERROR(Ensure(d, o, std::max<uint64_t>(rows * row_bytes, n * p.n_embd * sizeof(float)),
                                      true, "the batch's output"));
        out = std::move(o);
        logit_rows_cap = rows;
      }
    }
    return Status::Ok();
  }

  // Every dispatch but a product's: its writes end the rounded inputs' validity.
  template <typename P>
  void Dispatch(Kernel kernel, std::initializer_list<const Buffer*> buffers, const P& push, uint32_t gx,
                uint32_t gy = 1) {
    ++epoch;
    stream->Dispatch(kernel, buffers, push, gx, gy);
  }

  // x (rows of `cols`, contiguous) as the products of weights rounding to `act` see it.
  const Buffer& Rounded(ActRound act, const Buffer& xb, int64_t rows, int64_t cols) {
    if (act == ActRound::kNone) return xb;
    const int a = static_cast<int>(act);
    RoundedFrom& from = rounded_from[a];
    if (from.src != &xb || from.epoch != epoch) {
      const int64_t blocks = rows * cols / (act == ActRound::kQ8_K ? 256 : 32);
      stream->Dispatch(act == ActRound::kQ8_K ? Kernel::kActRoundQ8_K : Kernel::kActRoundQ8_0, {&xb, rounded[a].get()},
                       static_cast<uint32_t>(blocks), static_cast<uint32_t>(std::min<int64_t>((blocks + 63) / 64, kMaxGroups)));
      from = {&xb, epoch};
    }
    return *rounded[a];
  }
  // A product wrote yb: a rounding of yb is stale.
  void Wrote(const Buffer& yb) {
    for (RoundedFrom& from : rounded_from) {
      if (from.src == &yb) from.src = nullptr;
    }
  }

  // y (nt rows, y_stride apart, starting at column y_col) = m times x (nt rows of x_stride); with
  // `accumulate`, y += it (a residual added by the product, not by another dispatch).
  void Mul(const GpuMatrix& m, const Buffer& x_in, int64_t nt, int64_t x_stride, const Buffer& yb, int64_t y_stride,
           int64_t y_col = 0, bool accumulate = false) {
    const Buffer& xb = Rounded(m.act, x_in, nt, x_stride);
    Wrote(yb);
    for (const GpuMatrix::Part& part : m.parts) {
      MulPush push{0, static_cast<uint32_t>(m.cols), static_cast<uint32_t>(nt), static_cast<uint32_t>(x_stride),
                   static_cast<uint32_t>(y_stride), static_cast<uint32_t>(y_col + part.first),
                   static_cast<uint32_t>(m.row_bytes)};
      push.accumulate = accumulate ? 1 : 0;
      gpu::RecordMul(*stream, m.kernel, *part.buf, xb, yb, push, part.rows);
    }
  }
  // A stack's products in one dispatch: its first matrix's into y0 (y0_stride), the second's into
  // y1, the third's (if any) into y2, each of those split_stride floats a token.
  void MulStack(const GpuStack& st, const Buffer& x_in, int64_t nt, int64_t x_stride, const Buffer& y0, int64_t y0_stride,
                const Buffer& y1, const Buffer* y2, int64_t split_stride) {
    const GpuMatrix& m = st.m;
    const Buffer& xb = Rounded(m.act, x_in, nt, x_stride);
    Wrote(y0);
    Wrote(y1);
    if (y2 != nullptr) Wrote(*y2);
    MulPush push{0, static_cast<uint32_t>(m.cols), static_cast<uint32_t>(nt), static_cast<uint32_t>(x_stride),
                 static_cast<uint32_t>(y0_stride), 0, static_cast<uint32_t>(m.row_bytes)};
    push.split1 = static_cast<uint32_t>(st.split1);
    push.split2 = static_cast<uint32_t>(st.split2);
    push.split_stride = static_cast<uint32_t>(split_stride);
    gpu::RecordMul(*stream, m.kernel, *m.parts[0].buf, xb, y0, push, m.rows, gpu::MulPath::kAuto, &y1, y2);
  }

  // y (pairs rows, y_stride apart) = each (token, choice) pair's expert times its activation row
  // (x row pair / x_div).
  void MulId(const GpuExperts& m, const Buffer& ids, const Buffer& x_in, int64_t pairs, int64_t x_stride, int64_t x_div,
             const Buffer& yb, int64_t y_stride) {
    const Buffer& xb = Rounded(m.act, x_in, pairs / x_div, x_stride);
    Wrote(yb);
    for (const GpuExperts::Part& part : m.parts) {
      Slices(m.rows, [&](int64_t first, int64_t rows) {
        MulPush push{static_cast<uint32_t>(first), static_cast<uint32_t>(m.cols), static_cast<uint32_t>(pairs),
                     static_cast<uint32_t>(x_stride), static_cast<uint32_t>(y_stride), 0,
                     static_cast<uint32_t>(m.row_bytes)};
        push.expert_rows = static_cast<uint32_t>(m.rows);
        push.expert_first = static_cast<uint32_t>(part.first);
        push.experts = static_cast<uint32_t>(part.count);
        push.x_div = static_cast<uint32_t>(x_div);
        stream->Dispatch(m.kernel, {part.buf.get(), &xb, &yb, &ids}, push, static_cast<uint32_t>(rows),
                         static_cast<uint32_t>(pairs));
      });
    }
  }

  // Mixture of experts on xn (n rows) into tmp: route, each pair's gate and up, SiLU, down, the
  // weighted sum per token.
  void Experts(const GpuLayer& w, int64_t n) {
    const int64_t E = p.n_embd, F = p.n_ff_exp, k_used = p.n_expert_used, pairs = n * k_used;
    Mul(w.router, *xn, n, E, *router, p.n_expert);
    Dispatch(Kernel::kMoeRoute, {router.get(), w.expert_ids.get(), expert_w.get()},
                     RoutePush{static_cast<uint32_t>(p.n_expert), static_cast<uint32_t>(k_used), p.expert_weights_norm ? 1u : 0u},
                     static_cast<uint32_t>(n));
    MulId(w.gate_exps, *w.expert_ids, *xn, pairs, E, k_used, *gate, F);
    MulId(w.up_exps, *w.expert_ids, *xn, pairs, E, k_used, *up, F);
    ActMul(pairs * F, false, w.down_exps.act);
    MulId(w.down_exps, *w.expert_ids, *gate, pairs, F, 1, *ye, E);
    Dispatch(Kernel::kMoeCombine, {ye.get(), expert_w.get(), tmp.get()},
                     CombinePush{static_cast<uint32_t>(n * E), static_cast<uint32_t>(E), static_cast<uint32_t>(k_used)},
                     static_cast<uint32_t>(std::min<int64_t>((n * E + 255) / 256, kMaxGroups)));
    if (!w.shexp_gate.parts.empty()) {
      // qwen2moe: every token also goes through the shared expert, added with sigmoid(x . gate).
      const int64_t S = p.n_ff_shexp;
      Mul(w.gate_shexp, *xn, n, E, *gate, S);
      Mul(w.up_shexp, *xn, n, E, *up, S);
      ActMul(n * S, false, w.down_shexp.act);
      Mul(w.down_shexp, *gate, n, S, *ye, E);
      Mul(w.shexp_gate, *xn, n, E, *shexp_logit, 1);
      Dispatch(Kernel::kGatedAdd, {tmp.get(), ye.get(), shexp_logit.get()},
               AddPush{static_cast<uint32_t>(n * E), static_cast<uint32_t>(E)},
               static_cast<uint32_t>(std::min<int64_t>((n * E + 255) / 256, kMaxGroups)));
    }
  }

  // Whether a dispatch writing rows of `len` floats can also write them rounded as `act` (into
  // rounded[act]): a rounding at all, and whole blocks of it per row.
  bool CanRound(ActRound act, int64_t len) const {
    return act != ActRound::kNone && len % (act == ActRound::kQ8_K ? 256 : 32) == 0;
  }
  // After such a dispatch: rounded[act] holds yb rounded, until the next write (as Rounded's own).
  void Written(ActRound act, const Buffer& yb) { rounded_from[static_cast<int>(act)] = {&yb, epoch}; }

  // Rows of `len` floats, in place when xb is yb. `round`: the rounding the next product takes
  // (ActRoundOf its weights), made by the same dispatch where the row length allows.
  void Norm(const Buffer& xb, const Buffer& w, const Buffer& yb, int64_t rows, int64_t len,
            ActRound round = ActRound::kNone) {
    const bool fused = CanRound(round, len);
    const Kernel kernel = !fused ? Kernel::kRmsNorm : round == ActRound::kQ8_K ? Kernel::kRmsNormQ8_K : Kernel::kRmsNormQ8_0;
    Slices(rows, [&](int64_t first, int64_t count) {
      const NormPush push{static_cast<uint32_t>(len), static_cast<uint32_t>(len), static_cast<uint32_t>(len),
                          p.rms_eps, static_cast<uint32_t>(first)};
      if (fused) {
        Dispatch(kernel, {&xb, &w, &yb, rounded[static_cast<int>(round)].get()}, push, static_cast<uint32_t>(count));
      } else {
        Dispatch(kernel, {&xb, &w, &yb}, push, static_cast<uint32_t>(count));
      }
    });
    if (fused) Written(round, yb);
  }
  // gate = act(gate) * up over n values, rounded as `round` too where n allows (see Norm).
  void ActMul(int64_t n, bool gelu, ActRound round) {
    const ActPush push{static_cast<uint32_t>(n), gelu ? 1u : 0u};
    if (CanRound(round, n)) {
      const int64_t blocks = n / (round == ActRound::kQ8_K ? 256 : 32);
      Dispatch(round == ActRound::kQ8_K ? Kernel::kActMulQ8_K : Kernel::kActMulQ8_0,
               {gate.get(), up.get(), rounded[static_cast<int>(round)].get()}, push,
               static_cast<uint32_t>(std::min<int64_t>((blocks + 255) / 256, kMaxGroups)));
      Written(round, *gate);
      return;
    }
    Dispatch(Kernel::kActMul, {gate.get(), up.get()}, push,
             static_cast<uint32_t>(std::min<int64_t>((n + 255) / 256, kMaxGroups)));
  }
  void Add(const Buffer& a, const Buffer& b, int64_t n, int64_t b_len) {
    const AddPush push{static_cast<uint32_t>(n), static_cast<uint32_t>(b_len)};
    Dispatch(Kernel::kAdd, {&a, &b}, push, static_cast<uint32_t>(std::min<int64_t>((n + 255) / 256, kMaxGroups)));
  }

  void Layer(const GpuLayer& w, int64_t n) {
    const int64_t E = p.n_embd, D = p.head_dim, qd = p.q_dim(), kvd = p.kv_dim();
    Norm(*x, *w.attn_norm, *xn, n, E, w.wq.act);
    if (w.qkv.count == 0) {
      Mul(w.wq, *xn, n, E, *q, qd);
      Mul(w.wk, *xn, n, E, *k, kvd);
    }
    if (w.qkv.count > 0) MulStack(w.qkv, *xn, n, E, *q, qd, *k, w.qkv.count == 3 ? v.get() : nullptr, kvd);
    if (w.qkv.count < 3) Mul(w.wv, *xn, n, E, *v, kvd);
    if (w.bq != nullptr) {
      Add(*q, *w.bq, n * qd, qd);
      Add(*k, *w.bk, n * kvd, kvd);
      Add(*v, *w.bv, n * kvd, kvd);
    }
    if (w.q_norm != nullptr) {
      Norm(*q, *w.q_norm, *q, n * p.n_head, D);
      Norm(*k, *w.k_norm, *k, n * p.n_head_kv, D);
    }
    // Queries and keys rotated, keys and values stored, in one dispatch.
    const Buffer& angles = w.local ? *cs_local : *cs;
    const uint32_t halves = p.rope_order == RopeOrder::kHalves ? 1 : 0;
    Dispatch(store, {q.get(), &angles, k.get(), cells[w.pool].get(), w.k_cache.get(), v.get(), w.v_cache.get()},
             RopeStorePush{static_cast<uint32_t>(D), static_cast<uint32_t>(qd), static_cast<uint32_t>(kvd), halves,
                           static_cast<uint32_t>(p.n_head), static_cast<uint32_t>(p.n_head_kv),
                           static_cast<uint32_t>(k_row_bytes), static_cast<uint32_t>(v_row_bytes)},
             static_cast<uint32_t>(n), static_cast<uint32_t>(p.n_head + p.n_head_kv + 1));
    const AttnPush ap{static_cast<uint32_t>(qd), static_cast<uint32_t>(D), static_cast<uint32_t>(p.n_head / p.n_head_kv),
                      static_cast<uint32_t>(k_row_bytes), static_cast<uint32_t>(v_row_bytes), p.AttentionScale(),
                      w.local ? 1u : 0u};
    Dispatch(attn_kernel, {q.get(), w.k_cache.get(), w.v_cache.get(), seq_cells[w.pool].get(), tok[w.pool].get(),
                                   att.get()},
                     ap, static_cast<uint32_t>(n), static_cast<uint32_t>(p.n_head));
    // The output products add into the residual themselves, unless a norm comes between (gemma3).
    if (w.post_attn_norm != nullptr) {
      Mul(w.wo, *att, n, qd, *xn, E);
      Norm(*xn, *w.post_attn_norm, *xn, n, E);
      Add(*x, *xn, n * E, n * E);
    } else {
      Mul(w.wo, *att, n, qd, *x, E, 0, /*accumulate=*/true);
    }

    Norm(*x, *w.ffn_norm, *xn, n, E, p.is_moe() ? w.router.act : w.gate.act);
    if (p.is_moe()) {
      Experts(w, n);  // into tmp
    } else {
      if (w.gate_up.count == 2) {
        MulStack(w.gate_up, *xn, n, E, *gate, p.n_ff, *up, nullptr, p.n_ff);
      } else {
        Mul(w.gate, *xn, n, E, *gate, p.n_ff);
        Mul(w.up, *xn, n, E, *up, p.n_ff);
      }
      ActMul(n * p.n_ff, p.ffn_act == FfnActivation::kGelu, w.down.act);
      if (w.post_ffn_norm == nullptr) {
        Mul(w.down, *gate, n, p.n_ff, *x, E, 0, /*accumulate=*/true);
        return;
      }
      Mul(w.down, *gate, n, p.n_ff, *tmp, E);
    }
    if (w.post_ffn_norm != nullptr) Norm(*tmp, *w.post_ffn_norm, *tmp, n, E);
    Add(*x, *tmp, n * E, n * E);
  }
};

GpuLayers::GpuLayers(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuLayers::~GpuLayers() = default;

Result<std::unique_ptr<GpuLayers>> GpuLayers::Create(std::shared_ptr<gpu::Device> device, const Model& model,
                                                     const Config& config) {
  const ModelParams& p = model.params();
  const std::string refusal = GpuRefusal(p, config.type_k, config.type_v);
  if (!refusal.empty()) return Status::Unsupported(device->info().name + ": " + refusal);
  // Refused before any upload when the weights and cache do not fit the device's free memory.
  {
    const size_t kv_row = quant::RowBytes(config.type_k, p.kv_dim()) + quant::RowBytes(config.type_v, p.kv_dim());
    uint64_t need = TensorsOfStage(model.file(), config.layer_begin, config.layer_end, false, config.head).bytes;
    for (bool w : config.window) need += static_cast<uint64_t>(config.cells[w ? 1 : 0]) * kv_row;
    const gpu::DeviceInfo& d = device->info();
    const uint64_t free = d.memory_bytes - std::min(d.memory_bytes, device->allocated_bytes());
    if (need > free) {
      return Status::ResourceExhausted(
          "layers " + std::to_string(config.layer_begin) + ".." + std::to_string(config.layer_end - 1) +
          (config.head ? " and the head" : "") + " need " + std::to_string(need >> 20) + " MiB on " + d.name + " (" +
          d.description + "), which has " + std::to_string(free >> 20) + " MiB free of " +
          std::to_string(d.memory_bytes >> 20) + " (use a smaller -ngl or -c)");
    }
    const size_t widest_row = std::max(quant::RowBytes(config.type_k, p.kv_dim()), quant::RowBytes(config.type_v, p.kv_dim()));
    const uint64_t layer_cache = static_cast<uint64_t>(config.cells[0]) * widest_row;
    if (layer_cache > d.max_binding_bytes) {
      return Status::ResourceExhausted("one layer's K or V cache for " + std::to_string(config.cells[0]) + " cells is " +
                                       std::to_string(layer_cache >> 20) + " MiB, more than one binding of " + d.name +
                                       " (" + d.description + ") holds (" + std::to_string(d.max_binding_bytes >> 20) +
                                       " MiB): use a smaller -c");
    }
  }
  auto impl = std::make_unique<Impl>(std::move(device), model, config);
  Impl& im = *impl;
  TANDEM_ASSIGN_OR_RETURN(im.stream, im.dev->NewStream());
  const bool kq8 = config.type_k == TensorType::kQ8_0, vq8 = config.type_v == TensorType::kQ8_0;
  im.attn_kernel = kq8 ? (vq8 ? Kernel::kAttnQ8Q8 : Kernel::kAttnQ8F16) : (vq8 ? Kernel::kAttnF16Q8 : Kernel::kAttnF16F16);
  im.store = kq8 ? (vq8 ? Kernel::kRopeStoreQ8Q8 : Kernel::kRopeStoreQ8F16)
                 : (vq8 ? Kernel::kRopeStoreF16Q8 : Kernel::kRopeStoreF16F16);
  im.k_row_bytes = quant::RowBytes(config.type_k, p.kv_dim());
  im.v_row_bytes = quant::RowBytes(config.type_v, p.kv_dim());
  im.window_cells = config.cells[1];
  for (int64_t il = config.layer_begin; il < config.layer_end; ++il) {
    const LayerWeights& lw = model.layers[il];
    const std::string at = "layer " + std::to_string(il) + " ";
    GpuLayer g;
    const int64_t E = p.n_embd, D = p.head_dim;
    TANDEM_ASSIGN_OR_RETURN(g.attn_norm, im.Vector(lw.attn_norm, E, at + "attn_norm"));
    TANDEM_ASSIGN_OR_RETURN(g.bq, im.Vector(lw.bq, p.q_dim(), at + "attn_q.bias"));
    TANDEM_ASSIGN_OR_RETURN(g.bk, im.Vector(lw.bk, p.kv_dim(), at + "attn_k.bias"));
    TANDEM_ASSIGN_OR_RETURN(g.bv, im.Vector(lw.bv, p.kv_dim(), at + "attn_v.bias"));
    TANDEM_ASSIGN_OR_RETURN(g.q_norm, im.Vector(lw.q_norm, D, at + "attn_q_norm"));
    TANDEM_ASSIGN_OR_RETURN(g.k_norm, im.Vector(lw.k_norm, D, at + "attn_k_norm"));
    TANDEM_ASSIGN_OR_RETURN(g.post_attn_norm, im.Vector(lw.post_attn_norm, E, at + "post_attention_norm"));
    TANDEM_ASSIGN_OR_RETURN(g.ffn_norm, im.Vector(lw.ffn_norm, E, at + "ffn_norm"));
    TANDEM_ASSIGN_OR_RETURN(g.post_ffn_norm, im.Vector(lw.post_ffn_norm, E, at + "post_ffw_norm"));
    // Queries, keys and values as one stack where they share a type (else queries and keys).
    TANDEM_RETURN_IF_ERROR(im.UploadStack({&lw.wq, &lw.wk, &lw.wv}, {&g.wq, &g.wk, &g.wv}, at + "attn_q/k/v", &g.qkv));
    if (g.qkv.count == 0) {
      TANDEM_RETURN_IF_ERROR(im.UploadStack({&lw.wq, &lw.wk}, {&g.wq, &g.wk}, at + "attn_q/k", &g.qkv));
    }
    if (g.qkv.count == 0) {
      TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.wq, at + "attn_q", &g.wq));
      TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.wk, at + "attn_k", &g.wk));
    }
    if (g.qkv.count < 3) TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.wv, at + "attn_v", &g.wv));
    TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.wo, at + "attn_output", &g.wo));
    if (p.is_moe()) {
      TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.router, at + "ffn_gate_inp", &g.router));
      TANDEM_RETURN_IF_ERROR(im.UploadExperts(lw.gate_exps, at + "ffn_gate_exps", &g.gate_exps));
      TANDEM_RETURN_IF_ERROR(im.UploadExperts(lw.up_exps, at + "ffn_up_exps", &g.up_exps));
      TANDEM_RETURN_IF_ERROR(im.UploadExperts(lw.down_exps, at + "ffn_down_exps", &g.down_exps));
      if (lw.shexp_gate_inp != nullptr) {
        TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.gate_shexp, at + "ffn_gate_shexp", &g.gate_shexp));
        TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.up_shexp, at + "ffn_up_shexp", &g.up_shexp));
        TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.down_shexp, at + "ffn_down_shexp", &g.down_shexp));
        const Matrix gate_inp{TensorType::kF32, lw.shexp_gate_inp, 1, p.n_embd};
        TANDEM_RETURN_IF_ERROR(im.UploadMatrix(gate_inp, at + "ffn_gate_inp_shexp", &g.shexp_gate));
      }
    } else {
      TANDEM_RETURN_IF_ERROR(im.UploadStack({&lw.gate, &lw.up}, {&g.gate, &g.up}, at + "ffn_gate/up", &g.gate_up));
      if (g.gate_up.count == 0) {
        TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.gate, at + "ffn_gate", &g.gate));
        TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.up, at + "ffn_up", &g.up));
      }
      TANDEM_RETURN_IF_ERROR(im.UploadMatrix(lw.down, at + "ffn_down", &g.down));
    }
    g.pool = config.window[il - config.layer_begin] ? 1 : 0;
    g.local = p.IsLocalLayer(il);
    const int64_t cells = config.cells[g.pool];
    TANDEM_ASSIGN_OR_RETURN(g.k_cache, im.dev->NewBuffer(cells * im.k_row_bytes, false, at + "K cache"));
    TANDEM_ASSIGN_OR_RETURN(g.v_cache, im.dev->NewBuffer(cells * im.v_row_bytes, false, at + "V cache"));
    im.layers.push_back(std::move(g));
  }
  if (config.head) {
    TANDEM_ASSIGN_OR_RETURN(im.output_norm, im.Vector(model.output_norm, p.n_embd, "output_norm"));
    TANDEM_RETURN_IF_ERROR(im.UploadMatrix(model.output, "output", &im.output));
  }
  return std::unique_ptr<GpuLayers>(new GpuLayers(std::move(impl)));
}

Status GpuLayers::GrowWindow(int64_t cells) {
  Impl& im = *impl_;
  if (cells <= im.window_cells) return Status::Ok();
  for (GpuLayer& g : im.layers) {
    if (g.pool != 1) continue;
    for (auto [cache, row_bytes] : {std::pair{&g.k_cache, im.k_row_bytes}, std::pair{&g.v_cache, im.v_row_bytes}}) {
      TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> wider, im.dev->NewBuffer(cells * row_bytes, false, "a grown window cache"));
      TANDEM_RETURN_IF_ERROR(im.stream->Begin());
      im.stream->Copy(**cache, 0, *wider, 0, (*cache)->size());
      TANDEM_RETURN_IF_ERROR(im.stream->Submit());
      *cache = std::move(wider);
    }
  }
  ++im.generation;
  im.recorded = Impl::Shape{};
  im.window_cells = cells;
  return Status::Ok();
}

Status GpuLayers::Forward(const GpuBatch& b, float* x, float* logits, std::vector<int32_t>* expert_log) {
  Impl& im = *impl_;
  const ModelParams& p = im.p;
  const int64_t n = b.n, E = p.n_embd, V = p.n_vocab;
  TANDEM_RETURN_IF_ERROR(im.Reserve(n, b.n_logits));
  // The batch's inputs, into the host-visible buffers the recording reads.
  std::memcpy(im.in_x->mapped(), x, n * E * sizeof(float));
  std::memcpy(im.cs->mapped(), b.rope_cs, n * p.head_dim * sizeof(float));
  if (b.rope_cs_local != nullptr) std::memcpy(im.cs_local->mapped(), b.rope_cs_local, n * p.head_dim * sizeof(float));
  for (int pool = 0; pool < 2; ++pool) {
    if (b.cells[pool] == nullptr) continue;
    std::memcpy(im.cells[pool]->mapped(), b.cells[pool], n * sizeof(int32_t));
    std::memcpy(im.tok[pool]->mapped(), b.tok[pool]->data(), n * 3 * sizeof(int32_t));
    const std::vector<int32_t>& sc = *b.seq_cells[pool];
    // Room for every cell of the pool, so the buffer (and a recording naming it) stays.
    const int64_t pool_cells = pool == 0 ? im.cfg.cells[0] : im.window_cells;
    TANDEM_RETURN_IF_ERROR(im.Ensure(*im.dev, im.seq_cells[pool],
                                     std::max<int64_t>(static_cast<int64_t>(sc.size()), pool_cells) * sizeof(int32_t), true,
                                     "the batch's input"));
    std::memcpy(im.seq_cells[pool]->mapped(), sc.data(), sc.size() * sizeof(int32_t));
  }
  const bool head = im.cfg.head && b.n_logits > 0;
  // The head runs on the marked rows, as many per pass as one binding of logits holds.
  auto record_head = [&](int64_t first) {
    const int64_t rows = std::min(im.logit_rows_cap, b.n_logits - first);
    if (first > 0) std::memcpy(im.logit_rows->mapped(), b.logit_rows + first, rows * sizeof(int32_t));
    im.Dispatch(Kernel::kGather, {im.x.get(), im.logit_rows.get(), im.xn.get()},
                        GatherPush{static_cast<uint32_t>(E)}, static_cast<uint32_t>(rows));
    im.Norm(*im.xn, *im.output_norm, *im.xn, rows, E, im.output.act);
    im.Mul(im.output, *im.xn, rows, E, *im.logits, V);
    if (p.logit_softcap > 0) {
      im.Dispatch(Kernel::kSoftcap, {im.logits.get()}, SoftcapPush{static_cast<uint32_t>(rows * V), p.logit_softcap},
                          static_cast<uint32_t>(std::min<int64_t>((rows * V + 255) / 256, kMaxGroups)));
    }
    im.stream->Copy(*im.logits, 0, *im.out, 0, rows * V * sizeof(float));
  };
  // A batch shaped like the last one (same tokens and logit rows, the same buffers: a decode step
  // after a decode step) replays the last recording: its dispatches depend only on those, and
  // the inputs it reads (hidden states, angles, cells, attention plan) were written above.
  if (head) std::memcpy(im.logit_rows->mapped(), b.logit_rows, std::min(im.logit_rows_cap, b.n_logits) * sizeof(int32_t));
  const Impl::Shape shape{n, b.n_logits, im.generation, im.dev->profiling()};
  if (im.recorded == shape) {
    if (Status st = im.stream->Replay(); !st.ok()) {
      im.recorded = Impl::Shape{};  // record anew next time
      return st;
    }
    ++im.replays;
  } else {
    im.recorded = Impl::Shape{};
    for (Impl::RoundedFrom& from : im.rounded_from) from = {};
    TANDEM_RETURN_IF_ERROR(im.stream->Begin());
    im.stream->Copy(*im.in_x, 0, *im.x, 0, n * E * sizeof(float));
    for (const GpuLayer& g : im.layers) im.Layer(g, n);
    if (head) {
      record_head(0);
    } else if (!im.cfg.head) {
      im.stream->Copy(*im.x, 0, *im.out, 0, n * E * sizeof(float));
    }
    TANDEM_RETURN_IF_ERROR(im.stream->Submit());
    if (!head || b.n_logits <= im.logit_rows_cap) im.recorded = shape;  // one submission did it all
  }
  if (expert_log != nullptr && p.is_moe()) {  // each layer's expert choices
    for (const GpuLayer& g : im.layers) {
      const int32_t* ids = static_cast<const int32_t*>(g.expert_ids->mapped());
      expert_log->insert(expert_log->end(), ids, ids + n * p.n_expert_used);
    }
  }
  if (!im.cfg.head) {
    std::memcpy(x, im.out->mapped(), n * E * sizeof(float));
    return Status::Ok();
  }
  if (!head) return Status::Ok();
  std::memcpy(logits, im.out->mapped(), std::min(im.logit_rows_cap, b.n_logits) * V * sizeof(float));
  for (int64_t first = im.logit_rows_cap; first < b.n_logits; first += im.logit_rows_cap) {
    TANDEM_RETURN_IF_ERROR(im.stream->Begin());
    record_head(first);
    TANDEM_RETURN_IF_ERROR(im.stream->Submit());
    std::memcpy(logits + first * V, im.out->mapped(), std::min(im.logit_rows_cap, b.n_logits - first) * V * sizeof(float));
  }
  return Status::Ok();
}

uint64_t GpuLayers::replays() const { return impl_->replays; }

uint64_t GpuLayers::device_bytes() const { return impl_->dev->allocated_bytes(); }

}  // namespace tandem::model
