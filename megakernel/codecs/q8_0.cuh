// Q8_0 on the device: one lane takes one 34-byte block (32 weights) per slice and applies it to
// every active row with dp4a. C++17, device only.
#pragma once

#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

// Loads go out kUnroll slices at a time (RowDotWith): a 2,048-column row is two slices a lane, and
// one slice at a time made a unit two dependent round trips to memory. The quants are read
// straight from byte 2 of the block (a funnel shift a word), the scale on its own.
struct CodecQ8_0 {
  static constexpr int kSliceElems = 32;
  static constexpr int kUnroll = 2;
  struct Raw {
    uint32_t q[8];
    uint32_t d;  // fp16 bits
  };
  __device__ static Raw Load(const uint8_t* row, int slice) {
    const uint8_t* blk = row + 34 * slice;
    Raw raw;
    LoadWords<8>(blk + 2, raw.q);
    // Blocks are 2-byte aligned, so the scale is one 16-bit load.
    raw.d = LoadStreaming(reinterpret_cast<const unsigned short*>(blk));
    return raw;
  }
  template <int R>
  __device__ static void Apply(const Raw& raw, int slice, const ActSet& a, unsigned mask, int base,
                               float (&acc)[R]) {
    const float d = HalfBitsToFloat(raw.d);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!RowOn<R>(mask, r)) continue;
      const int p = ActRow(mask, base, r);
      const int8_t* xq = a.q + static_cast<int64_t>(p) * a.cols + 32 * slice;
      const int sum = Dot16(raw.q, xq) + Dot16(raw.q + 4, xq + 16);
      acc[r] += a.d[p * (a.cols / 32) + slice] * d * static_cast<float>(sum);
    }
  }
};

}  // namespace tandem::megakernel
