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
