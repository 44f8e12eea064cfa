// Identifying a GGUF model across machines, finding a worker's local copy of it, and checking
// that a copy holds the same weights.
//
// Two levels of identity:
//   - ModelId: the BLAKE3-256 digest of the header (every byte before the tensor data: metadata,
//     tensor names, types, shapes and offsets) and the file size. Cheap (no weights are read);
//     used to find candidate copies.
//   - ModelDigests: ModelId plus a BLAKE3-256 digest of every tensor's bytes. The main node
//     computes it once per file (and keeps it in a record keyed by path, size and modification
//     time); a worker checks every tensor it uses against it, whatever the copy's origin (its own
//     file, its cache, or bytes just received). Its Root() names cache entries, so an entry made
//     from other weights can never be taken for this model's.
//
// Thread safety: functions without shared state; WeightCache is immutable (its files are not:
// two workers must not share a cache folder).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"
#include "net/messages.h"

namespace tandem::modelstore {

struct ModelId {
  net::Digest digest{};  // of the header
  uint64_t file_size = 0;
  std::string Hex() const;  // first 16 hex digits, for messages
};

// Reads the header of the GGUF file at `path` (validating it) and digests it.
Result<ModelId> IdentifyModel(const std::string& path);

// Incremental BLAKE3-256.
class Hasher {
 public:
  Hasher();
  void Update(const uint8_t* p, size_t n);
  net::Digest Final() const;

 private:
  alignas(64) unsigned char state_[2048];
};
net::Digest DigestBytes(std::span<const uint8_t> bytes);
std::string HexDigest(const net::Digest& d);  // all 64 hex digits

struct ModelDigests {
  ModelId id;
  std::vector<net::Digest> tensors;  // one per tensor, in the order of the file's tensor table
  // Binds the header digest, the size and every tensor digest: equal roots, equal weights.
  net::Digest Root() const;
};

// The digests of the model file at `path` (already opened as `file`). With a non-empty
// `record_dir`, a record there keyed by the path's absolute name, size and modification time is
// used when it matches, and written when it does not (a record that cannot be written costs only
// the time to hash again next time). `progress(done, total)` is called while hashing; *hashed
// says whether the tensors were hashed now (false: the record matched).
Result<ModelDigests> DigestModel(const std::string& path, const gguf::GgufFile& file,
                                 const std::string& record_dir,
                                 const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
                                 bool* hashed = nullptr);
// Where the main node keeps its records: $TANDEM_CACHE_DIR/digests, else
// $XDG_CACHE_HOME/tandem/digests, else ~/.cache/tandem/digests; empty when none of them is set.
std::string DefaultDigestRecordDir();

// Checks the copy at `path` against `want` for layers [b, e) (and the head if `last`): its header
// digest and size, its tensor count, and the bytes of every tensor that stage uses. The first
// difference is named (e.g. "tensor blk.3.ffn_up.weight differs from the main node's").
Status VerifyStageCopy(const std::string& path, const ModelDigests& want, int64_t b, int64_t e, bool last);

// The first of `candidates` (files) then *.gguf in `dir` whose id equals `want`; NotFound
// listing what was tried otherwise.
Result<std::string> FindModel(const ModelId& want, const std::vector<std::string>& candidates,
                              const std::string& dir);

// The byte ranges of the model file a stage needs, in file order: the header (everything before
// the tensor data), the tensors of layers [layer_begin, layer_end), small non-layer tensors, and
// on the last stage the output norm and head (the embedding when the head is tied). A worker
// without the file receives exactly these and stores them at their offsets in a sparse copy,
// which then opens as an ordinary GGUF file.
struct ByteRange {
  uint64_t offset = 0, size = 0;
};
std::vector<ByteRange> StageRanges(const gguf::GgufFile& file, int64_t layer_begin,
                                   int64_t layer_end, bool last);
uint64_t TotalBytes(const std::vector<ByteRange>& ranges);

// The worker's store of weights received from main nodes: sparse copies named by the model's
// Root() and layer range, checked with VerifyStageCopy before they are committed and again on
// every use. The folder is made private (0700); a new copy is written to a fresh file created
// with O_EXCL|O_NOFOLLOW and renamed into place only once verified.
class WeightCache {
 public:
  explicit WeightCache(std::string dir) : dir_(std::move(dir)) {}
  // Creates the folder (0700) if needed; refuses a symlink or a folder others may write to.
  Status Prepare() const;
  // A cached copy holding layers [b, e) (and the head if `last`) that verifies against `want`;
  // NotFound otherwise. A copy that fails verification is deleted.
  Result<std::string> Find(const ModelDigests& want, int64_t b, int64_t e, bool last) const;
  // A new, unpredictable name for a copy being received (the file does not exist yet).
  std::string NewTempPath(const ModelDigests& want, int64_t b, int64_t e, bool last) const;
  std::string FinalPath(const ModelDigests& want, int64_t b, int64_t e, bool last) const;
  // Verifies `temp` against `want` (deleting it when it differs), then moves it into place.
  Status Commit(const std::string& temp, const ModelDigests& want, int64_t b, int64_t e, bool last) const;

 private:
  std::string dir_;
};

}  // namespace tandem::modelstore
