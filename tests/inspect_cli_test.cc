// Runs the real `tandem inspect` binary on reference files, truncated copies and byte-flipped
// copies: it must never crash; a broken file gives a non-zero exit and one line on stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli_support.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::SharedDir;
using testing::SharedFiles;
using testing::RunResult;
using testing::RunTandem;

std::vector<uint8_t> ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteAll(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}

size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

TEST(InspectCliTest, ShowsTypeCountsAndLayerBytes) {
  const auto path = SharedDir() / "reference/models/tiny-q4_k_m.gguf";
  TANDEM_REQUIRE_SHARED(path);
  RunResult r = RunTandem({"inspect", path.string()});
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("39 (9 f32, 25 q4_K, 5 q6_K)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layer 0"), std::string::npos);
  EXPECT_NE(r.out.find("layer 3"), std::string::npos);
  EXPECT_NE(r.out.find("non-layer"), std::string::npos);
  EXPECT_NE(r.out.find("... 504 more"), std::string::npos);  // long arrays abbreviated

  RunResult all = RunTandem({"inspect", "--all", path.string()});
  ASSERT_EQ(all.code, 0);
  EXPECT_EQ(all.out.find("... 504 more"), std::string::npos);
  EXPECT_NE(all.out.find("<0xFF>"), std::string::npos);
}

TEST(InspectCliTest, JsonIsValidAndComplete) {
  const auto path = SharedDir() / "reference/models/tiny-q4_k_m.gguf";
  TANDEM_REQUIRE_SHARED(path);
  RunResult r = RunTandem({"inspect", "--json", path.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["summary"]["n_layer"], 4);
  EXPECT_EQ(j["summary"]["n_vocab"], 512);
  EXPECT_EQ(j["tensors"].size(), 39u);
  EXPECT_EQ(j["layers"].size(), 4u);
  uint64_t total = j["non_layer"]["bytes"].get<uint64_t>();
  for (const auto& l : j["layers"]) total += l["bytes"].get<uint64_t>();
  EXPECT_EQ(total, j["summary"]["tensor_bytes"].get<uint64_t>());
  for (const auto& t : j["bytes_by_type"]) {
    if (t["type"] == "q6_K") {
      EXPECT_EQ(t["tensors"], 5);
    }
  }
}

TEST(InspectCliTest, MissingFileAndBadArguments) {
  RunResult r = RunTandem({"inspect", "/nonexistent/model.gguf"});
  ASSERT_TRUE(r.exited);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("tandem: error:"), std::string::npos);
  RunResult h = RunTandem({"inspect", "--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--json"), std::string::npos);
  RunResult none = RunTandem({});
  EXPECT_NE(none.code, 0);
}

TEST(InspectCliTest, TruncationsAndByteFlipsNeverCrash) {
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models");
  std::vector<std::filesystem::path> files = SharedFiles("reference/models", ".gguf");
  for (const auto& p : SharedFiles("tokenizer", ".gguf")) files.push_back(p);
  std::mt19937_64 rng(42);
  const std::string tmp = ::testing::TempDir() + "tandem_cli_damaged.gguf";
  int runs = 0;
  for (const auto& p : files) {
    const std::vector<uint8_t> original = ReadAll(p);
    for (int i = 0; i < 6; ++i) {
      // A random truncation: always an error, one line on stderr.
      std::vector<uint8_t> t(original.begin(), original.begin() + rng() % original.size());
      WriteAll(tmp, t);
      RunResult r = RunTandem({"inspect", tmp});
      ASSERT_TRUE(r.exited) << p << " truncated to " << t.size() << ": signal " << -r.code;
      EXPECT_NE(r.code, 0) << p << " truncated to " << t.size();
      EXPECT_EQ(Lines(r.err), 1u) << r.err;

      // Random byte flips in the first 64 KiB: success, or an error as one line.
      std::vector<uint8_t> b = original;
      const size_t span = std::min<size_t>(b.size(), 65536);
      for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k) {
        b[rng() % span] ^= static_cast<uint8_t>(1 + rng() % 255);
      }
      WriteAll(tmp, b);
      RunResult f = RunTandem({"inspect", "--json", tmp});
      ASSERT_TRUE(f.exited) << p << ": signal " << -f.code;
      if (f.code != 0) {
        EXPECT_EQ(Lines(f.err), 1u) << f.err;
      } else {
        EXPECT_NO_THROW(nlohmann::json::parse(f.out));
      }
      runs += 2;
    }
  }
  EXPECT_GT(runs, 100);
  std::remove(tmp.c_str());
}

}  // namespace
}  // namespace tandem
