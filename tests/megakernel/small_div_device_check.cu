// SmallDivisor's exhaustive check with the device's own reciprocal and multiply (__frcp_rn,
// __fmul_rn). C++17 device code.
#include "tests/megakernel/small_div_device_check.h"

#include "megakernel/small_div.h"

namespace tandem::megakernel {
namespace {

// Thread t checks divisors t + 1, t + 1 + stride, ...; failing divisors are counted and the
// smallest kept.
__global__ void CheckQuotients(unsigned long long* failures, int* first_bad) {
  constexpr int kLast = kSmallDividendLimit - 1;
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int d = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x) + 1; d <= kLast;
       d += stride) {
    const SmallDivisor s = MakeSmallDivisor(d);
    bool bad = Quotient(kLast, s) != kLast / d;
    for (int m = d; m <= kLast && !bad; m += d) {
      // The quotient is monotone in the dividend, so these two bound every other one.
      const int q = m / d;
      bad = Quotient(m - 1, s) != q - 1 || Quotient(m, s) != q;
    }
    if (bad) {
      atomicAdd(failures, 1ull);
      atomicMin(first_bad, d);
    }
  }
}

}  // namespace

cudaError_t CheckSmallDivisorsOnDevice(unsigned long long* failures, int* first_bad) {
  unsigned long long* d_failures = nullptr;
  int* d_first_bad = nullptr;
  cudaError_t e = cudaMalloc(&d_failures, sizeof(*d_failures));
  if (e == cudaSuccess) e = cudaMalloc(&d_first_bad, sizeof(*d_first_bad));
  const int none = kSmallDividendLimit;
  if (e == cudaSuccess) e = cudaMemset(d_failures, 0, sizeof(*d_failures));
  if (e == cudaSuccess) {
    e = cudaMemcpy(d_first_bad, &none, sizeof(none), cudaMemcpyHostToDevice);
  }
  if (e == cudaSuccess) {
    CheckQuotients<<<1024, 256>>>(d_failures, d_first_bad);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) {
    e = cudaMemcpy(failures, d_failures, sizeof(*failures), cudaMemcpyDeviceToHost);
  }
  if (e == cudaSuccess) {
    e = cudaMemcpy(first_bad, d_first_bad, sizeof(*first_bad), cudaMemcpyDeviceToHost);
  }
  cudaFree(d_failures);
  cudaFree(d_first_bad);
  return e;
}

}  // namespace tandem::megakernel
