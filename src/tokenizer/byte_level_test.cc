#include "tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace tandem::tokenizer {
namespace {

TEST(ByteLevelTest, KnownMappings) {
  EXPECT_EQ(ByteToCodePoint('!'), U'!');
  EXPECT_EQ(ByteToCodePoint('~'), U'~');
  EXPECT_EQ(ByteToCodePoint(0x00), U'\u0100');
  EXPECT_EQ(ByteToCodePoint('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(ByteToCodePoint(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(ByteToCodePoint(0x7F), U'\u0121');
  EXPECT_EQ(ByteToCodePoint(0xAD), U'\u0143');
  EXPECT_EQ(ByteToCodePoint(0xE9), U'\u00E9');
}

TEST(ByteLevelTest, IsABijectionOnBytes) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = ByteToCodePoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(CodePointToByte(cp), b);
  }
  EXPECT_EQ(CodePointToByte(U'\u0200'), -1);
  EXPECT_EQ(CodePointToByte(U' '), -1);
}

TEST(ByteLevelTest, EncodeDecodeRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string encoded, decoded;
  AppendByteLevel(all, &encoded);
  AppendFromByteLevel(encoded, &decoded);
  EXPECT_EQ(decoded, all);
  std::string hello;
  AppendByteLevel(" hello", &hello);
  EXPECT_EQ(hello, "\xC4\xA0hello");  // "Ġhello"
}

TEST(ByteLevelTest, DecodeCopiesUnmappedText) {
  std::string out;
  AppendFromByteLevel("<|x|>\xE4\xB8\x80\xFF",
                      &out);  // "<|x|>" maps to itself; U+4E00 and 0xFF do not
  EXPECT_EQ(out, "<|x|>\xE4\xB8\x80\xFF");
}

}  // namespace
}  // namespace tandem::tokenizer
