#include "quant/quant.h"

#include <cassert>

#include "quant/ops.h"

namespace tandem::quant {
namespace {

using namespace internal;  // NOLINT: the per-type functions, only for the table below

#define TANDEM_QUANT_ROW(t, act, name)                                                   \
  TypeOps {                                                                              \
    TensorType::k##t, TensorType::k##act, Dequantize##name, Quantize##name, VecDot##name \
  }

constexpr TypeOps kOps[] = {
    TANDEM_QUANT_ROW(F32, F32, F32),
    TANDEM_QUANT_ROW(F16, F32, F16),
    TANDEM_QUANT_ROW(BF16, F32, BF16),
    TANDEM_QUANT_ROW(Q4_0, Q8_0, Q4_0),
    TANDEM_QUANT_ROW(Q4_1, Q8_1, Q4_1),
    TANDEM_QUANT_ROW(Q5_0, Q8_0, Q5_0),
    TANDEM_QUANT_ROW(Q5_1, Q8_1, Q5_1),
    TANDEM_QUANT_ROW(Q8_0, Q8_0, Q8_0),
    TANDEM_QUANT_ROW(Q2_K, Q8_K, Q2_K),
    TANDEM_QUANT_ROW(Q3_K, Q8_K, Q3_K),
    TANDEM_QUANT_ROW(Q4_K, Q8_K, Q4_K),
    TANDEM_QUANT_ROW(Q5_K, Q8_K, Q5_K),
    TANDEM_QUANT_ROW(Q6_K, Q8_K, Q6_K),
    // Activation-only formats: no dot product of their own.
    TypeOps{TensorType::kQ8_1, TensorType::kQ8_1, DequantizeQ8_1, QuantizeQ8_1, nullptr},
    TypeOps{TensorType::kQ8_K, TensorType::kQ8_K, DequantizeQ8_K, QuantizeQ8_K, nullptr},
};
#undef TANDEM_QUANT_ROW

constexpr size_t kCount = sizeof(kOps) / sizeof(kOps[0]);

struct TypeList {
  TensorType types[kCount];
  constexpr TypeList() : types() {
    for (size_t i = 0; i < kCount; ++i) types[i] = kOps[i].type;
  }
};
constexpr TypeList kTypes;

}  // namespace

const TypeOps* ReferenceOps(TensorType t) {
  for (const TypeOps& ops : kOps) {
    if (ops.type == t) return &ops;
  }
  return nullptr;
}

const TensorType* SupportedTypes(size_t* count) {
  *count = kCount;
  return kTypes.types;
}

size_t RowBytes(TensorType t, int64_t n) {
  const gguf::TensorTypeInfo& info = gguf::TensorTypeTraits(t);
  assert(n % info.block_size == 0);
  return static_cast<size_t>(n / info.block_size) * info.type_size;
}

}  // namespace tandem::quant
