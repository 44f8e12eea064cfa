// Random input on every shared vocabulary: random bytes never crash the tokenizer and give ids
// in range; random valid UTF-8 text comes back unchanged from tokenize-then-detokenize, and
// streamed token by token it is valid UTF-8 at every step.
#include <gtest/gtest.h>

#include <random>

#include "gguf/reader.h"
#include "test_support.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

using testing::SharedDir;
using testing::SharedFiles;

constexpr int kRounds = 150;

std::string RandomBytes(std::mt19937& rng) {
  std::string s(rng() % 96, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Valid UTF-8 drawn from ASCII, whitespace, Latin, Greek, Cyrillic, combining marks, CJK, Hangul,
// emoji and the special-token punctuation "<|>". U+2581 ("▁") is left out: SentencePiece
// vocabularies write spaces as U+2581, so it cannot come back as itself.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x20, 0x7E},     {'\n', '\n'},
      {'\t', '\t'},     {0xA0, 0x24F},    {0x370, 0x3FF},   {0x400, 0x4FF},
      {0x300, 0x36F},   {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF},
      {0x3000, 0x3003}, {'<', '>'},       {'|', '|'},       {0x2000, 0x2027}};
  std::string s;
  const int n = static_cast<int>(rng() % 40);
  for (int i = 0; i < n; ++i) {
    const auto& [lo, hi] = ranges[rng() % ranges.size()];
    const char32_t cp = lo + rng() % (hi - lo + 1);
    AppendUtf8(cp, &s);
  }
  return s;
}

bool HasUserDefined(const Vocab& v) {
  for (TokenId id = 0; static_cast<size_t>(id) < v.size(); ++id) {
    if (v.token(id).type == TokenType::kUserDefined) return true;
  }
  return false;
}

class TokenizerFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = SharedDir() / "tokenizer";
    if (!std::filesystem::exists(dir)) {
      GTEST_SKIP() << "shared test material not found at " << dir
                   << " (set TANDEM_SHARED_DIR or check out ../shared)";
    }
    for (const auto& p : SharedFiles("tokenizer", ".gguf")) {
      Result<gguf::GgufFile> f = gguf::GgufFile::Open(p.string());
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      Result<Tokenizer> t = Tokenizer::FromGguf(*f);
      ASSERT_TRUE(t.ok()) << p << ": " << t.status().ToString();
      names_.push_back(p.filename().string());
      tokenizers_.push_back(std::move(t).value());
    }
    ASSERT_FALSE(tokenizers_.empty());
  }

  std::vector<std::string> names_;
  std::vector<Tokenizer> tokenizers_;
};

TEST_F(TokenizerFuzzTest, RandomBytesNeverCrash) {
  std::mt19937 rng(11);
  for (size_t v = 0; v < tokenizers_.size(); ++v) {
    SCOPED_TRACE(names_[v]);
    const Tokenizer& t = tokenizers_[v];
    for (int round = 0; round < kRounds; ++round) {
      const std::string bytes = RandomBytes(rng);
      for (bool parse : {false, true}) {
        Result<std::vector<TokenId>> ids =
            t.Encode(bytes, {.add_special = true, .parse_special = parse});
        ASSERT_TRUE(ids.ok()) << ids.status().ToString();
        for (TokenId id : *ids) ASSERT_TRUE(t.vocab().Contains(id)) << id;
        (void)t.Detokenize(*ids, parse);
      }
      // Byte-level BPE keeps every byte, even of invalid UTF-8, unless a user-defined token
      // spells a byte's character (deepseek-coder has "ø" for the byte 0xF8): such tokens
      // print their text.
      if (t.vocab().type() == VocabType::kBpe && !HasUserDefined(t.vocab())) {
        Result<std::vector<TokenId>> ids = t.Encode(bytes, {.add_special = false});
        ASSERT_TRUE(ids.ok());
        EXPECT_EQ(t.Detokenize(*ids, true), bytes);
      }
    }
  }
}

TEST_F(TokenizerFuzzTest, ValidTextRoundTrips) {
  std::mt19937 rng(12);
  for (size_t v = 0; v < tokenizers_.size(); ++v) {
    SCOPED_TRACE(names_[v]);
    const Tokenizer& t = tokenizers_[v];
    for (int round = 0; round < kRounds; ++round) {
      const std::string text = RandomText(rng);
      Result<std::vector<TokenId>> ids = t.Encode(text, {.add_special = false});
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      // Rendering special tokens: text that spells a control token may merge into it.
      EXPECT_EQ(t.Detokenize(*ids, true), text);

      // Streamed token by token, every chunk is valid UTF-8, nothing is lost or replaced, and
      // nothing is left over at the end.
      DetokenizeStream stream(t, true);
      std::string streamed, pieces;
      for (TokenId id : *ids) {
        std::string chunk;
        stream.Push(id, &chunk);
        ASSERT_TRUE(IsValidUtf8(chunk));
        streamed += chunk;
        pieces += t.Piece(id, true);
      }
      stream.Finish(&streamed);
      EXPECT_EQ(streamed, pieces);
    }
  }
}

}  // namespace
}  // namespace tandem::tokenizer
