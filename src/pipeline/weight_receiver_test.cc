// WeightReceiver: chunks land at their offsets in a file it creates itself (never one that is
// there already, nor through a symlink), bad chunks and a cancel end the wait with a reason.
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

TEST(WeightReceiverTest, ChunksLandAtTheirOffsets) {
  const std::string path = TempFile("ok");
  std::filesystem::remove(path);
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
  ASSERT_TRUE(r.Done());
  Status d = r.Wait();
  ASSERT_TRUE(d.ok()) << d.ToString();
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
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

TEST(WeightReceiverTest, ABadChunkFailsTheTransfer) {
  const std::string path = TempFile("bad");
  std::filesystem::remove(path);
  bool due = false;
  uint64_t done = 0;
  WeightReceiver r;
  ASSERT_TRUE(r.Open(path, 8).ok());
  ASSERT_TRUE(r.Chunk(MakeChunk(6, {1, 2, 3}, 3), &due, &done));  // past the end
  Status d = r.Wait();
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("outside"), std::string::npos) << d.ToString();
  std::filesystem::remove(path);
}

// The file is created, never opened: a file or a symlink planted at the path (say, pointing at a
// file the worker may write) is refused and left as it was.
TEST(WeightReceiverTest, APathThatExistsOrIsASymlinkIsRefused) {
  const std::string target = TempFile("target"), link = TempFile("link");
  std::filesystem::remove(link);
  std::ofstream(target) << "precious";
  std::filesystem::create_symlink(target, link);
  {
    WeightReceiver r;
    EXPECT_FALSE(r.Open(link, 8).ok());
  }
  {
    WeightReceiver r;
    EXPECT_FALSE(r.Open(target, 8).ok());
  }
  std::ifstream in(target);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
  std::filesystem::remove(link);
  std::filesystem::remove(target);
}

TEST(WeightReceiverTest, CancelEndsTheWaitAndRefusesALaterOpen) {
  const std::string path = TempFile("cancel");
  std::filesystem::remove(path);
  WeightReceiver r;
  ASSERT_TRUE(r.Open(path, 8).ok());
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r.Cancel();
  });
  Status d = r.Wait();
  t.join();
  EXPECT_FALSE(d.ok());
  std::filesystem::remove(path);
  EXPECT_FALSE(r.Open(path, 8).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tandem::pipeline
