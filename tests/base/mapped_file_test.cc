#include "runtime/base/mapped_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace tandem {
namespace {

TEST(MappedFile, MapsBytesAndReportsMissingFiles) {
  auto path = std::filesystem::temp_directory_path() / "tandem_mapped_file_test.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "hello";
  }
  auto file = MappedFile::Open(path.string());
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->bytes().size(), 5u);
  EXPECT_EQ((*file)->bytes()[4], 'o');
  std::filesystem::remove(path);

  auto missing = MappedFile::Open("/nonexistent/tandem.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/tandem.gguf"), std::string::npos);

  auto dir = MappedFile::Open("/tmp");
  EXPECT_FALSE(dir.ok());
}

}  // namespace
}  // namespace tandem
