// Rows of the unquantised types F32, F16 and BF16: element-wise conversion to and from f32.
// These have no blocks (block size 1); a row is a plain array of 4- or 2-byte values.
// C++17, host and device.
#pragma once

#include <cstdint>

#include "runtime/quant/float16.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

TANDEM_HD void DequantizeRowF16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToF32(src[i]);
}

TANDEM_HD void DequantizeRowBF16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

// Round to nearest even; values beyond the f16 range become ±infinity.
TANDEM_HD void QuantizeRowF16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToFp16(src[i]);
}

TANDEM_HD void QuantizeRowBF16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

}  // namespace tandem::quant
