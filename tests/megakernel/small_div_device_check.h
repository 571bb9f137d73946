// The device half of SmallDivDeviceTest (small_div_device_test.cc): C++17, so that the .cu file
// stays buildable by the CUDA releases of the sm_60 kernel set.
#pragma once

#include <cuda_runtime.h>

namespace tandem::megakernel {

// Checks SmallDivisor's quotient on the device on both sides of every multiple of every divisor
// below kSmallDividendLimit: *failures gets the number of failing divisors, *first_bad the smallest
// (kSmallDividendLimit when none).
cudaError_t CheckSmallDivisorsOnDevice(unsigned long long* failures, int* first_bad);

}  // namespace tandem::megakernel
