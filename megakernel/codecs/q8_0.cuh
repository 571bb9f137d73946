// Q8_0 on the device: one lane takes one 34-byte block (32 weights) per slice and applies it to
// every active row with dp4a. C++17, device only.
#pragma once

#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

struct CodecQ8_0 {
  static constexpr int kSliceElems = 32;
  template <int R>
  __device__ static void Dot(const uint8_t* row, int slice, const ActSet& a, unsigned mask,
                             int base, float (&acc)[R]) {
    const uint8_t* blk = row + 34 * slice;
    uint32_t v[9];
    LoadWords<9>(blk, v);  // bytes 0..35: d in bytes 0-1, qs in 2..33
    const float d = HalfBitsToFloat(v[0]);
    uint32_t q[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = __funnelshift_r(v[j], v[j + 1], 16);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!(mask >> r & 1u)) continue;
      const int p = ActRow(mask, base, r);
      const int8_t* xq = a.q + static_cast<int64_t>(p) * a.cols + 32 * slice;
      const int sum = Dot16(q, xq) + Dot16(q + 4, xq + 16);
      acc[r] += a.d[p * (a.cols / 32) + slice] * d * static_cast<float>(sum);
    }
  }
};

}  // namespace tandem::megakernel
