#include "gguf/writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tandem::gguf {
namespace {

// Appends little-endian encodings to a byte buffer.
class Encoder {
 public:
  template <typename T>
  void Put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.insert(out_.end(), b, b + sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void PutBytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void PadTo(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  void PutValue(const Value& v) {
    std::visit(
        [this](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            PutString(x);
          } else if constexpr (std::is_same_v<T, Array>) {
            Put<uint32_t>(static_cast<uint32_t>(x.elem_type()));
            Put<uint64_t>(x.size());
            if (x.elem_type() == ValueType::kString) {
              for (const std::string& s : x.strings()) PutString(s);
            } else {
              PutBytes(x.raw());
            }
          } else if constexpr (std::is_same_v<T, bool>) {
            Put<uint8_t>(x ? 1 : 0);
          } else {
            Put<T>(x);
          }
        },
        v.variant());
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

}  // namespace

void GgufWriter::Set(std::string key, Value value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::CheckTensor(const std::string& name, TensorType type,
                               const std::vector<uint64_t>& shape, uint64_t* n_bytes) const {
  if (name.empty()) return Status::InvalidArgument("tensor name is empty");
  for (const Tensor& t : tensors_) {
    if (t.name == name) return Status::InvalidArgument("duplicate tensor '" + name + "'");
  }
  if (shape.empty() || shape.size() > kMaxDims) {
    return Status::InvalidArgument("tensor '" + name + "' must have 1 to 4 dimensions");
  }
  const TensorTypeInfo& ti = TensorTypeTraits(type);
  if (shape[0] % ti.block_size != 0) {
    return Status::InvalidArgument("tensor '" + name + "' row length " + std::to_string(shape[0]) +
                                   " is not a multiple of the " + std::string(ti.name) +
                                   " block size " + std::to_string(ti.block_size));
  }
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      return Status::InvalidArgument("tensor '" + name + "' is too large");
    }
  }
  *n_bytes = n / ti.block_size * ti.type_size;
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                             std::vector<uint8_t> bytes) {
  uint64_t n_bytes = 0;
  TANDEM_RETURN_IF_ERROR(CheckTensor(name, type, shape, &n_bytes));
  if (bytes.size() != n_bytes) {
    return Status::InvalidArgument("tensor '" + name + "' needs " + std::to_string(n_bytes) +
                                   " bytes, got " + std::to_string(bytes.size()));
  }
  tensors_.push_back({std::move(name), type, std::move(shape), n_bytes, std::move(bytes), {}});
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                             FillFn fill) {
  uint64_t n_bytes = 0;
  TANDEM_RETURN_IF_ERROR(CheckTensor(name, type, shape, &n_bytes));
  tensors_.push_back({std::move(name), type, std::move(shape), n_bytes, {}, std::move(fill)});
  return Status::Ok();
}

uint64_t GgufWriter::tensor_bytes() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors_) n += t.n_bytes;
  return n;
}

uint64_t GgufWriter::Alignment() const {
  for (const auto& [k, v] : kv_) {
    if (k == kAlignmentKey) {
      std::optional<int64_t> a = v.AsInt64();
      if (a && *a > 0 && (*a & (*a - 1)) == 0) return static_cast<uint64_t>(*a);
    }
  }
  return kDefaultAlignment;
}

Status GgufWriter::Emit(const std::function<Status(std::span<const uint8_t>)>& sink,
                        const std::function<void(size_t, size_t)>& progress) const {
  const uint64_t align = Alignment();
  Encoder h;
  h.Put<uint32_t>(kMagic);
  h.Put<uint32_t>(kWriteVersion);
  h.Put<uint64_t>(tensors_.size());
  h.Put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    h.PutString(k);
    h.Put<uint32_t>(static_cast<uint32_t>(v.type()));
    h.PutValue(v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    h.PutString(t.name);
    h.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) h.Put<uint64_t>(d);
    h.Put<uint32_t>(static_cast<uint32_t>(t.type));
    h.Put<uint64_t>(offset);
    offset += (t.n_bytes + align - 1) / align * align;
  }
  h.PadTo(align);
  TANDEM_RETURN_IF_ERROR(sink(h.bytes()));

  std::vector<uint8_t> scratch;
  static const uint8_t kZeros[4096] = {};
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (t.fill) {
      scratch.assign(t.n_bytes, 0);
      Status st = t.fill(scratch);
      if (!st.ok()) return st.WithContext("tensor '" + t.name + "'");
      TANDEM_RETURN_IF_ERROR(sink(scratch));
    } else {
      TANDEM_RETURN_IF_ERROR(sink(t.bytes));
    }
    uint64_t pad = (align - t.n_bytes % align) % align;
    while (pad > 0) {
      const uint64_t n = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
      TANDEM_RETURN_IF_ERROR(sink({kZeros, static_cast<size_t>(n)}));
      pad -= n;
    }
    if (progress) progress(i + 1, tensors_.size());
  }
  return Status::Ok();
}

Status GgufWriter::Write(const std::string& path,
                         const std::function<void(size_t, size_t)>& progress) const {
  const std::string tmp = path + ".partial";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return Status::IOError("cannot create '" + tmp + "': " + std::strerror(errno));
  Status st = Emit(
      [&](std::span<const uint8_t> b) {
        if (!b.empty() && std::fwrite(b.data(), 1, b.size(), f.get()) != b.size()) {
          return Status::IOError("cannot write '" + tmp + "': " + std::strerror(errno));
        }
        return Status::Ok();
      },
      progress);
  if (st.ok() && std::fflush(f.get()) != 0) {
    st = Status::IOError("cannot write '" + tmp + "': " + std::strerror(errno));
  }
  FILE* raw = f.release();
  if (std::fclose(raw) != 0 && st.ok()) {
    st = Status::IOError("cannot close '" + tmp + "': " + std::strerror(errno));
  }
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Status::IOError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
  if (!st.ok()) std::remove(tmp.c_str());
  return st;
}

Result<std::vector<uint8_t>> GgufWriter::WriteToBuffer() const {
  std::vector<uint8_t> out;
  TANDEM_RETURN_IF_ERROR(Emit(
      [&](std::span<const uint8_t> b) {
        out.insert(out.end(), b.begin(), b.end());
        return Status::Ok();
      },
      {}));
  return out;
}

}  // namespace tandem::gguf
