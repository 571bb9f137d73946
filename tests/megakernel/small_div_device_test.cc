// SmallDivisor on the device (megakernel/small_div.h): the host test's exhaustive check with the
// device's arithmetic, so that a codegen difference from the host copy cannot hide behind it.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "megakernel/runner.h"
#include "tests/megakernel/small_div_device_check.h"

namespace tandem::megakernel {
namespace {

TEST(SmallDivDeviceTest, ExactOnBothSidesOfEveryMultipleBelowTheLimit) {
  if (const std::string why = CudaUnavailableReason(); !why.empty()) {
    GTEST_SKIP() << "GPU test skipped: " << why;
  }
  unsigned long long failures = 0;
  int first_bad = 0;
  ASSERT_EQ(CheckSmallDivisorsOnDevice(&failures, &first_bad), cudaSuccess);
  EXPECT_EQ(failures, 0u) << "first failing divisor " << first_bad;
}

}  // namespace
}  // namespace tandem::megakernel
