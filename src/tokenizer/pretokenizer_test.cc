#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace tandem::tokenizer {
namespace {

std::vector<std::string> SplitWith(std::string_view name, std::string_view text) {
  Result<PreTokenizer> p = PreTokenizer::Create(name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  std::vector<Piece> pieces;
  EXPECT_TRUE(p->Split(text, &pieces).ok());
  std::vector<std::string> out;
  for (const Piece& piece : pieces)
    out.emplace_back(text.substr(piece.begin, piece.end - piece.begin));
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizerTest, UnknownNameListsSupported) {
  Result<PreTokenizer> p = PreTokenizer::Create("falcon");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  for (const char* name :
       {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "deepseek-r1-qwen"}) {
    EXPECT_NE(p.status().message().find(name), std::string::npos) << name;
    EXPECT_TRUE(PreTokenizer::Create(name).ok()) << name;
  }
}

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(SplitWith("gpt-2", "Hello world  12345!! it's"),
            (V{"Hello", " world", " ", " 12345", "!!", " it", "'s"}));
  EXPECT_EQ(SplitWith("gpt-2", "a\n\nb  "), (V{"a", "\n", "\n", "b", "  "}));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(SplitWith("llama-bpe", "x 12345 IT'S"), (V{"x", " ", "123", "45", " IT", "'S"}));
  EXPECT_EQ(SplitWith("llama-bpe", "a,\n\nb"), (V{"a", ",\n\n", "b"}));
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(SplitWith("qwen2", "x 123"), (V{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(SplitWith("deepseek-r1-qwen", "x 123"), SplitWith("qwen2", "x 123"));
}

TEST(PreTokenizerTest, DeepSeekRulesApplyInTurn) {
  EXPECT_EQ(SplitWith("deepseek-coder", "ab\ncd 12"), (V{"ab", "\n", "cd", " ", "1", "2"}));
  EXPECT_EQ(SplitWith("deepseek-llm", "Hi, 123\n"), (V{"Hi", ",", " ", "123", "\n"}));
}

TEST(PreTokenizerTest, PiecesCoverAnyBytes) {
  std::mt19937 rng(5);
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder"}) {
    for (int round = 0; round < 50; ++round) {
      std::string text(rng() % 64, '\0');
      for (char& c : text) c = static_cast<char>(rng());
      std::string joined;
      for (const std::string& s : SplitWith(name, text)) {
        EXPECT_FALSE(s.empty());
        joined += s;
      }
      EXPECT_EQ(joined, text) << name;
    }
  }
}

}  // namespace
}  // namespace tandem::tokenizer
