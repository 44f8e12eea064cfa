#include "gguf/value.h"

namespace tandem::gguf {
namespace {

// Float to int64 without undefined behaviour: NaN gives 0, out-of-range values saturate.
int64_t SaturatingToInt64(double d) {
  if (!(d == d)) return 0;
  if (d >= 9.2233720368547758e18) return INT64_MAX;
  if (d <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(d);
}

template <typename T>
T Load(const std::vector<uint8_t>& raw, uint64_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

double Array::AsDouble(uint64_t i) const {
  switch (elem_type_) {
    case ValueType::kFloat32: return Load<float>(raw_, i);
    case ValueType::kFloat64: return Load<double>(raw_, i);
    case ValueType::kUint64: return static_cast<double>(Load<uint64_t>(raw_, i));
    default: return static_cast<double>(AsInt64(i));
  }
}

int64_t Array::AsInt64(uint64_t i) const {
  switch (elem_type_) {
    case ValueType::kUint8: return Load<uint8_t>(raw_, i);
    case ValueType::kInt8: return Load<int8_t>(raw_, i);
    case ValueType::kUint16: return Load<uint16_t>(raw_, i);
    case ValueType::kInt16: return Load<int16_t>(raw_, i);
    case ValueType::kUint32: return Load<uint32_t>(raw_, i);
    case ValueType::kInt32: return Load<int32_t>(raw_, i);
    case ValueType::kBool: return raw_[i] != 0 ? 1 : 0;
    case ValueType::kUint64: return static_cast<int64_t>(Load<uint64_t>(raw_, i));
    case ValueType::kInt64: return Load<int64_t>(raw_, i);
    case ValueType::kFloat32: return SaturatingToInt64(Load<float>(raw_, i));
    case ValueType::kFloat64: return SaturatingToInt64(Load<double>(raw_, i));
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

bool Value::is_integer() const {
  switch (type()) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64: return true;
    default: return false;
  }
}

std::optional<int64_t> Value::AsInt64() const {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return static_cast<int64_t>(v);
        } else {
          return std::nullopt;
        }
      },
      v_);
}

std::optional<double> Value::AsDouble() const {
  if (const float* f = get_if<float>()) return *f;
  if (const double* d = get_if<double>()) return *d;
  if (type() == ValueType::kUint64) return static_cast<double>(*get_if<uint64_t>());
  if (std::optional<int64_t> i = AsInt64()) return static_cast<double>(*i);
  return std::nullopt;
}

}  // namespace tandem::gguf
