#include "dist/model_files.h"

#include <sodium.h>

#include <filesystem>
#include <fstream>

#include "gguf/reader.h"

namespace tandem::dist {

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

}  // namespace tandem::dist
