#include "modelstore/model_files.h"

#include <sodium.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>

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
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  TANDEM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::Open(path));
  const uint64_t n = f.data_offset();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, crypto_generichash_BYTES);
  std::vector<char> buf(1 << 20);
  for (uint64_t done = 0; done < n;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - done));
    if (!in.read(buf.data(), static_cast<std::streamsize>(want))) return Status::IOError("cannot read " + path);
    crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(buf.data()), want);
    done += want;
  }
  ModelId id;
  static_assert(crypto_generichash_BYTES == 32);
  crypto_generichash_final(&st, id.digest.data(), id.digest.size());
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
namespace {

std::string FullHex(const uint8_t* p, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

// Hashes `ranges` of the file at `path` (which must be at least `size` bytes).
Result<net::Digest> DigestRanges(const std::string& path, const std::vector<ByteRange>& ranges) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  Hasher h;
  std::vector<char> buf(1 << 20);
  for (const ByteRange& r : ranges) {
    in.seekg(static_cast<std::streamoff>(r.offset));
    for (uint64_t done = 0; done < r.size;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), r.size - done));
      if (!in.read(buf.data(), static_cast<std::streamsize>(want))) return Status::IOError("cannot read " + path);
      h.Update(reinterpret_cast<const uint8_t*>(buf.data()), want);
      done += want;
    }
  }
  return h.Final();
}

}  // namespace

static_assert(sizeof(crypto_generichash_state) <= 384);

Hasher::Hasher() {
  // Only picks faster implementations; BLAKE2b works without it, so a failure changes nothing.
  [[maybe_unused]] const int init = sodium_init();
  crypto_generichash_init(reinterpret_cast<crypto_generichash_state*>(state_), nullptr, 0, 32);
}
void Hasher::Update(const uint8_t* p, size_t n) {
  crypto_generichash_update(reinterpret_cast<crypto_generichash_state*>(state_), p, n);
}
net::Digest Hasher::Final() {
  net::Digest d;
  crypto_generichash_final(reinterpret_cast<crypto_generichash_state*>(state_), d.data(), d.size());
  return d;
}

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

std::string WeightCache::FinalPath(const ModelId& id, int64_t b, int64_t e, bool last) const {
  return dir_ + "/" + FullHex(id.digest.data(), id.digest.size()) + "-" + std::to_string(id.file_size) +
         "-L" + std::to_string(b) + "-" + std::to_string(e) + (last ? "-head" : "") + ".gguf";
}

std::string WeightCache::TempPath(const ModelId& id, int64_t b, int64_t e, bool last) const {
  return FinalPath(id, b, e, last) + ".partial";
}

Result<std::string> WeightCache::Find(const ModelId& id, int64_t b, int64_t e, bool last) const {
  std::error_code ec;
  if (dir_.empty() || !std::filesystem::is_directory(dir_, ec)) return Status::NotFound("no cache");
  const std::string prefix = FullHex(id.digest.data(), id.digest.size()) + "-" + std::to_string(id.file_size) + "-L";
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || entry.path().extension() != ".gguf") continue;
    long cb = -1, ce = -1;
    char tail[16] = {};
    if (std::sscanf(name.c_str() + prefix.size(), "%ld-%ld%15s", &cb, &ce, tail) < 2) continue;
    const bool has_head = std::string(tail).rfind("-head", 0) == 0;
    if (cb > b || ce < e || (last && !has_head)) continue;
    // Verify: the digest of the ranges this copy was made of.
    const std::string path = entry.path().string();
    std::ifstream d(path + ".b2");
    std::string want_hex;
    d >> want_hex;
    Result<gguf::GgufFile> f = gguf::GgufFile::Open(path);
    bool good = false;
    if (f.ok()) {
      Result<net::Digest> got = DigestRanges(path, StageRanges(*f, cb, ce, has_head));
      good = got.ok() && FullHex(got->data(), got->size()) == want_hex;
    }
    if (good) return path;
    std::filesystem::remove(path, ec);
    std::filesystem::remove(path + ".b2", ec);
  }
  return Status::NotFound("no cached copy");
}

Status WeightCache::Commit(const std::string& temp, const ModelId& id, int64_t b, int64_t e, bool last,
                           const net::Digest& digest) const {
  const std::string final_path = FinalPath(id, b, e, last);
  std::error_code ec;
  {
    std::ofstream d(final_path + ".b2", std::ios::trunc);
    d << FullHex(digest.data(), digest.size()) << "\n";
    if (!d) return Status::IOError("cannot write " + final_path + ".b2");
  }
  std::filesystem::rename(temp, final_path, ec);
  if (ec) return Status::IOError("cannot move " + temp + " into place: " + ec.message());
  return Status::Ok();
}

}  // namespace tandem::modelstore
