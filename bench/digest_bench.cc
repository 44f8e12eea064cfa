// First-use hashing of a model on the main node: modelstore::DigestModel with no record, the
// cost a main node pays once per model file before it can hand its workers the tensor digests.
//
//   digest_bench MODEL.gguf [RUNS]
//
// Prints each run and the median in GB/s on one thread (the hashing is single-threaded, so this
// is the per-core figure). The first run may read the file from disk; later ones from the page
// cache, as on a main node that has just opened the model.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gguf/reader.h"
#include "modelstore/model_files.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: digest_bench MODEL.gguf [RUNS]\n");
    return 2;
  }
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  tandem::Result<tandem::gguf::GgufFile> f = tandem::gguf::GgufFile::Open(argv[1]);
  if (!f.ok()) {
    std::fprintf(stderr, "digest_bench: %s\n", f.status().ToString().c_str());
    return 1;
  }
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    tandem::Result<tandem::modelstore::ModelDigests> d = tandem::modelstore::DigestModel(argv[1], *f, "");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!d.ok()) {
      std::fprintf(stderr, "digest_bench: %s\n", d.status().ToString().c_str());
      return 1;
    }
    gbps.push_back(f->file_size() / s / 1e9);
    std::printf("run %d: %.3f GB in %.3f s = %.2f GB/s (one thread, %zu tensors)\n", r + 1, f->file_size() / 1e9, s,
                gbps.back(), d->tensors.size());
  }
  std::sort(gbps.begin(), gbps.end());
  std::printf("median: %.2f GB/s per core\n", gbps[gbps.size() / 2]);
  return 0;
}
