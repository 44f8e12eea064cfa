#include "gguf/reader.h"

#include <algorithm>
#include <limits>

#include "base/byte_reader.h"

namespace tandem::gguf {
namespace {

// Smallest encoding of one metadata entry: key length (8) + one key byte + type (4) + 1 byte value.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// Smallest encoding of one tensor info: name length (8) + n_dims (4) + 1 dim (8) + type (4) +
// offset (8).
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 200)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (s.size() > 200) out += "...";
  out += "'";
  return out;
}

template <typename T>
Result<Value> ReadScalar(ByteReader& r, std::string_view what) {
  TANDEM_ASSIGN_OR_RETURN(T v, r.Read<T>(what));
  return Value(v);
}

Result<bool> ReadBool(ByteReader& r, std::string_view what) {
  const uint64_t at = r.offset();
  TANDEM_ASSIGN_OR_RETURN(uint8_t b, r.Read<uint8_t>(what));
  if (b > 1) {
    return ByteReader::ErrorAt(at, std::string(what) + " is " + std::to_string(b) +
                                       ", not a bool (0 or 1)");
  }
  return b == 1;
}

Result<ValueType> ReadValueType(ByteReader& r, std::string_view what) {
  const uint64_t at = r.offset();
  TANDEM_ASSIGN_OR_RETURN(uint32_t t, r.Read<uint32_t>(what));
  if (t >= kValueTypeCount) {
    return ByteReader::ErrorAt(at, "unknown " + std::string(what) + " " + std::to_string(t));
  }
  return static_cast<ValueType>(t);
}

Result<Array> ReadArray(ByteReader& r) {
  const uint64_t at = r.offset();
  TANDEM_ASSIGN_OR_RETURN(ValueType elem, ReadValueType(r, "array element type"));
  if (elem == ValueType::kArray) {
    return ByteReader::ErrorAt(at, "nested arrays are not supported");
  }
  TANDEM_ASSIGN_OR_RETURN(uint64_t n, r.Read<uint64_t>("array length"));
  // Bound the count by the bytes left before allocating anything for it.
  const uint64_t min_elem = elem == ValueType::kString ? 8 : ValueTypeSize(elem);
  if (n > r.remaining() / min_elem) {
    return ByteReader::ErrorAt(at + 4, "array of " + std::to_string(n) + " " +
                                           std::string(ValueTypeName(elem)) +
                                           " elements does not fit in the " +
                                           std::to_string(r.remaining()) + " bytes that remain");
  }
  if (elem == ValueType::kString) {
    std::vector<std::string> strings;
    strings.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      TANDEM_ASSIGN_OR_RETURN(std::string_view s,
                              r.ReadString64("array string", std::numeric_limits<uint64_t>::max()));
      strings.emplace_back(s);
    }
    return Array(std::move(strings));
  }
  const uint64_t bytes = n * min_elem;
  const uint64_t data_at = r.offset();
  TANDEM_ASSIGN_OR_RETURN(std::span<const uint8_t> raw, r.ReadBytes(bytes, "array data"));
  if (elem == ValueType::kBool) {
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] > 1) {
        return ByteReader::ErrorAt(data_at + i, "bool array element " + std::to_string(i) +
                                                    " is " + std::to_string(raw[i]) +
                                                    ", not 0 or 1");
      }
    }
  }
  return Array(elem, n, std::vector<uint8_t>(raw.begin(), raw.end()));
}

Result<Value> ReadValue(ByteReader& r, ValueType t) {
  switch (t) {
    case ValueType::kUint8: return ReadScalar<uint8_t>(r, "u8 value");
    case ValueType::kInt8: return ReadScalar<int8_t>(r, "i8 value");
    case ValueType::kUint16: return ReadScalar<uint16_t>(r, "u16 value");
    case ValueType::kInt16: return ReadScalar<int16_t>(r, "i16 value");
    case ValueType::kUint32: return ReadScalar<uint32_t>(r, "u32 value");
    case ValueType::kInt32: return ReadScalar<int32_t>(r, "i32 value");
    case ValueType::kFloat32: return ReadScalar<float>(r, "f32 value");
    case ValueType::kUint64: return ReadScalar<uint64_t>(r, "u64 value");
    case ValueType::kInt64: return ReadScalar<int64_t>(r, "i64 value");
    case ValueType::kFloat64: return ReadScalar<double>(r, "f64 value");
    case ValueType::kBool: {
      TANDEM_ASSIGN_OR_RETURN(bool b, ReadBool(r, "bool value"));
      return Value(b);
    }
    case ValueType::kString: {
      TANDEM_ASSIGN_OR_RETURN(std::string_view s,
                              r.ReadString64("string value", std::numeric_limits<uint64_t>::max()));
      return Value(std::string(s));
    }
    case ValueType::kArray: {
      TANDEM_ASSIGN_OR_RETURN(Array a, ReadArray(r));
      return Value(std::move(a));
    }
  }
  return r.Error("unreachable value type");
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

uint64_t TensorInfo::row_bytes() const {
  const TensorTypeInfo& t = TensorTypeTraits(type);
  return ne[0] / t.block_size * t.type_size;
}

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

Result<GgufFile> GgufFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
  GgufFile f;
  f.mapping_ = std::move(m);
  Status st = f.ParseAll(f.mapping_->bytes());
  if (!st.ok()) return st.WithContext(path);
  return f;
}

Result<GgufFile> GgufFile::Parse(std::span<const uint8_t> bytes) {
  GgufFile f;
  TANDEM_RETURN_IF_ERROR(f.ParseAll(bytes));
  return f;
}

Status GgufFile::ParseAll(std::span<const uint8_t> bytes) {
  file_size_ = bytes.size();
  ByteReader r(bytes);

  // Header: magic, version, tensor count, metadata count.
  TANDEM_ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  if (magic != kMagic) {
    return ByteReader::ErrorAt(0, "not a GGUF file (bad magic)");
  }
  TANDEM_ASSIGN_OR_RETURN(version_, r.Read<uint32_t>("version"));
  if (version_ < kMinVersion || version_ > kMaxVersion) {
    if (version_ != 0 && (version_ & 0xffff) == 0) {
      return Status::Unsupported("at byte offset 4: GGUF version field " +
                                 std::to_string(version_) +
                                 " looks byte-swapped; big-endian files are not supported");
    }
    return Status::Unsupported("at byte offset 4: GGUF version " + std::to_string(version_) +
                               " is not supported (supported: 2 and 3)");
  }
  const uint64_t counts_at = r.offset();
  TANDEM_ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("tensor count"));
  TANDEM_ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("metadata count"));
  if (n_kv > r.remaining() / kMinKvBytes) {
    return ByteReader::ErrorAt(counts_at + 8, "metadata count " + std::to_string(n_kv) +
                                                  " cannot fit in the " +
                                                  std::to_string(r.remaining()) +
                                                  " bytes that remain");
  }
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return ByteReader::ErrorAt(counts_at, "tensor count " + std::to_string(n_tensors) +
                                              " cannot fit in the " +
                                              std::to_string(r.remaining()) +
                                              " bytes that remain");
  }

  // Metadata.
  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = r.offset();
    TANDEM_ASSIGN_OR_RETURN(std::string_view key, r.ReadString64("metadata key", kMaxKeyLength));
    if (key.empty()) return ByteReader::ErrorAt(key_at, "empty metadata key");
    if (kv_index_.count(key) != 0) {
      return ByteReader::ErrorAt(key_at, "duplicate metadata key " + Quote(key));
    }
    TANDEM_ASSIGN_OR_RETURN(ValueType type, ReadValueType(r, "metadata value type"));
    Result<Value> v = ReadValue(r, type);
    if (!v.ok()) return v.status().WithContext("metadata " + Quote(key));
    kv_index_.emplace(std::string(key), kv_.size());
    kv_.emplace_back(std::string(key), std::move(v).value());
  }

  // Alignment: optional, an unsigned power of two.
  if (const Value* a = Find(kAlignmentKey)) {
    std::optional<int64_t> n = a->AsInt64();
    if (!a->is_integer() || !n || *n <= 0 || (*n & (*n - 1)) != 0 ||
        static_cast<uint64_t>(*n) > kMaxAlignment) {
      return Status::Corruption("general.alignment must be a power of two between 1 and 2^30");
    }
    alignment_ = static_cast<uint64_t>(*n);
  }

  // Tensor infos.
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return r.Error("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                   std::to_string(r.remaining()) + " bytes that remain");
  }
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t info_at = r.offset();
    TensorInfo t;
    TANDEM_ASSIGN_OR_RETURN(std::string_view name,
                            r.ReadString64("tensor name", kMaxTensorNameLength));
    if (name.empty()) return ByteReader::ErrorAt(info_at, "empty tensor name");
    if (tensor_index_.count(name) != 0) {
      return ByteReader::ErrorAt(info_at, "duplicate tensor name " + Quote(name));
    }
    t.name = std::string(name);
    const std::string ctx = "tensor " + Quote(name);
    const uint64_t dims_at = r.offset();
    TANDEM_ASSIGN_OR_RETURN(t.n_dims, r.Read<uint32_t>("tensor dimension count"));
    if (t.n_dims == 0 || t.n_dims > kMaxDims) {
      return ByteReader::ErrorAt(dims_at, ctx + " has " + std::to_string(t.n_dims) +
                                              " dimensions (1 to 4 allowed)");
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      const uint64_t dim_at = r.offset();
      TANDEM_ASSIGN_OR_RETURN(t.ne[d], r.Read<uint64_t>("tensor dimension"));
      if (t.ne[d] > static_cast<uint64_t>(INT64_MAX) || MulOverflows(n_elements, t.ne[d], &n_elements) ||
          n_elements > static_cast<uint64_t>(INT64_MAX)) {
        return ByteReader::ErrorAt(dim_at, ctx + " has an element count that overflows");
      }
    }
    t.n_elements = n_elements;
    const uint64_t type_at = r.offset();
    TANDEM_ASSIGN_OR_RETURN(uint32_t type_id, r.Read<uint32_t>("tensor type"));
    std::optional<TensorTypeInfo> ti = LookupTensorType(type_id);
    if (!ti) {
      return Status::Unsupported("at byte offset " + std::to_string(type_at) + ": " + ctx +
                                 " has unknown tensor type id " + std::to_string(type_id));
    }
    t.type = ti->type;
    if (t.ne[0] % ti->block_size != 0) {
      return ByteReader::ErrorAt(dims_at, ctx + " row length " + std::to_string(t.ne[0]) +
                                              " is not a multiple of the " +
                                              std::string(ti->name) + " block size " +
                                              std::to_string(ti->block_size));
    }
    // n_elements / block_size * type_size cannot overflow: type_size <= 8 * block_size + 100.
    if (MulOverflows(n_elements / ti->block_size, ti->type_size, &t.n_bytes)) {
      return ByteReader::ErrorAt(dims_at, ctx + " byte size overflows");
    }
    const uint64_t offset_at = r.offset();
    TANDEM_ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>("tensor data offset"));
    if (t.offset % alignment_ != 0) {
      return ByteReader::ErrorAt(offset_at, ctx + " data offset " + std::to_string(t.offset) +
                                                " is not a multiple of the alignment " +
                                                std::to_string(alignment_));
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment after the tensor infos.
  const uint64_t infos_end = r.offset();
  data_offset_ = (infos_end + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > file_size_) {
    return ByteReader::ErrorAt(infos_end, "file ends before its tensor data section (at " +
                                              std::to_string(data_offset_) + ")");
  }
  const uint64_t data_size = tensors_.empty() ? 0 : file_size_ - data_offset_;
  for (TensorInfo& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return Status::Corruption("tensor " + Quote(t.name) + " data [" +
                                std::to_string(data_offset_ + t.offset) + ", " +
                                std::to_string(data_offset_ + t.offset + t.n_bytes) +
                                ") runs past the end of the file (" + std::to_string(file_size_) +
                                " bytes): the file is truncated or corrupt");
    }
    t.file_offset = data_offset_ + t.offset;
    t.data = bytes.data() + t.file_offset;
  }

  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo* prev = by_offset[i - 1];
    if (prev->n_bytes > 0 && prev->offset + prev->n_bytes > by_offset[i]->offset) {
      return Status::Corruption("tensors " + Quote(prev->name) + " and " +
                                Quote(by_offset[i]->name) + " overlap at byte offset " +
                                std::to_string(by_offset[i]->file_offset));
    }
  }
  return Status::Ok();
}

const Value* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {

Status WrongType(std::string_view key, const Value& v, std::string_view want) {
  return Status::InvalidArgument("metadata key '" + std::string(key) + "' has type " +
                                 std::string(ValueTypeName(v.type())) + ", expected " +
                                 std::string(want));
}

Status Missing(std::string_view key) {
  return Status::NotFound("metadata key '" + std::string(key) + "' is missing");
}

}  // namespace

Result<std::string> GgufFile::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const std::string* s = v->get_if<std::string>()) return *s;
  return WrongType(key, *v, "string");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (std::optional<int64_t> i = v->AsInt64()) return *i;
  return WrongType(key, *v, "an integer that fits in 64 bits");
}

Result<uint32_t> GgufFile::GetUint32(std::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(int64_t i, GetInt(key));
  if (i < 0 || i > static_cast<int64_t>(UINT32_MAX)) {
    return Status::OutOfRange("metadata key '" + std::string(key) + "' value " +
                              std::to_string(i) + " is outside 0..2^32-1");
  }
  return static_cast<uint32_t>(i);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (std::optional<double> d = v->AsDouble()) return *d;
  return WrongType(key, *v, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const bool* b = v->get_if<bool>()) return *b;
  return WrongType(key, *v, "bool");
}

Result<const Array*> GgufFile::GetArray(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const Array* a = v->get_if<Array>()) return a;
  return WrongType(key, *v, "array");
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tandem::gguf
