// Shared-memory budgets of the persistent kernels, computed identically on the host (to size the
// launch) and on the device (to carve the buffer). C++17.
#pragma once

#include <cstdint>

#include "runtime/quant/host_device.h"

namespace tandem::megakernel {

TANDEM_HD constexpr int64_t Align16(int64_t n) { return (n + 15) & ~int64_t{15}; }

// A quantised activation row: `cols` int8 values in whole 128-byte lines (codecs/act.cuh).
TANDEM_HD constexpr int64_t ActRowBytes(int cols) { return (int64_t{cols} + 127) & ~int64_t{127}; }

// One activation set of n rows of `cols` (see CarveActs in device/matvec.cuh). Its int8 rows start
// on a 128-byte boundary: up to 112 bytes of padding before them, from a 16-byte-aligned cursor.
TANDEM_HD constexpr int64_t ActSetBytes(int n, int cols, bool fp32_shared) {
  return 112 + int64_t{n} * ActRowBytes(cols) + 2 * Align16(int64_t{n} * (cols / 32) * 4) +
         (fp32_shared ? Align16(int64_t{n} * cols * 4) : 0);
}

// The attention-scores phase stages each warp's query heads (at most 32 floats a lane).
inline constexpr int64_t kAttentionBytesPerWarp = 32 * 32 * 4;

// DeltaNetConvRule (device/mixer.cuh) keeps, for each row, the conv output of the q and k of the
// block's key head and of its value head, then the head's beta and decay; after the rows, the
// next conv state of the key head's q and k channels (K - 1 floats each).
TANDEM_HD constexpr int DeltaNetRowFloats(int dk, int dv) { return 2 * dk + dv + 2; }
TANDEM_HD constexpr int64_t DeltaNetSmemBytes(int rows, int dk, int dv, int conv_kernel) {
  return (int64_t{rows} * DeltaNetRowFloats(dk, dv) + int64_t{2} * dk * (conv_kernel - 1)) * 4;
}

}  // namespace tandem::megakernel
