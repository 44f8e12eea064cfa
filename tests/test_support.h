// Helpers shared by the cross-module tests: where ../shared is, and listing its files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::testing {

// The read-only shared material: $TANDEM_SHARED_DIR if set, else the path CMake was given.
inline std::filesystem::path SharedDir() {
  if (const char* env = std::getenv("TANDEM_SHARED_DIR")) return env;
  return TANDEM_SHARED_DIR;
}

// All files in SharedDir()/sub ending in `ext`, sorted; empty if the folder is absent.
inline std::vector<std::filesystem::path> SharedFiles(const std::string& sub,
                                                      const std::string& ext) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(SharedDir() / sub, ec)) {
    if (e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The largest per-row KL(softmax(a) || softmax(b)) over rows of n_vocab logits (sizes must match);
// NaN when a row has non-finite logits, so that no bound holds for them.
inline double MaxKl(const std::vector<float>& a, const std::vector<float>& b, int64_t n_vocab) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t r = 0; r + n_vocab <= std::min(a.size(), b.size()); r += n_vocab) {
    const float ma = *std::max_element(&a[r], &a[r] + n_vocab), mb = *std::max_element(&b[r], &b[r] + n_vocab);
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      sa += std::exp(static_cast<double>(a[r + i]) - ma);
      sb += std::exp(static_cast<double>(b[r + i]) - mb);
    }
    double kl = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double la = a[r + i] - ma - std::log(sa), lb = b[r + i] - mb - std::log(sb);
      kl += std::exp(la) * (la - lb);
    }
    if (std::isnan(kl)) return kl;  // non-finite logits: no bound holds (std::max would drop a NaN)
    worst = std::max(worst, kl);
  }
  return worst;
}

}  // namespace tandem::testing

// Skips the test with a clear message when the shared material is missing.
#define TANDEM_REQUIRE_SHARED(path)                                                      \
  do {                                                                                   \
    if (!std::filesystem::exists(path)) {                                                \
      GTEST_SKIP() << "shared test material not found at " << (path)                     \
                   << " (set TANDEM_SHARED_DIR or check out ../shared)";                 \
    }                                                                                    \
  } while (0)
