#include "runtime/base/sizes.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(ParseBytes, UnitsAndFractions) {
  EXPECT_EQ(*ParseBytes("24GiB"), 24ull << 30);
  EXPECT_EQ(*ParseBytes("24 gib"), 24ull << 30);
  EXPECT_EQ(*ParseBytes("1.5GB"), 1500000000ull);
  EXPECT_EQ(*ParseBytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseBytes("1000"), 1000ull);
  EXPECT_EQ(*ParseBytes("3KiB"), 3072ull);
}

TEST(ParseBytes, RejectsGarbageWithClearMessage) {
  for (const char* bad : {"", "GiB", "12XB", "1e99GB", "-3GB", "1..2GB"}) {
    auto r = ParseBytes(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("bad size"), std::string::npos);
    }
  }
}

TEST(FormatBytes, ReadableUnits) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(24ull << 30), "24.00 GiB");
}

}  // namespace
}  // namespace tandem
