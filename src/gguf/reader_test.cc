// Malformed-input tests for the GGUF reader: each builds a valid file with the writer, breaks
// one field, and checks the error names the problem (and, where it applies, the byte offset).
#include "gguf/reader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "gguf/writer.h"

namespace tandem::gguf {
namespace {

std::vector<uint8_t> SmallFile() {
  GgufWriter w;
  w.Set("general.architecture", "llama");
  w.Set("llama.block_count", uint32_t{1});
  EXPECT_TRUE(w.AddTensor("tok", TensorType::kF32, {4, 2}, std::vector<uint8_t>(32, 1)).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.w", TensorType::kF16, {8}, std::vector<uint8_t>(16, 2)).ok());
  return w.WriteToBuffer().value();
}

// Byte offset of the first occurrence of `needle` in `b`.
size_t Find(const std::vector<uint8_t>& b, std::string_view needle) {
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  EXPECT_NE(it, b.end()) << needle;
  return static_cast<size_t>(it - b.begin());
}

template <typename T>
void Poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

std::string ErrorOf(const std::vector<uint8_t>& b) {
  Result<GgufFile> f = GgufFile::Parse(b);
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : f.status().message();
}

TEST(GgufReaderTest, ParsesValidFile) {
  std::vector<uint8_t> b = SmallFile();
  Result<GgufFile> f = GgufFile::Parse(b);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->GetUint32("llama.block_count").value(), 1u);
  EXPECT_EQ(f->tensors()[0].name, "tok");
  EXPECT_EQ(f->tensors()[1].file_offset, f->data_offset() + 32);
}

TEST(GgufReaderTest, BadMagic) {
  std::vector<uint8_t> b = SmallFile();
  b[0] = 'X';
  EXPECT_NE(ErrorOf(b).find("not a GGUF file"), std::string::npos);
}

TEST(GgufReaderTest, UnsupportedVersions) {
  std::vector<uint8_t> b = SmallFile();
  Poke<uint32_t>(b, 4, 1);
  EXPECT_NE(ErrorOf(b).find("version 1 is not supported"), std::string::npos);
  Poke<uint32_t>(b, 4, 0x03000000);
  EXPECT_NE(ErrorOf(b).find("big-endian"), std::string::npos);
  Poke<uint32_t>(b, 4, 2);  // v2 has the same layout as v3
  EXPECT_TRUE(GgufFile::Parse(b).ok());
}

TEST(GgufReaderTest, HugeCountsAreRejectedBeforeAllocating) {
  std::vector<uint8_t> b = SmallFile();
  Poke<uint64_t>(b, 8, uint64_t{1} << 60);
  EXPECT_NE(ErrorOf(b).find("at byte offset 8: tensor count"), std::string::npos);
  b = SmallFile();
  Poke<uint64_t>(b, 16, ~uint64_t{0});
  EXPECT_NE(ErrorOf(b).find("at byte offset 16: metadata count"), std::string::npos);
}

TEST(GgufReaderTest, HugeStringLength) {
  std::vector<uint8_t> b = SmallFile();
  const size_t at = Find(b, "llama") - 8;  // length prefix of the architecture value
  Poke<uint64_t>(b, at, uint64_t{1} << 62);
  std::string e = ErrorOf(b);
  EXPECT_NE(e.find("at byte offset " + std::to_string(at)), std::string::npos) << e;
  EXPECT_NE(e.find("string value"), std::string::npos) << e;
}

TEST(GgufReaderTest, UnknownValueType) {
  std::vector<uint8_t> b = SmallFile();
  const size_t at = Find(b, "general.architecture") + 20;  // the value type field
  Poke<uint32_t>(b, at, 13);
  EXPECT_NE(ErrorOf(b).find("unknown metadata value type 13"), std::string::npos);
}

TEST(GgufReaderTest, DuplicateKeyAndTensor) {
  GgufWriter w;
  w.Set("key1", uint32_t{1});
  w.Set("key2", uint32_t{2});
  ASSERT_TRUE(w.AddTensor("aaa", TensorType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  ASSERT_TRUE(w.AddTensor("bbb", TensorType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  std::vector<uint8_t> b = w.WriteToBuffer().value();
  std::vector<uint8_t> k = b;
  const size_t key_at = Find(k, "key2");
  k[key_at + 3] = '1';
  std::string e = ErrorOf(k);
  EXPECT_NE(e.find("duplicate metadata key 'key1'"), std::string::npos) << e;
  EXPECT_NE(e.find("at byte offset " + std::to_string(key_at - 8)), std::string::npos) << e;
  std::vector<uint8_t> t = b;
  std::memcpy(t.data() + Find(t, "bbb"), "aaa", 3);
  EXPECT_NE(ErrorOf(t).find("duplicate tensor name 'aaa'"), std::string::npos);
}

TEST(GgufReaderTest, BadDimensionsAndTypes) {
  std::vector<uint8_t> b = SmallFile();
  const size_t dims_at = Find(b, "tok") + 3;
  Poke<uint32_t>(b, dims_at, 5);
  EXPECT_NE(ErrorOf(b).find("has 5 dimensions"), std::string::npos);
  b = SmallFile();
  Poke<uint32_t>(b, dims_at, 0);
  EXPECT_NE(ErrorOf(b).find("has 0 dimensions"), std::string::npos);
  b = SmallFile();
  Poke<uint64_t>(b, dims_at + 4, uint64_t{1} << 40);
  Poke<uint64_t>(b, dims_at + 12, uint64_t{1} << 40);
  EXPECT_NE(ErrorOf(b).find("overflows"), std::string::npos);
  b = SmallFile();
  Poke<uint32_t>(b, dims_at + 20, 4);  // type id 4 was retired by ggml
  Result<GgufFile> f = GgufFile::Parse(b);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kUnsupported);
  EXPECT_NE(f.status().message().find("unknown tensor type id 4"), std::string::npos);
  b = SmallFile();
  Poke<uint32_t>(b, dims_at + 20, static_cast<uint32_t>(TensorType::kQ8_0));  // 4 % 32 != 0
  EXPECT_NE(ErrorOf(b).find("not a multiple of the q8_0 block size"), std::string::npos);
}

TEST(GgufReaderTest, MisalignedAndOutOfFileOffsets) {
  std::vector<uint8_t> b = SmallFile();
  const size_t off_at = Find(b, "blk.0.w") + 7 + 4 + 8 + 4;
  Poke<uint64_t>(b, off_at, 33);
  EXPECT_NE(ErrorOf(b).find("not a multiple of the alignment"), std::string::npos);
  Poke<uint64_t>(b, off_at, 1024);
  EXPECT_NE(ErrorOf(b).find("runs past the end of the file"), std::string::npos);
  Poke<uint64_t>(b, off_at, 0);
  EXPECT_NE(ErrorOf(b).find("overlap"), std::string::npos);
}

TEST(GgufReaderTest, BadAlignmentValue) {
  GgufWriter w;
  w.Set("general.alignment", uint32_t{48});
  std::vector<uint8_t> b = w.WriteToBuffer().value();
  EXPECT_NE(ErrorOf(b).find("power of two"), std::string::npos);
  GgufWriter w2;
  w2.Set("general.alignment", "32");
  EXPECT_NE(ErrorOf(w2.WriteToBuffer().value()).find("power of two"), std::string::npos);
}

TEST(GgufReaderTest, BadBoolAndNestedArray) {
  GgufWriter w;
  w.Set("b", true);
  std::vector<uint8_t> b = w.WriteToBuffer().value();
  b[24 + 8 + 1 + 4] = 2;
  EXPECT_NE(ErrorOf(b).find("not a bool"), std::string::npos);

  GgufWriter w2;
  w2.Set("a", Array::Of(std::vector<uint32_t>{1}));
  std::vector<uint8_t> n = w2.WriteToBuffer().value();
  Poke<uint32_t>(n, 24 + 8 + 1 + 4, static_cast<uint32_t>(ValueType::kArray));
  EXPECT_NE(ErrorOf(n).find("nested arrays"), std::string::npos);
}

TEST(GgufReaderTest, TypedLookupsExplainMismatches) {
  std::vector<uint8_t> b = SmallFile();
  Result<GgufFile> f = GgufFile::Parse(b);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->GetString("nope").status().code(), Code::kNotFound);
  Result<int64_t> i = f->GetInt("general.architecture");
  ASSERT_FALSE(i.ok());
  EXPECT_NE(i.status().message().find("has type string"), std::string::npos);
  EXPECT_EQ(f->GetFloat("llama.block_count").value(), 1.0);
  EXPECT_FALSE(f->GetBool("llama.block_count").ok());
  EXPECT_FALSE(f->GetArray("llama.block_count").ok());
  EXPECT_EQ(f->FindTensor("missing"), nullptr);
}

TEST(GgufReaderTest, EmptyAndTinyInputs) {
  EXPECT_FALSE(GgufFile::Parse({}).ok());
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  EXPECT_NE(ErrorOf(b).find("truncated"), std::string::npos);
}

}  // namespace
}  // namespace tandem::gguf
