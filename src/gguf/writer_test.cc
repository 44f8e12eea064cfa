#include "gguf/writer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "gguf/reader.h"

namespace tandem::gguf {
namespace {

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

GgufWriter EveryValueType() {
  GgufWriter w;
  w.Set("general.architecture", "llama");
  w.Set("t.u8", uint8_t{200});
  w.Set("t.i8", int8_t{-100});
  w.Set("t.u16", uint16_t{60000});
  w.Set("t.i16", int16_t{-30000});
  w.Set("t.u32", uint32_t{4000000000u});
  w.Set("t.i32", int32_t{-2000000000});
  w.Set("t.f32", 1.5f);
  w.Set("t.bool", true);
  w.Set("t.str", std::string("h\xc3\xa9llo\n"));
  w.Set("t.u64", uint64_t{18000000000000000000ull});
  w.Set("t.i64", int64_t{-9000000000000000000ll});
  w.Set("t.f64", 2.25);
  w.Set("t.arr.u8", Array::Of(std::vector<uint8_t>{1, 2, 3}));
  w.Set("t.arr.i8", Array::Of(std::vector<int8_t>{-1, 2}));
  w.Set("t.arr.u16", Array::Of(std::vector<uint16_t>{1, 65535}));
  w.Set("t.arr.i16", Array::Of(std::vector<int16_t>{-5}));
  w.Set("t.arr.u32", Array::Of(std::vector<uint32_t>{7, 8}));
  w.Set("t.arr.i32", Array::Of(std::vector<int32_t>{-7, 8, 9}));
  w.Set("t.arr.f32", Array::Of(std::vector<float>{0.5f, -0.25f}));
  w.Set("t.arr.bool", Array::Of(std::vector<bool>{true, false, true}));
  w.Set("t.arr.str", Array::Of(std::vector<std::string>{"a", "", "<|im_start|>"}));
  w.Set("t.arr.u64", Array::Of(std::vector<uint64_t>{1ull << 40}));
  w.Set("t.arr.i64", Array::Of(std::vector<int64_t>{-(1ll << 40)}));
  w.Set("t.arr.f64", Array::Of(std::vector<double>{3.0}));
  w.Set("t.arr.empty", Array::Of(std::vector<float>{}));
  EXPECT_TRUE(w.AddTensor("a", TensorType::kF32, {3, 2}, Iota(24)).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.b", TensorType::kQ4_K, {256, 2}, Iota(288)).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.c", TensorType::kQ8_0, {64}, [](std::span<uint8_t> out) {
                 for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(255 - i);
                 return Status::Ok();
               }).ok());
  return w;
}

TEST(GgufWriterTest, RoundTripPreservesEveryValueAndTensor) {
  GgufWriter w = EveryValueType();
  Result<std::vector<uint8_t>> bytes = w.WriteToBuffer();
  ASSERT_TRUE(bytes.ok());
  Result<GgufFile> f = GgufFile::Parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);

  // Every metadata entry, in order, with its exact type and value.
  GgufWriter again = EveryValueType();
  ASSERT_EQ(f->metadata().size(), 26u);
  EXPECT_EQ(f->metadata()[0].first, "general.architecture");
  EXPECT_EQ(*f->Find("t.str")->get_if<std::string>(), "h\xc3\xa9llo\n");
  EXPECT_EQ(f->Find("t.u64")->type(), ValueType::kUint64);
  EXPECT_EQ(*f->Find("t.u64")->get_if<uint64_t>(), 18000000000000000000ull);
  EXPECT_EQ(*f->Find("t.i8")->get_if<int8_t>(), -100);
  EXPECT_EQ(*f->Find("t.f64")->get_if<double>(), 2.25);
  EXPECT_EQ(f->GetArray("t.arr.str").value()->strings(),
            (std::vector<std::string>{"a", "", "<|im_start|>"}));
  EXPECT_EQ(f->GetArray("t.arr.bool").value()->Copy<bool>().value(),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f->GetArray("t.arr.i32").value()->Copy<int32_t>().value(),
            (std::vector<int32_t>{-7, 8, 9}));
  EXPECT_FALSE(f->GetArray("t.arr.i32").value()->Copy<uint32_t>().has_value());
  EXPECT_EQ(f->GetArray("t.arr.empty").value()->size(), 0u);

  ASSERT_EQ(f->tensors().size(), 3u);
  const TensorInfo* a = f->FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, TensorType::kF32);
  EXPECT_EQ(a->n_dims, 2u);
  EXPECT_EQ(a->ne[0], 3u);
  EXPECT_EQ(a->ne[1], 2u);
  EXPECT_EQ(a->n_bytes, 24u);
  EXPECT_EQ(std::vector<uint8_t>(a->bytes().begin(), a->bytes().end()), Iota(24));
  const TensorInfo* b = f->FindTensor("blk.0.b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_bytes, 288u);
  EXPECT_EQ(b->file_offset % 32, 0u);
  EXPECT_EQ(std::vector<uint8_t>(b->bytes().begin(), b->bytes().end()), Iota(288));
  const TensorInfo* c = f->FindTensor("blk.0.c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_bytes, 68u);
  EXPECT_EQ(c->bytes()[0], 255);

  // The writer is deterministic.
  Result<std::vector<uint8_t>> again_bytes = again.WriteToBuffer();
  ASSERT_TRUE(again_bytes.ok());
  EXPECT_EQ(*again_bytes, *bytes);
}

TEST(GgufWriterTest, RewritingAParsedFileGivesIdenticalBytes) {
  Result<std::vector<uint8_t>> bytes = EveryValueType().WriteToBuffer();
  ASSERT_TRUE(bytes.ok());
  Result<GgufFile> f = GgufFile::Parse(*bytes);
  ASSERT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.Set(k, v);
  for (const TensorInfo& t : f->tensors()) {
    std::vector<uint64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    ASSERT_TRUE(
        w.AddTensor(t.name, t.type, shape, std::vector<uint8_t>(t.bytes().begin(), t.bytes().end()))
            .ok());
  }
  Result<std::vector<uint8_t>> again = w.WriteToBuffer();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *bytes);
  Result<GgufFile> g = GgufFile::Parse(*again);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->metadata().size(), f->metadata().size());
  for (size_t i = 0; i < g->metadata().size(); ++i) {
    EXPECT_EQ(g->metadata()[i], f->metadata()[i]) << g->metadata()[i].first;
  }
}

TEST(GgufWriterTest, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.Set("general.alignment", uint32_t{64});
  ASSERT_TRUE(w.AddTensor("x", TensorType::kF32, {5}, Iota(20)).ok());
  ASSERT_TRUE(w.AddTensor("y", TensorType::kF32, {5}, Iota(20)).ok());
  Result<std::vector<uint8_t>> bytes = w.WriteToBuffer();
  ASSERT_TRUE(bytes.ok());
  Result<GgufFile> f = GgufFile::Parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->FindTensor("y")->offset, 64u);
}

TEST(GgufWriterTest, RejectsBadTensors) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("q", TensorType::kQ4_K, {128}, std::vector<uint8_t>(72)).ok());
  EXPECT_FALSE(w.AddTensor("f", TensorType::kF32, {4}, std::vector<uint8_t>(15)).ok());
  EXPECT_FALSE(w.AddTensor("", TensorType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("d", TensorType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)).ok());
  ASSERT_TRUE(w.AddTensor("f", TensorType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("f", TensorType::kF32, {1}, std::vector<uint8_t>(4)).ok());
}

TEST(GgufWriterTest, FillErrorsAndUnwritablePathsAreReported) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("x", TensorType::kF32, {4}, [](std::span<uint8_t>) {
                 return Status::Internal("boom");
               }).ok());
  Result<std::vector<uint8_t>> r = w.WriteToBuffer();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'x'"), std::string::npos);
  EXPECT_FALSE(w.Write("/nonexistent-dir/x.gguf").ok());
}

TEST(GgufWriterTest, WriteToFileThenOpen) {
  std::string p = (std::filesystem::temp_directory_path() / "tandem_writer_test.gguf").string();
  GgufWriter w = EveryValueType();
  size_t calls = 0;
  ASSERT_TRUE(w.Write(p, [&](size_t, size_t) { ++calls; }).ok());
  EXPECT_EQ(calls, 3u);
  Result<GgufFile> f = GgufFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->GetString("general.architecture").value(), "llama");
  std::remove(p.c_str());
}

}  // namespace
}  // namespace tandem::gguf
