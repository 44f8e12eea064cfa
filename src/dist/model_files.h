// Identifying a GGUF model across machines and finding a worker's local copy of it.
//
// A model is identified by the BLAKE2b-256 digest of its header (every byte before the tensor
// data: metadata, tensor names, types, shapes and offsets) together with its file size: cheap to
// compute on any machine (no weights are read), and it changes whenever the tensor table does.
//
// Thread safety: functions without shared state.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "net/messages.h"

namespace tandem::dist {

struct ModelId {
  net::Digest digest{};
  uint64_t file_size = 0;
  std::string Hex() const;  // first 16 hex digits, for messages
};

// Reads the header of the GGUF file at `path` (validating it) and digests it.
Result<ModelId> IdentifyModel(const std::string& path);

// The first of `candidates` (files) then *.gguf in `dir` whose id equals `want`; NotFound
// listing what was tried otherwise.
Result<std::string> FindModel(const ModelId& want, const std::vector<std::string>& candidates,
                              const std::string& dir);

}  // namespace tandem::dist
