// F32, F16 and BF16 weights on the device: one lane takes one 16-byte chunk of weights per slice
// and multiplies it with the fp32 activations in fp32; no activation quantisation, so these paths
// are exact up to summation order. C++17, device only.
#pragma once

#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

// x[r] · w for the four weights of one 16-byte chunk at element `first` (fp32 activations).
template <int R>
__device__ __forceinline__ void DotFloat4(const float4& w, int first, const ActSet& a,
                                          unsigned mask, int base, float (&acc)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!RowOn<R>(mask, r)) continue;
    const int p = ActRow(mask, base, r);
    const float4 x = *reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(p) * a.cols + first);
    acc[r] += w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
  }
}

// A slice is one 16-byte chunk, so that the lanes of a group read consecutive chunks and one
// warp-wide load covers 512 contiguous bytes (with 128-byte slices per lane, a warp-wide load
// touched 32 cache lines: the f32 loop streamed at 0.40 of the copy rate on the H200,
// docs/perf/megakernel.md, session 3). Loads go out kUnroll chunks at a time (RowDotWith).
struct CodecF32 {
  static constexpr int kSliceElems = 4;
  static constexpr int kUnroll = 4;
  using Raw = float4;
  __device__ static Raw Load(const uint8_t* row, int slice, int /*n_slices*/) {
    return LoadStreaming(reinterpret_cast<const float4*>(row) + slice);
  }
  template <int R>
  __device__ static void Apply(const Raw& w, int slice, const ActSet& a, unsigned mask, int base,
                               float (&acc)[R]) {
    DotFloat4<R>(w, 4 * slice, a, mask, base, acc);
  }
};

template <bool kBf16>
struct CodecHalf {
  static constexpr int kSliceElems = 8;
  static constexpr int kUnroll = 4;
  using Raw = uint4;
  __device__ static Raw Load(const uint8_t* row, int slice, int /*n_slices*/) {
    return LoadStreaming(reinterpret_cast<const uint4*>(row) + slice);
  }
  template <int R>
  __device__ static void Apply(const Raw& v, int slice, const ActSet& a, unsigned mask, int base,
                               float (&acc)[R]) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    float w[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (kBf16) {
        w[2 * k] = __uint_as_float(words[k] << 16);
        w[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
      } else {
        w[2 * k] = HalfBitsToFloat(words[k]);
        w[2 * k + 1] = HalfBitsToFloat(words[k] >> 16);
      }
    }
    DotFloat4<R>(make_float4(w[0], w[1], w[2], w[3]), 8 * slice, a, mask, base, acc);
    DotFloat4<R>(make_float4(w[4], w[5], w[6], w[7]), 8 * slice + 4, a, mask, base, acc);
  }
};

}  // namespace tandem::megakernel
