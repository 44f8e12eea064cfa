#include "base/mapped_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace tandem {
namespace {

std::string TempPath(const char* name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

TEST(MappedFileTest, MapsContents) {
  std::string p = TempPath("tandem_mapped_file_test.bin");
  { std::ofstream(p, std::ios::binary) << "hello"; }
  Result<MappedFile> f = MappedFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data()), f->size()), "hello");
  MappedFile moved = std::move(f).value();
  EXPECT_EQ(moved.size(), 5u);
  std::remove(p.c_str());
}

// Released pages leave the process but not the file: reading them again gives the same bytes
// (anonymous memory would read back as zeros), and ranges that cover no whole page are fine.
TEST(MappedFileTest, ReleasedPagesReadBackUnchanged) {
  std::string p = TempPath("tandem_mapped_file_release.bin");
  std::string bytes(5 * 4096 + 123, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i % 23);
  { std::ofstream(p, std::ios::binary) << bytes; }
  Result<MappedFile> f = MappedFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto view = [&] { return std::string(reinterpret_cast<const char*>(f->data()), f->size()); };
  ASSERT_EQ(view(), bytes);
  ReleaseMappedPages(f->data() + 100, 3 * 4096);
  ReleaseMappedPages(f->data() + 10, 20);
  ReleaseMappedPages(f->data(), f->size());
  EXPECT_EQ(view(), bytes);
  std::remove(p.c_str());
}

TEST(MappedFileTest, EmptyFileIsEmptySpan) {
  std::string p = TempPath("tandem_mapped_file_empty.bin");
  { std::ofstream(p, std::ios::binary); }
  Result<MappedFile> f = MappedFile::Open(p);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->size(), 0u);
  std::remove(p.c_str());
}

TEST(MappedFileTest, MissingFileAndDirectoryAreErrors) {
  Result<MappedFile> f = MappedFile::Open("/nonexistent/tandem/file.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kNotFound);
  Result<MappedFile> d = MappedFile::Open("/tmp");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
