#include "base/byte_reader.h"

#include <gtest/gtest.h>

#include <vector>

namespace tandem {
namespace {

TEST(ByteReaderTest, ReadsLittleEndianValues) {
  std::vector<uint8_t> b = {0x01, 0x02, 0x03, 0x04, 0xff};
  ByteReader r(b);
  EXPECT_EQ(r.Read<uint32_t>("u32").value(), 0x04030201u);
  EXPECT_EQ(r.Read<int8_t>("i8").value(), -1);
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(ByteReaderTest, TruncatedReadNamesFieldAndOffsetAndKeepsCursor) {
  std::vector<uint8_t> b = {1, 2, 3};
  ByteReader r(b, 100);
  ASSERT_TRUE(r.Read<uint8_t>("first").ok());
  Result<uint32_t> v = r.Read<uint32_t>("tensor count");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kCorruption);
  EXPECT_NE(v.status().message().find("at byte offset 101"), std::string::npos);
  EXPECT_NE(v.status().message().find("tensor count"), std::string::npos);
  EXPECT_EQ(r.position(), 1u);
}

TEST(ByteReaderTest, StringLengthIsCheckedBeforeUse) {
  std::vector<uint8_t> b(8, 0xff);  // length 2^64-1, no payload
  ByteReader r(b);
  EXPECT_FALSE(r.ReadString64("key", UINT64_MAX).ok());
  EXPECT_EQ(r.position(), 0u);
  std::vector<uint8_t> ok = {3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'};
  ByteReader r2(ok);
  EXPECT_FALSE(r2.ReadString64("key", 2).ok());  // over the caller's limit
  EXPECT_EQ(r2.ReadString64("key", 3).value(), "abc");
}

TEST(ByteReaderTest, SkipAndBytesAreBounded) {
  std::vector<uint8_t> b(10);
  ByteReader r(b);
  EXPECT_FALSE(r.Skip(11, "pad").ok());
  EXPECT_TRUE(r.Skip(4, "pad").ok());
  EXPECT_EQ(r.ReadBytes(6, "data").value().size(), 6u);
  EXPECT_FALSE(r.ReadBytes(1, "data").ok());
}

}  // namespace
}  // namespace tandem
