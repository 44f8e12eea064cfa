// libFuzzer target for the GGUF parser: any bytes must give a file or an error, never a crash,
// hang, leak or undefined behaviour. A file that parses is also summarised and its metadata
// walked, so the accessors are fuzzed too.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/reader.h"
#include "gguf/summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::gguf;
  tandem::Result<GgufFile> f = GgufFile::Parse(std::span<const uint8_t>(data, size));
  if (!f.ok()) {
    if (f.status().message().empty()) __builtin_trap();  // every error must say what is wrong
    return 0;
  }
  volatile uint64_t sink = 0;
  ModelSummary s = Summarize(*f);
  sink = sink + s.n_params + s.tensor_bytes;
  for (const auto& [key, value] : f->metadata()) {
    if (const Array* a = value.get_if<Array>()) {
      for (uint64_t i = 0; i < a->size() && i < 64; ++i) {
        if (a->elem_type() != ValueType::kString) {
          sink = sink + std::bit_cast<uint64_t>(a->AsDouble(i)) + static_cast<uint64_t>(a->AsInt64(i));
        }
      }
    } else {
      sink = sink + std::bit_cast<uint64_t>(value.AsDouble().value_or(0)) +
             static_cast<uint64_t>(value.AsInt64().value_or(0));
    }
  }
  for (const TensorInfo& t : f->tensors()) {
    // Touch the first and last byte of each tensor: they must lie inside the input.
    if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  }
  return 0;
}
