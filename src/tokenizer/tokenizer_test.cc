// Tokenizer unit tests on small vocabularies built in memory; the real vocabularies are tested
// against llama.cpp's outputs in tests/tokenizer_vocab_test.cc.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "gguf/writer.h"

namespace tandem::tokenizer {
namespace {

using gguf::Array;
using gguf::GgufFile;
using gguf::GgufWriter;

struct Tok {
  std::string text;
  float score;
  int32_t type;
};

// <unk>, <s>, </s>, the 256 byte tokens, then `extra`.
std::vector<Tok> SpmTokens(const std::vector<Tok>& extra) {
  std::vector<Tok> t = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    t.push_back({buf, 0, 6});
  }
  t.insert(t.end(), extra.begin(), extra.end());
  return t;
}

// Writes a vocabulary to GGUF bytes and reads it back; `edit` may change any key first.
Result<Tokenizer> Build(const std::string& model, const std::vector<Tok>& tokens,
                        const std::function<void(GgufWriter&)>& edit = {}) {
  GgufWriter w;
  w.Set("general.architecture", "llama");
  w.Set("tokenizer.ggml.model", model);
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const Tok& t : tokens) {
    texts.push_back(t.text);
    scores.push_back(t.score);
    types.push_back(t.type);
  }
  w.Set("tokenizer.ggml.tokens", Array::Of(texts));
  w.Set("tokenizer.ggml.scores", Array::Of(scores));
  w.Set("tokenizer.ggml.token_type", Array::Of(types));
  if (edit) edit(w);
  Result<std::vector<uint8_t>> bytes = w.WriteToBuffer();
  if (!bytes.ok()) return bytes.status();
  static std::vector<std::vector<uint8_t>> keep;  // GgufFile::Parse does not copy
  keep.push_back(std::move(bytes).value());
  TANDEM_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Parse(keep.back()));
  return Tokenizer::FromGguf(f);
}

const std::string kSp = "\xE2\x96\x81";  // "▁"

Tokenizer Spm() {
  Result<Tokenizer> t = Build("llama", SpmTokens({{kSp, -1, 1},
                                                  {"h", -2, 1},
                                                  {"e", -2, 1},
                                                  {"l", -2, 1},
                                                  {"o", -2, 1},
                                                  {kSp + "h", -3, 1},
                                                  {"ll", -1.5f, 1},
                                                  {"he", -1, 1},
                                                  {"llo", -0.5f, 1},
                                                  {"hello", -0.1f, 1},
                                                  {kSp + "hello", -0.05f, 1},
                                                  {"<|user|>", 0, 4},
                                                  {"<|ctl|>", 0, 3}}));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TokenId Id(const Tokenizer& t, const std::string& text) {
  return t.vocab().Find(text);
}

std::vector<TokenId> Enc(const Tokenizer& t, std::string_view text, bool special = false,
                         bool parse = false) {
  Result<std::vector<TokenId>> r = t.Encode(text, {.add_special = special, .parse_special = parse});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<TokenId>{};
}

TEST(SpmTest, MergesByScoreWithSpacePrefix) {
  const Tokenizer t = Spm();
  EXPECT_EQ(Enc(t, "hello"), (std::vector<TokenId>{Id(t, kSp + "hello")}));
  EXPECT_EQ(Enc(t, "hello", true), (std::vector<TokenId>{1, Id(t, kSp + "hello")}));
  EXPECT_EQ(Enc(t, "hello hello"),
            (std::vector<TokenId>{Id(t, kSp + "hello"), Id(t, kSp + "hello")}));
  EXPECT_EQ(Enc(t, ""), std::vector<TokenId>{});
  EXPECT_EQ(Enc(t, "", true), std::vector<TokenId>{1});
}

TEST(SpmTest, ByteFallbackForUnknownCharacters) {
  const Tokenizer t = Spm();
  // "é" is not in the vocabulary: its two bytes become <0xC3> <0xA9>.
  EXPECT_EQ(Enc(t, "\xC3\xA9"),
            (std::vector<TokenId>{Id(t, kSp), Id(t, "<0xC3>"), Id(t, "<0xA9>")}));
  EXPECT_EQ(t.Detokenize(Enc(t, "h\xC3\xA9llo")), "h\xC3\xA9llo");
}

TEST(SpmTest, SpecialTokens) {
  const Tokenizer t = Spm();
  const TokenId user = Id(t, "<|user|>"), ctl = Id(t, "<|ctl|>");
  // User-defined tokens are always recognised; control tokens only with parse_special.
  const std::vector<TokenId> plain = Enc(t, "<|user|>hello<|ctl|>");
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain[0], user);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ctl), 0);
  EXPECT_EQ(Enc(t, "<|ctl|>hello", false, true), (std::vector<TokenId>{ctl, Id(t, kSp + "hello")}));
  EXPECT_EQ(t.Piece(ctl, false), "");
  EXPECT_EQ(t.Piece(ctl, true), "<|ctl|>");
  EXPECT_EQ(t.Piece(user, false), "<|user|>");
}

TEST(SpmTest, VocabularyDefaults) {
  const Tokenizer t = Spm();
  EXPECT_EQ(t.vocab().type(), VocabType::kSpm);
  EXPECT_EQ(t.vocab().bos(), 1);
  EXPECT_EQ(t.vocab().eos(), 2);
  EXPECT_EQ(t.vocab().unk(), 0);
  EXPECT_TRUE(t.vocab().add_bos());
  EXPECT_FALSE(t.vocab().add_eos());
  EXPECT_TRUE(t.vocab().add_space_prefix());
}

TEST(SpmTest, MetadataOverridesDefaults) {
  Result<Tokenizer> t = Build("llama", SpmTokens({{kSp, 0, 1}, {"a", 0, 1}}), [](GgufWriter& w) {
    w.Set("tokenizer.ggml.add_bos_token", false);
    w.Set("tokenizer.ggml.add_eos_token", true);
    w.Set("tokenizer.ggml.add_space_prefix", false);
  });
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Enc(*t, "a", true), (std::vector<TokenId>{t->vocab().Find("a"), 2}));
}

TEST(SpmTest, DetokenizeStripsTheAddedSpace) {
  const Tokenizer t = Spm();
  EXPECT_EQ(t.Detokenize(Enc(t, "hello hello")), "hello hello");
  EXPECT_EQ(t.Detokenize(Enc(t, "hello", true)), "hello");
  EXPECT_EQ(t.Detokenize(Enc(t, "hello", true), true), "<s>hello");
  EXPECT_EQ(t.Detokenize(Enc(t, " hello")), " hello");
}

// GPT-2 style: token texts in byte-level code points ("Ġ" is a space).
Result<Tokenizer> Bpe(const std::vector<std::string>& merges, const std::string& pre = "gpt-2") {
  std::vector<Tok> tokens = {{"a", 0, 1},
                             {"b", 0, 1},
                             {"c", 0, 1},
                             {"\xC4\xA0", 0, 1},
                             {"ab", 0, 1},
                             {"bc", 0, 1},
                             {"abc", 0, 1},
                             {"\xC4\xA0"
                              "a",
                              0, 1},
                             {"<|end|>", 0, 3}};
  return Build("gpt2", tokens, [&](GgufWriter& w) {
    w.Set("tokenizer.ggml.pre", pre);
    w.Set("tokenizer.ggml.merges", Array::Of(merges));
    w.Set("tokenizer.ggml.eos_token_id", uint32_t{8});
  });
}

TEST(BpeTest, MergesByRank) {
  Result<Tokenizer> t = Bpe({"a b", "ab c", "Ġ a"});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Enc(*t, "abc"), (std::vector<TokenId>{6}));
  EXPECT_EQ(Enc(*t, "abcab"), (std::vector<TokenId>{6, 4}));
  EXPECT_EQ(Enc(*t, " a"), (std::vector<TokenId>{7}));
  // "b c" ranked first: "abc" becomes a + bc, and no merge joins those.
  Result<Tokenizer> u = Bpe({"b c", "a b", "ab c"});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Enc(*u, "abc"), (std::vector<TokenId>{0, 5}));
  EXPECT_EQ(u->Detokenize(Enc(*u, "abc ab")), "abc ab");
}

TEST(BpeTest, SpecialTokensAndBos) {
  Result<Tokenizer> t = Bpe({"a b"});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->vocab().add_bos());  // gpt-2 adds no BOS unless the file says so
  EXPECT_EQ(Enc(*t, "ab<|end|>", true, true), (std::vector<TokenId>{4, 8}));
  Result<Tokenizer> llama3 = Bpe({"a b"}, "llama-bpe");
  ASSERT_FALSE(llama3.ok());  // llama-bpe adds BOS by default, and this vocabulary has none
  EXPECT_NE(llama3.status().message().find("BOS"), std::string::npos);
}

TEST(BpeTest, UnknownPreTokenizerNamesSupportedOnes) {
  Result<Tokenizer> t = Bpe({"a b"}, "mystery");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("mystery"), std::string::npos);
  EXPECT_NE(t.status().message().find("qwen2"), std::string::npos);
}

TEST(VocabTest, RejectsMalformedMetadata) {
  auto code = [](const Result<Tokenizer>& r) { return r.status().code(); };
  EXPECT_EQ(code(Bpe({"ab"})), Code::kCorruption);  // merge without a space
  EXPECT_EQ(code(Build("llama", SpmTokens({{"x", 0, 7}}))), Code::kCorruption);  // token type 7
  EXPECT_EQ(code(Build("llama", SpmTokens({}),
                       [](GgufWriter& w) {
                         w.Set("tokenizer.ggml.scores", Array::Of(std::vector<float>{1.0f}));
                       })),
            Code::kCorruption);  // scores length
  EXPECT_EQ(
      code(Build("llama", SpmTokens({}),
                 [](GgufWriter& w) { w.Set("tokenizer.ggml.bos_token_id", uint32_t{9999}); })),
      Code::kCorruption);  // id out of range
  EXPECT_EQ(code(Build("llama", SpmTokens({}),
                       [](GgufWriter& w) { w.Set("tokenizer.ggml.add_bos_token", "yes"); })),
            Code::kCorruption);  // wrong type
  EXPECT_EQ(code(Build("bert", SpmTokens({}))), Code::kUnsupported);
  EXPECT_EQ(code(Build("gpt2", {{"a", 0, 1}})), Code::kCorruption);  // no merges
  // -1 (written as u32) means "no token".
  Result<Tokenizer> none = Build("llama", SpmTokens({}), [](GgufWriter& w) {
    w.Set("tokenizer.ggml.padding_token_id", uint32_t{0xFFFFFFFF});
  });
  EXPECT_TRUE(none.ok()) << none.status().ToString();
}

TEST(TokenizerTest, AnyBytesEncodeAndUnknownIdsDecodeToNothing) {
  const Tokenizer t = Spm();
  // (Not a space: stray lead bytes may swallow the bytes of an escaped space, as in llama.cpp.)
  const std::string junk = "\xFF\xFE\x80!\xC3";
  const std::vector<TokenId> ids = Enc(t, junk);
  EXPECT_EQ(t.Detokenize(ids), junk);
  EXPECT_EQ(t.Piece(-5, true), "");
  EXPECT_EQ(t.Piece(1 << 20, true), "");
}

}  // namespace
}  // namespace tandem::tokenizer
