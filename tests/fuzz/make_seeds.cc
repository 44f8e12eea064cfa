// make_seeds IN_DIR... OUT_DIR: writes a small fuzzing seed for every GGUF file found in the
// input folders: the same metadata keys and types (arrays cut to 64 elements) and the same tensor
// names and types, with every tensor shrunk to one block. Small seeds keep the fuzzer fast while
// covering the real files' structure.
#include <cstdio>
#include <filesystem>
#include <string>

#include "gguf/reader.h"
#include "gguf/writer.h"

namespace {

using namespace tandem::gguf;

constexpr uint64_t kMaxArray = 64;

Value Shrink(const Value& v) {
  const Array* a = v.get_if<Array>();
  if (a == nullptr || a->size() <= kMaxArray) return v;
  if (a->elem_type() == ValueType::kString) {
    return Array(std::vector<std::string>(a->strings().begin(), a->strings().begin() + kMaxArray));
  }
  const uint64_t elem = ValueTypeSize(a->elem_type());
  return Array(a->elem_type(), kMaxArray,
               std::vector<uint8_t>(a->raw().begin(), a->raw().begin() + kMaxArray * elem));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_seeds IN_DIR... OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[argc - 1];
  std::filesystem::create_directories(out);
  int written = 0;
  for (int i = 1; i < argc - 1; ++i) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(argv[i], ec)) {
      if (e.path().extension() != ".gguf") continue;
      tandem::Result<GgufFile> f = GgufFile::Open(e.path().string());
      if (!f.ok()) {
        std::fprintf(stderr, "make_seeds: %s\n", f.status().ToString().c_str());
        return 1;
      }
      GgufWriter w;
      for (const auto& [k, v] : f->metadata()) w.Set(k, Shrink(v));
      for (const TensorInfo& t : f->tensors()) {
        const uint32_t block = TensorTypeTraits(t.type).block_size;
        std::vector<uint64_t> shape(t.n_dims, 1);
        shape[0] = block;
        const size_t bytes = TensorTypeTraits(t.type).type_size;
        std::vector<uint8_t> data(t.data, t.data + std::min<uint64_t>(bytes, t.n_bytes));
        data.resize(bytes);
        if (!w.AddTensor(t.name, t.type, shape, std::move(data)).ok()) return 1;
      }
      const std::string name = (out / e.path().filename()).string();
      if (tandem::Status st = w.Write(name); !st.ok()) {
        std::fprintf(stderr, "make_seeds: %s\n", st.ToString().c_str());
        return 1;
      }
      ++written;
    }
  }
  std::printf("make_seeds: wrote %d seeds to %s\n", written, out.c_str());
  return 0;
}
