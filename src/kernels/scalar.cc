// The scalar kernel table: the quant reference for dot products and plain C++ float and
// attention ops.
#include <cmath>

#include "kernels/internal.h"

namespace tandem::kernels::internal {
namespace {

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void Softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SiluMul(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void Scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

float Dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

void Axpy(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

void Rope(float* x, int64_t head_dim, const float* cos, const float* sin, bool neox) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0], b = x[i1];
    x[i0] = a * cos[i] - b * sin[i];
    x[i1] = a * sin[i] + b * cos[i];
  }
}

void CopyF32(const float* src, void* dst, int64_t n) {
  float* d = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = src[i];
}

void Fp32ToFp16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = quant::Fp32ToFp16(x[i]);
}

void Fp16ToFp32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = quant::Fp16ToFp32(x[i]);
}

float ExpSum(const float* x, float m, float* y, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - m);
    sum += y[i];
  }
  return static_cast<float>(sum);
}

// Element i of a cache row of `type` (F32, F16 or Q8_0).
inline float RowAt(TensorType type, const void* row, int64_t i) {
  switch (type) {
    case TensorType::kF16: return quant::Fp16ToFp32(static_cast<const uint16_t*>(row)[i]);
    case TensorType::kQ8_0: {
      const quant::BlockQ8_0& b = static_cast<const quant::BlockQ8_0*>(row)[i / quant::kQK];
      return quant::Fp16ToFp32(b.d) * b.qs[i % quant::kQK];
    }
    default: return static_cast<const float*>(row)[i];
  }
}

void AttnScores(TensorType type, int64_t n, const float* q, int64_t ldq, int64_t nq,
                const void* const* rows, int64_t nk, float* s, int64_t lds) {
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t i = 0; i < nq; ++i) {
      double sum = 0;
      for (int64_t e = 0; e < n; ++e) {
        sum += static_cast<double>(q[i * ldq + e]) * RowAt(type, rows[j], e);
      }
      s[i * lds + j] = static_cast<float>(sum);
    }
  }
}

void AttnAccumulate(TensorType type, int64_t n, const float* p, int64_t ldp, int64_t no,
                    const void* const* rows, int64_t nv, float* o, int64_t ldo) {
  for (int64_t j = 0; j < nv; ++j) {
    for (int64_t i = 0; i < no; ++i) {
      const float w = p[i * ldp + j];
      for (int64_t e = 0; e < n; ++e) o[i * ldo + e] += w * RowAt(type, rows[j], e);
    }
  }
}

// Multi-row dot through the reference single-row dot of the given type.
void MultiViaTable(const KernelTable& t, TensorType type, int64_t n, const void* w, const void* a,
                   size_t a_stride, int na, float* out) {
  for (int j = 0; j < na; ++j) {
    out[j] = t.of(type).vec_dot(n, w, static_cast<const uint8_t*>(a) + j * a_stride);
  }
}

}  // namespace

void FillScalar(KernelTable* t) {
  t->isa = Isa::kScalar;
  size_t count = 0;
  const TensorType* types = quant::SupportedTypes(&count);
  for (size_t i = 0; i < count; ++i) {
    const quant::TypeOps* ops = quant::ReferenceOps(types[i]);
    TypeKernels& k = t->types[static_cast<uint32_t>(types[i])];
    k.act_type = ops->act_type;
    k.vec_dot = ops->vec_dot;
  }
  // Multi-row dots: one template instance per reference dot.
#define TANDEM_MULTI(T)                                                               \
  t->types[static_cast<uint32_t>(TensorType::k##T)].vec_dot_multi =                  \
      [](int64_t n, const void* w, const void* a, size_t s, int na, float* out) {     \
        MultiViaTable(*ForIsa(Isa::kScalar), TensorType::k##T, n, w, a, s, na, out);  \
      };
  TANDEM_MULTI(F32) TANDEM_MULTI(F16) TANDEM_MULTI(BF16) TANDEM_MULTI(Q4_0) TANDEM_MULTI(Q4_1)
  TANDEM_MULTI(Q5_0) TANDEM_MULTI(Q5_1) TANDEM_MULTI(Q8_0) TANDEM_MULTI(Q2_K) TANDEM_MULTI(Q3_K)
  TANDEM_MULTI(Q4_K) TANDEM_MULTI(Q5_K) TANDEM_MULTI(Q6_K)
#undef TANDEM_MULTI
  t->quantize_act[static_cast<uint32_t>(TensorType::kF32)] = CopyF32;
  for (TensorType a : {TensorType::kQ8_0, TensorType::kQ8_1, TensorType::kQ8_K}) {
    t->quantize_act[static_cast<uint32_t>(a)] = quant::ReferenceOps(a)->quantize_row;
  }
  t->f = FloatOps{RmsNorm, Softmax, SiluMul, Add, Scale, Dot, Axpy, Rope};
  t->attn = AttnOps{Fp32ToFp16, Fp16ToFp32, ExpSum, AttnScores, AttnAccumulate};
}

}  // namespace tandem::kernels::internal
