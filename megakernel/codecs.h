// Which GGUF types the GPU kernels read, and how a row of each is split among lanes. Shared by
// host code (load-time checks, launch planning) and device code. C++17.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::megakernel {

// log2 of the elements one lane takes per step of a row (-1: the type has no device codec).
// Every count in a row's split is a power of two, so the device splits rows with shifts
// (SplitRows in device/matvec.cuh).
TANDEM_HD constexpr int SliceShift(int type) {
  using quant::GgmlType;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return 2;  // one 16-byte chunk
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 3;
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_XS:
      return 5;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return 6;
    case GgmlType::kQ6_K:
      return 7;
    case GgmlType::kQ3_K:
      return 8;
    default:
      return -1;
  }
}

// Elements one lane takes per step of a row (0: the type has no device codec).
TANDEM_HD constexpr int SliceElems(int type) {
  return SliceShift(type) < 0 ? 0 : 1 << SliceShift(type);
}

// The most slices of one row a lane takes (device/matvec.cuh SplitRows). Q4_K and Q5_K load two
// slices at a time, and a lane with four slices of a row has them in flight together: on the H200
// that lifted the 256 MiB Q4_K lab from 0.27 to 0.51 of copy and shortened qwen3-30b-a3b's gate/up
// and down phases by 2.2 µs each a layer. Q3_K with the same scheme lost on flash-next-125b's
// expert phases; it and the other types keep one slice per lane where the row has enough slices for
// a warp (docs/perf/megakernel.md, session 22).
TANDEM_HD constexpr int MaxLaneSlices(int type) {
  using quant::GgmlType;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return 4;
    default:
      return 1;
  }
}

// ceil(log2(v)), 0 for v <= 1.
TANDEM_HD int CeilLog2(int v) {
#if defined(__CUDA_ARCH__)
  return v <= 1 ? 0 : 32 - __clz(v - 1);
#else
  int lg = 0;
  while ((1 << lg) < v) ++lg;
  return lg;
#endif
}

// log2 of the lanes that share one row of `slices` slices when each lane takes up to
// 2^lane_slices_log2 of them: the lane steps rounded up to a power of two, at most a warp.
TANDEM_HD int RowLanesLog2(int slices, int lane_slices_log2) {
  const int steps = (slices + (1 << lane_slices_log2) - 1) >> lane_slices_log2;
  const int lg = CeilLog2(steps);
  return lg < 5 ? lg : 5;
}

// "f32, f16, bf16, q8_0, q4_k, q5_k, q6_k, q3_k, iq4_xs": for error messages.
std::string DeviceCodecNames();

// A Q3_K block as the device stores it: the file's 110 bytes, then 2 bytes of padding, so every
// block starts 16-byte aligned and a lane loads its block as 7 aligned chunks with no realignment
// (CodecQ3K in codecs/q6_k.cuh).
inline constexpr int kQ3KDeviceBlockBytes = 112;

// Q8_0 and Q6_K rows as the device stores them: planes, each holding one field of every block in
// block order, then zeros up to a multiple of 16 bytes (none where the row has a multiple of 8
// blocks, so the device row is as long as the file's). Q8_0: the 32 quant bytes, then the fp16
// scale. Q6_K: ql and qh (192 bytes), then the 16 scales, then the fp16 d. The file's 34- and
// 210-byte blocks are only 2-byte aligned, and a lane assembled their words from loads realigned
// by funnel shifts and selects (Q8_0: nine loads and eight shifts a block; Q6_K: ten chunk loads
// and ~90 selects and shifts a half-block); in planes every load is aligned (codecs/q8_0.cuh,
// codecs/q6_k.cuh); codecs.cc lists each type's planes, with each field's offset in the file's
// block. The planes' field sizes, in bytes a block (host and device code):
inline constexpr int kQ8QuantBytes = 32, kQ8ScaleBytes = 2;
inline constexpr int kQ6KQuantBytes = 192, kQ6KScaleBytes = 16, kQ6KFactorBytes = 2;

// Whether the device layout of `type` is the file's (the other types are converted on upload by
// ToDeviceLayout; host code).
bool DeviceLayoutIsFiles(int type);

// Bytes of a row of `cols` elements in the device layout (host code).
int64_t DeviceRowBytes(int type, int64_t cols);

// Copies `rows` rows of `cols` elements from the file's layout at src to the device layout at
// dst (DeviceRowBytes each; padding zeroed). Host code; dst must not overlap src.
void ToDeviceLayout(int type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

}  // namespace tandem::megakernel
