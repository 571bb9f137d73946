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
// applied, so that the loads need no branch). The others load and apply one slice per step (Dot).
// Load and Dot take the row's slice count n, from which the device layouts of Q8_0 and Q6_K
// (codecs.h) find a row's scale planes.
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
      for (int u = 0; u < U; ++u)
        raw[u] = Codec::Load(row, min(s0 + u * G, n_slices - 1), n_slices);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (s0 + u * G < n_slices) Codec::template Apply<R>(raw[u], s0 + u * G, a, mask, base, acc);
      }
    }
  } else {
    for (int s = lane_g; s < n_slices; s += G)
      Codec::template Dot<R>(row, s, n_slices, a, mask, base, acc);
  }
}

// One dot product per step row, returned by value: an accumulator passed by reference to an
// out-of-line function lives in local memory, a load and a store per slice (SASS, session 7).
template <int R>
struct RowSums {
  float v[R];
};

// Sum over row r of mask of row · activation(r), over the row's n slices and the G lanes of the
// group: every lane of the group gets the totals. `row` may be null for idle groups, which still
// take part in the shuffles.
template <int R>
__device__ __noinline__ RowSums<R> RowDot(int type, const uint8_t* row, int n, int lane_g, int G,
                                          const ActSet& act_set, unsigned mask, int base) {
  using quant::GgmlType;
  // Up to four rows, the set is read from a copy in registers: read through the reference, its
  // fields were loaded again (generic loads) before every run of every slice, each load at the head
  // of its run's dependent chain. Eight-row products keep the reference: with the copy their
  // kernels spilled more and an 8-row step took 3-6% longer (docs/perf/megakernel.md, session 27).
  const ActSet copy = act_set;
  const ActSet& a = R <= 4 ? copy : act_set;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0;
  if (row != nullptr) {
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
  RowSums<R> sums;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      if (o < G) acc[r] += __shfl_xor_sync(kFullMask, acc[r], o);
    }
    sums.v[r] = acc[r];
  }
  return sums;
}

}  // namespace tandem::megakernel
