// GGUF metadata values: scalars, strings and one-level arrays, as owned C++ values.
//
// Value's variant index equals the file's ValueType id, so type() is free and the reader and the
// writer cannot disagree on numbering. Arrays of numbers keep their elements as packed
// little-endian bytes (compact for 150k-entry vocabularies); arrays of strings keep strings.
// Nested arrays are not part of the format as tandem supports it and are rejected by the reader.
//
// Thread safety: values; const access from any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "gguf/format.h"

namespace tandem::gguf {

// Maps a C++ element type to its GGUF value type (bool is stored as one byte).
template <typename T>
constexpr ValueType ValueTypeOf() {
  if constexpr (std::is_same_v<T, uint8_t>) return ValueType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>) return ValueType::kInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return ValueType::kUint16;
  else if constexpr (std::is_same_v<T, int16_t>) return ValueType::kInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return ValueType::kUint32;
  else if constexpr (std::is_same_v<T, int32_t>) return ValueType::kInt32;
  else if constexpr (std::is_same_v<T, float>) return ValueType::kFloat32;
  else if constexpr (std::is_same_v<T, bool>) return ValueType::kBool;
  else if constexpr (std::is_same_v<T, std::string>) return ValueType::kString;
  else if constexpr (std::is_same_v<T, uint64_t>) return ValueType::kUint64;
  else if constexpr (std::is_same_v<T, int64_t>) return ValueType::kInt64;
  else if constexpr (std::is_same_v<T, double>) return ValueType::kFloat64;
  else static_assert(sizeof(T) == 0, "not a GGUF value type");
}

class Array {
 public:
  Array() = default;
  // An array of fixed-size elements from packed little-endian bytes (count * element size).
  Array(ValueType elem_type, uint64_t count, std::vector<uint8_t> raw)
      : elem_type_(elem_type), count_(count), raw_(std::move(raw)) {}
  explicit Array(std::vector<std::string> strings)
      : elem_type_(ValueType::kString), count_(strings.size()), strings_(std::move(strings)) {}

  template <typename T>
  static Array Of(const std::vector<T>& values) {
    if constexpr (std::is_same_v<T, std::string>) {
      return Array(values);
    } else {
      std::vector<uint8_t> raw(values.size() * sizeof(T));
      for (size_t i = 0; i < values.size(); ++i) {
        if constexpr (std::is_same_v<T, bool>) {
          raw[i] = values[i] ? 1 : 0;
        } else {
          std::memcpy(raw.data() + i * sizeof(T), &values[i], sizeof(T));
        }
      }
      return Array(ValueTypeOf<T>(), values.size(), std::move(raw));
    }
  }

  ValueType elem_type() const { return elem_type_; }
  uint64_t size() const { return count_; }
  const std::vector<std::string>& strings() const { return strings_; }
  const std::vector<uint8_t>& raw() const { return raw_; }

  // Element i of a numeric or bool array, widened. REQUIRES: i < size(), elem_type() is numeric.
  double AsDouble(uint64_t i) const;
  int64_t AsInt64(uint64_t i) const;  // integers and bools exactly; floats saturate, NaN is 0

  // Copies the elements out as T if the element type is exactly T; nullopt otherwise.
  template <typename T>
  std::optional<std::vector<T>> Copy() const {
    if (elem_type_ != ValueTypeOf<T>()) return std::nullopt;
    if constexpr (std::is_same_v<T, std::string>) {
      return strings_;
    } else {
      std::vector<T> out(count_);
      for (uint64_t i = 0; i < count_; ++i) {
        if constexpr (std::is_same_v<T, bool>) {
          out[i] = raw_[i] != 0;
        } else {
          std::memcpy(&out[i], raw_.data() + i * sizeof(T), sizeof(T));
        }
      }
      return out;
    }
  }

  bool operator==(const Array& o) const = default;

 private:
  ValueType elem_type_ = ValueType::kUint8;
  uint64_t count_ = 0;
  std::vector<uint8_t> raw_;         // numeric elements, packed little-endian
  std::vector<std::string> strings_;  // string elements
};

// Alternatives in ValueType order: index() == static_cast<uint32_t>(type()).
using ValueVariant = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                                  bool, std::string, Array, uint64_t, int64_t, double>;

class Value {
 public:
  Value() = default;
  template <typename T>
  Value(T v) : v_(std::move(v)) {}  // NOLINT: implicit from any alternative
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT

  ValueType type() const { return static_cast<ValueType>(v_.index()); }
  const ValueVariant& variant() const { return v_; }

  template <typename T>
  const T* get_if() const { return std::get_if<T>(&v_); }

  bool is_integer() const;  // any of the eight integer types
  // The value as a signed 64-bit integer if it is an integer type and fits.
  std::optional<int64_t> AsInt64() const;
  // The value as a double if it is a float or integer type.
  std::optional<double> AsDouble() const;

  bool operator==(const Value& o) const = default;

 private:
  ValueVariant v_;
};

static_assert(std::variant_size_v<ValueVariant> == kValueTypeCount);

}  // namespace tandem::gguf
