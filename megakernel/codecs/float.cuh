// F32, F16 and BF16 weights on the device: one lane takes 32 consecutive weights (16-byte loads)
// and multiplies them with the fp32 activations in fp32; no activation quantisation, so these
// paths are exact up to summation order. C++17, device only.
#pragma once

#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

template <int R>
__device__ __forceinline__ void DotFloat32(const float* w, int first, const ActSet& a,
                                           unsigned mask, int base, float (&acc)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!(mask >> r & 1u)) continue;
    const int p = ActRow(mask, base, r);
    const float4* x = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(p) * a.cols + first);
    float s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 xv = x[i];
      s += w[4 * i] * xv.x + w[4 * i + 1] * xv.y + w[4 * i + 2] * xv.z + w[4 * i + 3] * xv.w;
    }
    acc[r] += s;
  }
}

struct CodecF32 {
  static constexpr int kSliceElems = 32;
  template <int R>
  __device__ static void Dot(const uint8_t* row, int slice, const ActSet& a, unsigned mask,
                             int base, float (&acc)[R]) {
    const float4* src = reinterpret_cast<const float4*>(row) + 8 * slice;
    float w[32];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 v = __ldg(src + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
    DotFloat32<R>(w, 32 * slice, a, mask, base, acc);
  }
};

template <bool kBf16>
struct CodecHalf {
  static constexpr int kSliceElems = 32;
  template <int R>
  __device__ static void Dot(const uint8_t* row, int slice, const ActSet& a, unsigned mask,
                             int base, float (&acc)[R]) {
    const uint4* src = reinterpret_cast<const uint4*>(row) + 4 * slice;
    float w[32];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 v = __ldg(src + i);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (kBf16) {
          w[8 * i + 2 * k] = __uint_as_float(words[k] << 16);
          w[8 * i + 2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
        } else {
          w[8 * i + 2 * k] = HalfBitsToFloat(words[k]);
          w[8 * i + 2 * k + 1] = HalfBitsToFloat(words[k] >> 16);
        }
      }
    }
    DotFloat32<R>(w, 32 * slice, a, mask, base, acc);
  }
};

}  // namespace tandem::megakernel
