// Helpers shared by the cross-module tests: where ../shared is, and listing its files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
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

}  // namespace tandem::testing

// Skips the test with a clear message when the shared material is missing.
#define TANDEM_REQUIRE_SHARED(path)                                                      \
  do {                                                                                   \
    if (!std::filesystem::exists(path)) {                                                \
      GTEST_SKIP() << "shared test material not found at " << (path)                     \
                   << " (set TANDEM_SHARED_DIR or check out ../shared)";                 \
    }                                                                                    \
  } while (0)
