// Golden tokenizer tests: every case in ../shared/tokenizer reproduced exactly, and the prompt
// tokens of the reference logits in ../shared/reference for the models that are there.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/reader.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace tandem::tokenizer {
namespace {

using testing::SharedDir;
using testing::SharedFiles;

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// X.gguf.inp: each case is followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> ReadCases(const std::filesystem::path& p) {
  const std::string all = Slurp(p);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < all.size()) {
    const size_t end = all.find(sep, pos);
    if (end == std::string::npos) break;
    out.push_back(all.substr(pos, end - pos));
    pos = end + sep.size();
  }
  return out;
}

// X.gguf.out: one line of space-separated ids per case.
std::vector<std::vector<TokenId>> ReadExpected(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::vector<TokenId>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<TokenId> ids;
    TokenId id;
    while (ls >> id) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

Result<Tokenizer> Load(const std::filesystem::path& p) {
  Result<gguf::GgufFile> f = gguf::GgufFile::Open(p.string());
  if (!f.ok()) return f.status();
  return Tokenizer::FromGguf(*f);
}

std::string Ids(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s.append(" ").append(std::to_string(id));
  return s;
}

TEST(TokenizerVocabTest, EverySharedCaseMatches) {
  const auto dir = SharedDir() / "tokenizer";
  TANDEM_REQUIRE_SHARED(dir);
  const auto vocabs = SharedFiles("tokenizer", ".gguf");
  ASSERT_FALSE(vocabs.empty()) << "no vocabularies in " << dir;
  size_t checked = 0;
  for (const auto& vocab : vocabs) {
    SCOPED_TRACE(vocab.filename().string());
    const std::vector<std::string> cases = ReadCases(vocab.string() + ".inp");
    const std::vector<std::vector<TokenId>> expected = ReadExpected(vocab.string() + ".out");
    ASSERT_FALSE(cases.empty());
    ASSERT_EQ(cases.size(), expected.size());
    Result<Tokenizer> loaded = Load(vocab);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const Tokenizer& t = *loaded;
    for (size_t i = 0; i < cases.size(); ++i) {
      Result<std::vector<TokenId>> got =
          t.Encode(cases[i], {.add_special = false, .parse_special = false});
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(Ids(*got), Ids(expected[i])) << "case " << i << ": \"" << cases[i] << "\"";
      ++checked;
    }
  }
  EXPECT_EQ(checked, vocabs.size() * 46);
}

TEST(TokenizerVocabTest, ReferencePromptTokens) {
  const auto dir = SharedDir() / "reference" / "logits";
  TANDEM_REQUIRE_SHARED(dir);
  size_t checked = 0;
  for (const auto& path : SharedFiles("reference/logits", ".json")) {
    const nlohmann::json j = nlohmann::json::parse(Slurp(path));
    const auto model = SharedDir() / "reference" / "models" / j.at("model").get<std::string>();
    if (!std::filesystem::exists(model)) continue;  // e.g. the qwen3 models are not shipped
    SCOPED_TRACE(path.filename().string());
    Result<Tokenizer> loaded = Load(model);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const Tokenizer& t = *loaded;
    Result<std::vector<TokenId>> got =
        t.Encode(j.at("prompt").get<std::string>(),
                 {.add_special = j.at("add_bos").get<bool>(), .parse_special = false});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(Ids(*got), Ids(j.at("prompt_tokens").get<std::vector<TokenId>>()));
    ++checked;
  }
  EXPECT_GT(checked, 0u) << "no reference model found beside its logits";
}

}  // namespace
}  // namespace tandem::tokenizer
