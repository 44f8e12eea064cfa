#include "modelstore/model_files.h"

#include <blake3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "gguf/reader.h"
#include "model/layout.h"

namespace tandem::modelstore {

std::string ModelId::Hex() const {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 8; ++i) {
    s += kHex[digest[i] >> 4];
    s += kHex[digest[i] & 15];
  }
  return s;
}

Result<ModelId> IdentifyModel(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::Open(path));
  const uint64_t n = f.data_offset();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  Hasher h;
  std::vector<char> buf(1 << 20);
  for (uint64_t done = 0; done < n;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - done));
    if (!in.read(buf.data(), static_cast<std::streamsize>(want))) return Status::IOError("cannot read " + path);
    h.Update(reinterpret_cast<const uint8_t*>(buf.data()), want);
    done += want;
  }
  ModelId id;
  id.digest = h.Final();
  id.file_size = f.file_size();
  return id;
}

Result<std::string> FindModel(const ModelId& want, const std::vector<std::string>& candidates,
                              const std::string& dir) {
  std::vector<std::string> paths;
  for (const std::string& c : candidates) {
    if (!c.empty()) paths.push_back(c);
  }
  std::error_code ec;
  if (!dir.empty() && std::filesystem::is_directory(dir, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
    }
  }
  std::string tried;
  for (const std::string& p : paths) {
    if (std::filesystem::file_size(p, ec) != want.file_size || ec) {
      tried += "\n  " + p + ": " + (ec ? "missing" : "different size");
      continue;
    }
    Result<ModelId> id = IdentifyModel(p);
    if (id.ok() && id->digest == want.digest) return p;
    tried += "\n  " + p + ": " + (id.ok() ? "different header digest" : id.status().message());
  }
  return Status::NotFound("no local copy of the model (size " + std::to_string(want.file_size) +
                          ", header digest " + want.Hex() + ")" +
                          (tried.empty() ? std::string(": nothing to try (give -m or --models-dir)") : ", tried:" + tried));
}

}  // namespace tandem::modelstore

namespace tandem::modelstore {

static_assert(sizeof(blake3_hasher) <= 2048);
static_assert(BLAKE3_OUT_LEN == net::kDigestBytes);

Hasher::Hasher() { blake3_hasher_init(reinterpret_cast<blake3_hasher*>(state_)); }
void Hasher::Update(const uint8_t* p, size_t n) { blake3_hasher_update(reinterpret_cast<blake3_hasher*>(state_), p, n); }
net::Digest Hasher::Final() const {
  net::Digest d;
  blake3_hasher_finalize(reinterpret_cast<const blake3_hasher*>(state_), d.data(), d.size());
  return d;
}

net::Digest DigestBytes(std::span<const uint8_t> bytes) {
  Hasher h;
  h.Update(bytes.data(), bytes.size());
  return h.Final();
}

std::string HexDigest(const net::Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

net::Digest ModelDigests::Root() const {
  Hasher h;
  static constexpr char kLabel[] = "tandem model digests v1";
  h.Update(reinterpret_cast<const uint8_t*>(kLabel), sizeof kLabel);
  h.Update(id.digest.data(), id.digest.size());
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(id.file_size >> (8 * i));
  h.Update(le, 8);
  const uint64_t n = tensors.size();
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(n >> (8 * i));
  h.Update(le, 8);
  for (const net::Digest& t : tensors) h.Update(t.data(), t.size());
  return h.Final();
}

namespace {

// A record of a file's digests: a fixed header, the digests, and the BLAKE3 of all that (a
// record cut short or edited by accident is ignored, never trusted). Little-endian throughout.
constexpr char kRecordMagic[8] = {'T', 'N', 'D', 'M', 'D', 'G', '0', '1'};
constexpr size_t kRecordFixedBytes = 8 + 8 + 8 + 32 + 4;
constexpr uint32_t kMaxRecordTensors = 1u << 20;

void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetU64(const uint8_t* p, int bytes = 8) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
Result<FileStamp> Stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::IOError("cannot stat " + path + ": " + std::strerror(errno));
  FileStamp s;
  s.size = static_cast<uint64_t>(st.st_size);
  const auto mtime = std::filesystem::last_write_time(path);
  s.mtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  return s;
}

std::vector<uint8_t> EncodeRecord(const FileStamp& stamp, const ModelDigests& d) {
  std::vector<uint8_t> out(kRecordMagic, kRecordMagic + 8);
  PutU64(&out, stamp.size);
  PutU64(&out, static_cast<uint64_t>(stamp.mtime_ns));
  out.insert(out.end(), d.id.digest.begin(), d.id.digest.end());
  const uint32_t n = static_cast<uint32_t>(d.tensors.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (const net::Digest& t : d.tensors) out.insert(out.end(), t.begin(), t.end());
  const net::Digest check = DigestBytes(out);
  out.insert(out.end(), check.begin(), check.end());
  return out;
}

// The digests in a record when it is whole and matches `stamp` and `n_tensors`.
std::optional<ModelDigests> DecodeRecord(const std::vector<uint8_t>& r, const FileStamp& stamp, size_t n_tensors) {
  if (r.size() < kRecordFixedBytes + 32 || std::memcmp(r.data(), kRecordMagic, 8) != 0) return std::nullopt;
  const uint64_t n = GetU64(r.data() + 56, 4);
  if (n > kMaxRecordTensors || n != n_tensors || r.size() != kRecordFixedBytes + 32 * n + 32) return std::nullopt;
  const net::Digest check = DigestBytes(std::span(r.data(), r.size() - 32));
  if (std::memcmp(check.data(), r.data() + r.size() - 32, 32) != 0) return std::nullopt;
  if (GetU64(r.data() + 8) != stamp.size || static_cast<int64_t>(GetU64(r.data() + 16)) != stamp.mtime_ns) return std::nullopt;
  ModelDigests d;
  d.id.file_size = stamp.size;
  std::memcpy(d.id.digest.data(), r.data() + 24, 32);
  d.tensors.resize(n);
  for (uint64_t i = 0; i < n; ++i) std::memcpy(d.tensors[i].data(), r.data() + kRecordFixedBytes + 32 * i, 32);
  return d;
}

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  net::Digest d{};
  for (size_t i = 0; i < d.size(); i += 4) {
    const uint32_t v = rd();
    std::memcpy(d.data() + i, &v, 4);
  }
  return HexDigest(d).substr(0, 2 * bytes);
}

// Writes `bytes` to a fresh file beside `final_path` (O_EXCL|O_NOFOLLOW, 0600) and renames it
// over `final_path`.
Status WriteFileAtomically(const std::string& final_path, std::span<const uint8_t> bytes) {
  const std::string temp = final_path + ".tmp-" + RandomHex(8);
  const int fd = ::open(temp.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot create " + temp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  const bool ok = off == bytes.size() && ::close(fd) == 0;
  std::error_code ec;
  if (ok) std::filesystem::rename(temp, final_path, ec);
  if (!ok || ec) {
    std::filesystem::remove(temp, ec);
    return Status::IOError("cannot write " + final_path);
  }
  return Status::Ok();
}

// mkdir -p with 0700 for what it creates; refuses a symlink or a folder writable by others.
Status PreparePrivateDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::IOError(dir + " is not a folder (a symbolic link is refused)");
  }
  if (st.st_uid == ::geteuid()) {
    if ((st.st_mode & 0777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) {
      return Status::IOError("cannot make " + dir + " private: " + std::strerror(errno));
    }
  } else if (st.st_mode & 022) {
    return Status::IOError(dir + " belongs to another user and others may write to it");
  }
  return Status::Ok();
}

}  // namespace

std::string DefaultDigestRecordDir() {
  if (const char* d = std::getenv("TANDEM_CACHE_DIR"); d && *d) return std::string(d) + "/digests";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/tandem/digests";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/tandem/digests";
  return "";
}

Result<ModelDigests> DigestModel(const std::string& path, const gguf::GgufFile& file, const std::string& record_dir,
                                 const std::function<void(uint64_t, uint64_t)>& progress, bool* hashed) {
  if (hashed) *hashed = false;
  TANDEM_ASSIGN_OR_RETURN(FileStamp stamp, Stamp(path));
  if (stamp.size != file.file_size()) return Status::IOError(path + " changed while it was open");
  std::string record;
  if (!record_dir.empty()) {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(path, ec).string();
    record = record_dir + "/" + HexDigest(DigestBytes(std::span(reinterpret_cast<const uint8_t*>(abs.data()), abs.size()))).substr(0, 32);
    std::ifstream in(record, std::ios::binary);
    if (in) {
      std::vector<uint8_t> r((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (std::optional<ModelDigests> d = DecodeRecord(r, stamp, file.tensors().size())) return std::move(*d);
    }
  }
  ModelDigests d;
  TANDEM_ASSIGN_OR_RETURN(d.id, IdentifyModel(path));
  if (d.id.file_size != stamp.size) return Status::IOError(path + " changed while it was hashed");
  uint64_t total = 0, done = 0;
  for (const gguf::TensorInfo& t : file.tensors()) total += t.n_bytes;
  d.tensors.reserve(file.tensors().size());
  for (const gguf::TensorInfo& t : file.tensors()) {
    // In slices, so progress moves on a model with a few huge tensors.
    Hasher h;
    constexpr uint64_t kSlice = 64u << 20;
    for (uint64_t off = 0; off < t.n_bytes; off += kSlice) {
      const uint64_t n = std::min(kSlice, t.n_bytes - off);
      h.Update(t.data + off, n);
      done += n;
      if (progress) progress(done, total);
    }
    d.tensors.push_back(h.Final());
  }
  if (hashed) *hashed = true;
  if (!record.empty() && PreparePrivateDir(record_dir).ok()) {
    Result<FileStamp> after = Stamp(path);
    if (after.ok() && after->size == stamp.size && after->mtime_ns == stamp.mtime_ns) {
      (void)WriteFileAtomically(record, EncodeRecord(stamp, d));
    }
  }
  return d;
}

Status VerifyStageCopy(const std::string& path, const ModelDigests& want, int64_t b, int64_t e, bool last) {
  TANDEM_ASSIGN_OR_RETURN(ModelId id, IdentifyModel(path));
  if (id.file_size != want.id.file_size || id.digest != want.id.digest) {
    return Status::Corruption(path + ": its header differs from the main node's model");
  }
  TANDEM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::Open(path));
  if (f.tensors().size() != want.tensors.size()) {
    return Status::Corruption(path + " has " + std::to_string(f.tensors().size()) + " tensors, the main node's model " +
                              std::to_string(want.tensors.size()));
  }
  const gguf::TensorInfo* first = f.tensors().data();
  for (const gguf::TensorInfo* t : model::TensorsOfStage(f, b, e, /*first=*/false, last).tensors) {
    if (DigestBytes(t->bytes()) != want.tensors[static_cast<size_t>(t - first)]) {
      return Status::Corruption(path + ": tensor " + t->name + " differs from the main node's");
    }
  }
  return Status::Ok();
}

namespace {

}  // namespace

std::vector<ByteRange> StageRanges(const gguf::GgufFile& f, int64_t b, int64_t e, bool last) {
  std::vector<ByteRange> out;
  out.push_back({0, f.data_offset()});
  // Never the first stage: that is the main node, which has the file.
  std::vector<const gguf::TensorInfo*> ts = model::TensorsOfStage(f, b, e, /*first=*/false, last).tensors;
  std::erase_if(ts, [](const gguf::TensorInfo* t) { return t->n_bytes == 0; });
  std::sort(ts.begin(), ts.end(), [](auto* x, auto* y) { return x->file_offset < y->file_offset; });
  for (const gguf::TensorInfo* t : ts) out.push_back({t->file_offset, t->n_bytes});
  return out;
}

uint64_t TotalBytes(const std::vector<ByteRange>& ranges) {
  uint64_t n = 0;
  for (const ByteRange& r : ranges) n += r.size;
  return n;
}

Status WeightCache::Prepare() const {
  if (dir_.empty()) return Status::InvalidArgument("no cache folder");
  return PreparePrivateDir(dir_);
}

std::string WeightCache::FinalPath(const ModelDigests& want, int64_t b, int64_t e, bool last) const {
  return dir_ + "/" + HexDigest(want.Root()) + "-L" + std::to_string(b) + "-" + std::to_string(e) +
         (last ? "-head" : "") + ".gguf";
}

std::string WeightCache::NewTempPath(const ModelDigests& want, int64_t b, int64_t e, bool last) const {
  return FinalPath(want, b, e, last) + ".partial-" + RandomHex(8);
}

Result<std::string> WeightCache::Find(const ModelDigests& want, int64_t b, int64_t e, bool last) const {
  std::error_code ec;
  if (dir_.empty() || !std::filesystem::is_directory(dir_, ec)) return Status::NotFound("no cache");
  const std::string prefix = HexDigest(want.Root()) + "-L";
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || entry.path().extension() != ".gguf" || !entry.is_regular_file(ec)) continue;
    long long cb = -1, ce = -1;
    char tail[16] = {};
    if (std::sscanf(name.c_str() + prefix.size(), "%lld-%lld%15s", &cb, &ce, tail) < 2) continue;
    const bool has_head = std::string(tail).rfind("-head", 0) == 0;
    if (cb > b || ce < e || (last && !has_head)) continue;
    // Checked on every use: what this stage reads must be the main node's weights.
    const std::string path = entry.path().string();
    if (VerifyStageCopy(path, want, b, e, last).ok()) return path;
    std::filesystem::remove(path, ec);
  }
  return Status::NotFound("no cached copy");
}

Status WeightCache::Commit(const std::string& temp, const ModelDigests& want, int64_t b, int64_t e, bool last) const {
  std::error_code ec;
  if (Status st = VerifyStageCopy(temp, want, b, e, last); !st.ok()) {
    std::filesystem::remove(temp, ec);
    return Status::Corruption("the weights received do not match the model's digests: " + st.message());
  }
  const std::string final_path = FinalPath(want, b, e, last);
  std::filesystem::rename(temp, final_path, ec);
  if (ec) return Status::IOError("cannot move " + temp + " into place: " + ec.message());
  return Status::Ok();
}

}  // namespace tandem::modelstore
