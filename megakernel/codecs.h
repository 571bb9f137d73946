// Which GGUF types the GPU kernels read, and how a row of each is split among lanes. Shared by
// host code (load-time checks, launch planning) and device code. C++17.
#pragma once

#include <string>

#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::megakernel {

// Elements one lane takes per step of a row (0: the type has no device codec).
TANDEM_HD constexpr int SliceElems(int type) {
  using quant::GgmlType;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return 4;  // one 16-byte chunk
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 8;
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_XS:
      return 32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return 64;
    case GgmlType::kQ6_K:
    case GgmlType::kQ3_K:
      return 128;
    default:
      return 0;
  }
}

// Lanes that share one row of `cols` elements: the slice count rounded up to a power of two, at
// most a warp.
TANDEM_HD constexpr int GroupLanes(int type, int cols) {
  const int slices = cols / (SliceElems(type) > 0 ? SliceElems(type) : 1);
  int g = 1;
  while (g < slices && g < 32) g <<= 1;
  return g;
}

// "f32, f16, bf16, q8_0, q4_k, q5_k, q6_k, q3_k, iq4_xs": for error messages.
std::string DeviceCodecNames();

}  // namespace tandem::megakernel
