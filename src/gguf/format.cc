#include "gguf/format.h"

#include <array>
#include <cctype>

namespace tandem::gguf {
namespace {

// Block sizes and bytes per block from the GGUF/ggml type table.
constexpr std::array kTypes = {
    TensorTypeInfo{TensorType::kF32, "f32", 1, 4},
    TensorTypeInfo{TensorType::kF16, "f16", 1, 2},
    TensorTypeInfo{TensorType::kQ4_0, "q4_0", 32, 18},
    TensorTypeInfo{TensorType::kQ4_1, "q4_1", 32, 20},
    TensorTypeInfo{TensorType::kQ5_0, "q5_0", 32, 22},
    TensorTypeInfo{TensorType::kQ5_1, "q5_1", 32, 24},
    TensorTypeInfo{TensorType::kQ8_0, "q8_0", 32, 34},
    TensorTypeInfo{TensorType::kQ8_1, "q8_1", 32, 36},
    TensorTypeInfo{TensorType::kQ2_K, "q2_K", 256, 84},
    TensorTypeInfo{TensorType::kQ3_K, "q3_K", 256, 110},
    TensorTypeInfo{TensorType::kQ4_K, "q4_K", 256, 144},
    TensorTypeInfo{TensorType::kQ5_K, "q5_K", 256, 176},
    TensorTypeInfo{TensorType::kQ6_K, "q6_K", 256, 210},
    TensorTypeInfo{TensorType::kQ8_K, "q8_K", 256, 292},
    TensorTypeInfo{TensorType::kIQ2_XXS, "iq2_xxs", 256, 66},
    TensorTypeInfo{TensorType::kIQ2_XS, "iq2_xs", 256, 74},
    TensorTypeInfo{TensorType::kIQ3_XXS, "iq3_xxs", 256, 98},
    TensorTypeInfo{TensorType::kIQ1_S, "iq1_s", 256, 50},
    TensorTypeInfo{TensorType::kIQ4_NL, "iq4_nl", 32, 18},
    TensorTypeInfo{TensorType::kIQ3_S, "iq3_s", 256, 110},
    TensorTypeInfo{TensorType::kIQ2_S, "iq2_s", 256, 82},
    TensorTypeInfo{TensorType::kIQ4_XS, "iq4_xs", 256, 136},
    TensorTypeInfo{TensorType::kI8, "i8", 1, 1},
    TensorTypeInfo{TensorType::kI16, "i16", 1, 2},
    TensorTypeInfo{TensorType::kI32, "i32", 1, 4},
    TensorTypeInfo{TensorType::kI64, "i64", 1, 8},
    TensorTypeInfo{TensorType::kF64, "f64", 1, 8},
    TensorTypeInfo{TensorType::kIQ1_M, "iq1_m", 256, 56},
    TensorTypeInfo{TensorType::kBF16, "bf16", 1, 2},
    TensorTypeInfo{TensorType::kTQ1_0, "tq1_0", 256, 54},
    TensorTypeInfo{TensorType::kTQ2_0, "tq2_0", 256, 66},
    TensorTypeInfo{TensorType::kMXFP4, "mxfp4", 32, 17},
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "?";
}

uint32_t ValueTypeSize(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

std::optional<TensorTypeInfo> LookupTensorType(uint32_t id) {
  for (const TensorTypeInfo& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const TensorTypeInfo& TensorTypeTraits(TensorType t) {
  for (const TensorTypeInfo& info : kTypes) {
    if (info.type == t) return info;
  }
  return kTypes[0];  // unreachable for enumerators; the table covers them all (tested)
}

std::string_view TensorTypeName(TensorType t) { return TensorTypeTraits(t).name; }

std::optional<TensorType> ParseTensorType(std::string_view name) {
  for (const TensorTypeInfo& t : kTypes) {
    if (EqualsIgnoreCase(t.name, name)) return t.type;
  }
  return std::nullopt;
}

}  // namespace tandem::gguf
