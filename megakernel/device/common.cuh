// Small device helpers shared by every kernel of megakernel/: warp reductions, unaligned word
// loads, int8 dot products, half conversions. C++17, device only; nothing here knows a model.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>

namespace tandem::megakernel {

inline constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// The largest (value, index) over the warp, ties to the smaller index; every lane gets it. T is
// float (the LM head's argmax) or an OrderedKey (WarpMaxKey before sm_80).
template <class T>
__device__ __forceinline__ void WarpArgmax(T* value, int* index) {
  for (int o = 16; o > 0; o >>= 1) {
    const T ov = __shfl_xor_sync(kFullMask, *value, o);
    const int oi = __shfl_xor_sync(kFullMask, *index, o);
    if (ov > *value || (ov == *value && oi < *index)) {
      *value = ov;
      *index = oi;
    }
  }
}

// The sum of an int over the warp; every lane gets it (one redux.sync from sm_80).
__device__ __forceinline__ int WarpSumInt(int v) {
#if __CUDA_ARCH__ >= 800
  return static_cast<int>(__reduce_add_sync(kFullMask, static_cast<unsigned>(v)));
#else
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
#endif
}

// A float as an unsigned key with the same order, for warp reductions on integers: -0 counts as
// +0, as the float comparisons have them equal, and NaN as -inf. Every float's key is above 0,
// which therefore marks "nothing" (an element already chosen, or none).
__device__ __forceinline__ uint32_t OrderedKey(float value) {
  const float v = value != value ? -INFINITY : value + 0.0f;
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}
__device__ __forceinline__ float KeyValue(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

// The largest key over the warp and the smallest index holding it, into *top and *at of every
// lane: from sm_80 two warp reductions (redux.sync), before that five rounds of paired shuffles.
__device__ __forceinline__ void WarpMaxKey(uint32_t key, int index, uint32_t* top, int* at) {
#if __CUDA_ARCH__ >= 800
  *top = __reduce_max_sync(kFullMask, key);
  *at = static_cast<int>(
      __reduce_min_sync(kFullMask, key == *top ? static_cast<uint32_t>(index) : 0xffffffffu));
#else
  WarpArgmax(&key, &index);
  *top = key;
  *at = index;
#endif
}

__device__ __forceinline__ float HalfBitsToFloat(uint32_t bits16) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16 & 0xffffu)));
}
__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Loads of data read once per step: the weights and the KV cache. They are "cache streaming"
// (ld.global.cs: lines allocated evict-first in L1 and L2). The ~2 GB of weights a token streams
// through the 50 MB L2 otherwise pushed out what is reused within and between launches (the
// kernels' code, the residual and projected rows, the route tables), which then came back from
// memory: every phase of both layer halves shortened with this, +11% / +10% tok/s on the H200,
// and the KV cache read the same way +14% / +4% at 16k keys (session 11) and +11% / +3% at 8k
// keys (session 12, the one-head path, whose heads of a group read the same rows; at 4k keys
// +0.5%; docs/perf/megakernel.md). An L2-only evict-first hint (createpolicy), 128- and 256-byte
// L2 fetches measured the same.
template <class T>
__device__ __forceinline__ T LoadStreaming(const T* p) {
  return __ldcs(p);
}

// kChunks 16-byte chunks from a 16-byte-aligned address, as 4 * kChunks little-endian words.
template <int kChunks>
__device__ __forceinline__ void LoadChunks(const uint4* base, uint32_t (&a)[4 * kChunks]) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const uint4 v = LoadStreaming(base + c);
    a[4 * c] = v.x;
    a[4 * c + 1] = v.y;
    a[4 * c + 2] = v.z;
    a[4 * c + 3] = v.w;
  }
}

// Σ of 16 int8 products: four words of weights against 16 activation bytes (16-byte aligned).
__device__ __forceinline__ int Dot16(const uint32_t* v, const int8_t* x) {
  const int4 a = *reinterpret_cast<const int4*>(x);
  int s = __dp4a(static_cast<int>(v[0]), a.x, 0);
  s = __dp4a(static_cast<int>(v[1]), a.y, s);
  s = __dp4a(static_cast<int>(v[2]), a.z, s);
  return __dp4a(static_cast<int>(v[3]), a.w, s);
}

}  // namespace tandem::megakernel
