// SmallDivisor's quotients (megakernel/small_div.h), host copy: exact for every dividend below the
// limit, by the monotonicity argument in the header, checked on both sides of every multiple of
// every divisor.
#include "megakernel/small_div.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tandem::megakernel {
namespace {

TEST(SmallDivTest, ExactOnBothSidesOfEveryMultipleBelowTheLimit) {
  int64_t failures = 0;
  constexpr int kLast = kSmallDividendLimit - 1;
  for (int d = 1; d <= kLast; ++d) {
    const SmallDivisor s = MakeSmallDivisor(d);
    for (int64_t m = d; m <= kLast; m += d) {
      // The computed quotient is monotone in the dividend, so these two bound every other one.
      const int q = static_cast<int>(m / d);
      if (Quotient(static_cast<int>(m - 1), s) != q - 1 || Quotient(static_cast<int>(m), s) != q) {
        if (++failures <= 5) ADD_FAILURE() << "divisor " << d << ", multiple " << m;
      }
    }
    // The last dividend, past the last multiple.
    if (Quotient(kLast, s) != kLast / d && ++failures <= 5) ADD_FAILURE() << "divisor " << d;
  }
  EXPECT_EQ(failures, 0);
}

TEST(SmallDivTest, DivModOfSmallDividends) {
  for (int d : {1, 2, 3, 5, 24, 33, 64, 96, 1025}) {
    const SmallDivisor s = MakeSmallDivisor(d);
    for (int a = 0; a < 5000; ++a) {
      int q = 0, r = 0;
      DivMod(a, s, &q, &r);
      ASSERT_EQ(q, a / d) << a << " / " << d;
      ASSERT_EQ(r, a % d) << a << " % " << d;
    }
  }
}

}  // namespace
}  // namespace tandem::megakernel
