// GGUF format constants shared by the reader and the writer: magic, versions, metadata value
// types and tensor (ggml) types with their storage layout. See docs/gguf.md.
//
// Thread safety: constants and pure functions only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
inline constexpr uint32_t kMinVersion = 2;      // v1 used 32-bit counts; not supported
inline constexpr uint32_t kMaxVersion = 3;
inline constexpr uint32_t kWriteVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
inline constexpr std::string_view kAlignmentKey = "general.alignment";

// Metadata value types, numbered as in the file.
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

std::string_view ValueTypeName(ValueType t);
// Size in bytes of one element of a fixed-size type; 0 for string and array.
uint32_t ValueTypeSize(ValueType t);

// Tensor element types, numbered as in ggml. Ids that ggml retired are absent.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;  // as ggml prints it: "f32", "q4_K", ...
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

// Storage facts for a type id read from a file; nullopt for an id this build does not know.
std::optional<TensorTypeInfo> LookupTensorType(uint32_t id);
// Same for a known enum value (never nullopt for enumerators above).
const TensorTypeInfo& TensorTypeTraits(TensorType t);
std::string_view TensorTypeName(TensorType t);
// Parses "q4_K", "Q4_K", "q4_k", "f16", ... ; nullopt if unknown.
std::optional<TensorType> ParseTensorType(std::string_view name);

}  // namespace tandem::gguf
