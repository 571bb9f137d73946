// Quotients of small non-negative ints by a divisor reused across many divisions, from a float
// reciprocal: a float conversion, one multiply and a truncation instead of the ~20 dependent
// instructions nvcc emits for each 32-bit division by a run-time value. The phases decode flat
// item indices (attention chunks, quantised blocks, expert units, DeltaNet heads) this way on
// their path to their first loads. Host and device code (the host copy is what the tests check).
// C++17.
#pragma once

#include "runtime/quant/host_device.h"

namespace tandem::megakernel {

// Dividends must be below this. Why the reciprocal is exact there: with inv_2d = RN(1/d) / 2, the
// product RN((2a + 1) · inv_2d) is within a factor (1 ± 2^-23) of (2a + 1) / 2d, whose distance
// to the nearest integer is at least 1/2d; the error, below (2a + 1) / 2d · 2^-23, is smaller than
// that distance while 2a + 1 < 2^23. The product is monotone in a, so checking both sides of every
// multiple of every divisor proves it (tests/megakernel/small_div_test.cc). Every dividend in the
// kernels is bounded by the grid's warps, a shared-memory activation set's blocks, a step's rows
// times a model dimension, or the context, which DimsForModel caps at kMaxContext.
inline constexpr int kSmallDividendLimit = 1 << 22;

struct SmallDivisor {
  int d = 1;
  float inv_2d = 0.5f;  // RN(1 / d) / 2: exact halving of a correctly rounded reciprocal
};

// d ≥ 1.
TANDEM_HD SmallDivisor MakeSmallDivisor(int d) {
  SmallDivisor s;
  s.d = d;
#if defined(__CUDA_ARCH__)
  s.inv_2d = 0.5f * __frcp_rn(__int2float_rn(d));
#else
  s.inv_2d = 0.5f * (1.0f / static_cast<float>(d));
#endif
  return s;
}

// a / s.d for 0 ≤ a < kSmallDividendLimit.
TANDEM_HD int Quotient(int a, const SmallDivisor& s) {
#if defined(__CUDA_ARCH__)
  return __float2int_rz(__fmul_rn(__int2float_rn(2 * a + 1), s.inv_2d));
#else
  return static_cast<int>(static_cast<float>(2 * a + 1) * s.inv_2d);
#endif
}

// a / s.d into *q and a % s.d into *r, for 0 ≤ a < kSmallDividendLimit.
TANDEM_HD void DivMod(int a, const SmallDivisor& s, int* q, int* r) {
  *q = Quotient(a, s);
  *r = a - *q * s.d;
}

}  // namespace tandem::megakernel
