#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace tandem::tokenizer {
namespace {

TEST(Utf8Test, DecodesValidSequences) {
  char32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("A", 0, &cp), 1u);
  EXPECT_EQ(cp, U'A');
  EXPECT_EQ(DecodeUtf8("\xC3\xA9", 0, &cp), 2u);
  EXPECT_EQ(cp, U'\u00E9');
  EXPECT_EQ(DecodeUtf8("\xE2\x96\x81", 0, &cp), 3u);
  EXPECT_EQ(cp, U'\u2581');
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\xA6\x99", 0, &cp), 4u);
  EXPECT_EQ(cp, U'\U0001F999');
}

TEST(Utf8Test, RejectsInvalidSequences) {
  char32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xC0\x80", 0, &cp), 0u);          // overlong
  EXPECT_EQ(DecodeUtf8("\xED\xA0\x80", 0, &cp), 0u);      // surrogate
  EXPECT_EQ(DecodeUtf8("\xF4\x90\x80\x80", 0, &cp), 0u);  // past U+10FFFF
  EXPECT_EQ(DecodeUtf8("\x80", 0, &cp), 0u);              // stray continuation
  EXPECT_EQ(DecodeUtf8("\xE2\x96", 0, &cp), 0u);          // truncated
  EXPECT_EQ(DecodeUtf8("\xE2\x41\x81", 0, &cp), 0u);      // not a continuation
}

TEST(Utf8Test, IncompleteSuffix) {
  EXPECT_EQ(IncompleteUtf8Suffix(""), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xF0\x9F\xA6"), 3u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xF0\x9F\xA6\x99"), 0u);  // complete
  EXPECT_EQ(IncompleteUtf8Suffix("a\xFF"), 0u);              // never completes
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE0\x80"), 0u);          // would be overlong
  EXPECT_EQ(IncompleteUtf8Suffix("\x80\x80\x80"), 0u);
}

TEST(Utf8Test, AppendRoundTrips) {
  for (char32_t cp : {U'\0', U'z', U'\u00FF', U'\u0800', U'\uFFFD', U'\U00010000', U'\U0010FFFF'}) {
    std::string s;
    AppendUtf8(cp, &s);
    char32_t back = 0;
    ASSERT_EQ(DecodeUtf8(s, 0, &back), s.size());
    EXPECT_EQ(back, cp);
    EXPECT_EQ(Utf8LeadLength(static_cast<uint8_t>(s[0])), s.size());
  }
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xF0\x9F\xA6\x99"));
  EXPECT_FALSE(IsValidUtf8("h\xC3"));
}

}  // namespace
}  // namespace tandem::tokenizer
