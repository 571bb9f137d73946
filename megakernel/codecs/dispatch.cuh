// Which device codec reads which GGUF type, and the one loop every matrix-vector product uses:
// a group of G lanes (a power of two, at most 32) owns one matrix row, its lanes stride over the
// row's slices, and the group reduces with shuffles. C++17, device only.
#pragma once

#include "megakernel/codecs/float.cuh"
#include "megakernel/codecs/iq4_xs.cuh"
#include "megakernel/codecs/q4_k.cuh"
#include "megakernel/codecs/q6_k.cuh"
#include "megakernel/codecs/q8_0.cuh"
#include "megakernel/codecs.h"
#include "megakernel/params.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::megakernel {

// Codecs with a kUnroll member split a slice into Load and Apply, and their loads go out kUnroll
// slices at a time before any is applied (out-of-range slices load slice n - 1 again and are not
// applied, so that the loads need no branch). The others load and apply one slice per step.
template <class Codec, class = void>
struct HasUnroll {
  static constexpr bool value = false;
};
template <class Codec>
struct HasUnroll<Codec, decltype(void(Codec::kUnroll))> {
  static constexpr bool value = true;
};

template <class Codec, int R>
__device__ __forceinline__ void RowDotWith(const uint8_t* row, int n_slices, int lane_g, int G,
                                           const ActSet& a, unsigned mask, int base,
                                           float (&acc)[R]) {
  if constexpr (HasUnroll<Codec>::value) {
    constexpr int U = Codec::kUnroll;
    for (int s0 = lane_g; s0 < n_slices; s0 += U * G) {
      typename Codec::Raw raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) raw[u] = Codec::Load(row, min(s0 + u * G, n_slices - 1));
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (s0 + u * G < n_slices) Codec::template Apply<R>(raw[u], s0 + u * G, a, mask, base, acc);
      }
    }
  } else {
    for (int s = lane_g; s < n_slices; s += G) Codec::template Dot<R>(row, s, a, mask, base, acc);
  }
}

// acc[r] (r with its mask bit set) += row · activation(r), summed over the G lanes of the group:
// every lane of the group holds the total afterwards. `row` may be null for idle groups, which
// still take part in the shuffles.
template <int R>
__device__ __noinline__ void RowDot(int type, const uint8_t* row, int cols, int lane_g, int G,
                                       const ActSet& a, unsigned mask, int base, float (&acc)[R]) {
  using quant::GgmlType;
  if (row != nullptr) {
    const int n = cols / SliceElems(type);
    switch (static_cast<GgmlType>(type)) {
      case GgmlType::kF32: RowDotWith<CodecF32, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kF16: RowDotWith<CodecHalf<false>, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kBF16: RowDotWith<CodecHalf<true>, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kQ8_0: RowDotWith<CodecQ8_0, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kQ4_K: RowDotWith<CodecQ4K, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kQ5_K: RowDotWith<CodecQ5K, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kQ6_K: RowDotWith<CodecQ6K, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kQ3_K: RowDotWith<CodecQ3K, R>(row, n, lane_g, G, a, mask, base, acc); break;
      case GgmlType::kIQ4_XS: RowDotWith<CodecIQ4XS, R>(row, n, lane_g, G, a, mask, base, acc); break;
      default: break;  // refused on the host (megakernel/codecs.h)
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    for (int o = G >> 1; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(kFullMask, acc[r], o);
  }
}

}  // namespace tandem::megakernel
