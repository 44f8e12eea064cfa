#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

TEST(Utf8StreamDecoderTest, HoldsBackSplitCharacters) {
  Utf8StreamDecoder d;
  std::string out;
  d.Push("a\xC3", &out);
  EXPECT_EQ(out, "a");
  EXPECT_EQ(d.pending(), 1u);
  d.Push("\xA9z", &out);
  EXPECT_EQ(out, "a\xC3\xA9z");
  // A four-byte character, one byte at a time.
  for (char c : std::string("\xF0\x9F\xA6\x99")) d.Push(std::string_view(&c, 1), &out);
  EXPECT_EQ(out, "a\xC3\xA9z\xF0\x9F\xA6\x99");
  EXPECT_EQ(d.pending(), 0u);
}

TEST(Utf8StreamDecoderTest, ReplacesBytesThatCanNeverBeText) {
  Utf8StreamDecoder d;
  std::string out;
  d.Push(
      "\xFF"
      "a\xC3"
      "b",
      &out);
  EXPECT_EQ(out,
            "\xEF\xBF\xBD"
            "a\xEF\xBF\xBD"
            "b");
  d.Push("\xE2\x96", &out);
  d.Finish(&out);  // an unfinished character at the end
  EXPECT_EQ(out,
            "\xEF\xBF\xBD"
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(d.pending(), 0u);
}

TEST(Utf8StreamDecoderTest, EveryPrefixIsValidUtf8) {
  const std::string text = "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\xA6\x99!";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8StreamDecoder d;
    std::string out;
    d.Push(std::string_view(text).substr(0, cut), &out);
    EXPECT_TRUE(IsValidUtf8(out)) << cut;
    d.Push(std::string_view(text).substr(cut), &out);
    d.Finish(&out);
    EXPECT_EQ(out, text) << cut;
  }
}

}  // namespace
}  // namespace tandem::tokenizer
