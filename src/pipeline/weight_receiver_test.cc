// WeightReceiver: chunks land at their offsets, the digests must agree, bad chunks and a cancel
// end the wait with a reason.
#include "pipeline/weight_receiver.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace tandem::pipeline {
namespace {

std::string TempFile(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("tandem-wr-") + name + "-" +
                                                    std::to_string(::getpid()))).string();
}

net::WeightsChunk MakeChunk(uint64_t offset, std::vector<uint8_t> bytes, uint64_t total) {
  net::WeightsChunk c;
  c.offset = offset;
  c.bytes = std::move(bytes);
  c.total = total;
  return c;
}

net::Digest DigestOf(const std::vector<std::vector<uint8_t>>& parts) {
  modelstore::Hasher h;
  for (const auto& p : parts) h.Update(p.data(), p.size());
  return h.Final();
}

TEST(WeightReceiverTest, ChunksLandAtTheirOffsetsAndTheDigestsAgree) {
  const std::string path = TempFile("ok");
  WeightReceiver r;
  bool due = false;
  uint64_t done = 0;
  EXPECT_FALSE(r.Chunk(MakeChunk(0, {1}, 1), &due, &done));  // nothing asked for yet
  ASSERT_TRUE(r.Open(path, 16).ok());
  const std::vector<uint8_t> a{1, 2, 3}, b{9, 8};
  ASSERT_TRUE(r.Chunk(MakeChunk(10, a, 5), &due, &done));
  ASSERT_TRUE(r.Chunk(MakeChunk(2, b, 5), &due, &done));
  EXPECT_EQ(done, 5u);
  EXPECT_TRUE(due);  // the last byte always reports
  ASSERT_TRUE(r.Done(DigestOf({a, b})));
  Result<net::Digest> d = r.Wait();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, DigestOf({a, b}));
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(file.size(), 16u);
  EXPECT_EQ(file[2], 9);
  EXPECT_EQ(file[3], 8);
  EXPECT_EQ(file[10], 1);
  EXPECT_EQ(file[12], 3);
  EXPECT_EQ(file[0], 0);  // a hole
  std::filesystem::remove(path);
}

TEST(WeightReceiverTest, ABadChunkOrDigestFailsTheTransfer) {
  const std::string path = TempFile("bad");
  bool due = false;
  uint64_t done = 0;
  {
    WeightReceiver r;
    ASSERT_TRUE(r.Open(path, 8).ok());
    ASSERT_TRUE(r.Chunk(MakeChunk(6, {1, 2, 3}, 3), &due, &done));  // past the end
    Result<net::Digest> d = r.Wait();
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("outside"), std::string::npos) << d.status().ToString();
  }
  {
    WeightReceiver r;
    ASSERT_TRUE(r.Open(path, 8).ok());
    ASSERT_TRUE(r.Chunk(MakeChunk(0, {1, 2}, 2), &due, &done));
    ASSERT_TRUE(r.Done(DigestOf({{1, 3}})));  // the sender digested other bytes
    Result<net::Digest> d = r.Wait();
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("digest"), std::string::npos) << d.status().ToString();
  }
  std::filesystem::remove(path);
}

TEST(WeightReceiverTest, CancelEndsTheWaitAndRefusesALaterOpen) {
  const std::string path = TempFile("cancel");
  WeightReceiver r;
  ASSERT_TRUE(r.Open(path, 8).ok());
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r.Cancel();
  });
  Result<net::Digest> d = r.Wait();
  t.join();
  EXPECT_FALSE(d.ok());
  EXPECT_FALSE(r.Open(path, 8).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tandem::pipeline
