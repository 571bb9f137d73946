// Shared-memory budgets of the persistent kernels, computed identically on the host (to size the
// launch) and on the device (to carve the buffer). C++17.
#pragma once

#include <cstdint>

#include "runtime/quant/host_device.h"

namespace tandem::megakernel {

TANDEM_HD constexpr int64_t Align16(int64_t n) { return (n + 15) & ~int64_t{15}; }

// A quantised activation row: `cols` int8 values in whole 128-byte lines, each row starting on a
// line boundary. Chunk k (16 bytes) of line l sits in slot k ^ ActLineFlip(l) of the line
// (ActChunkAt in codecs/act.cuh). The lanes of a row group take consecutive slices, so at each
// step the 8 lanes of a quarter-warp (one phase of a 128-bit shared load) read chunks S·s + k of 8
// consecutive s, S = 2 (Q8_0, IQ4_XS), 4 (Q4_K, Q5_K), 8 (Q6_K) or 16 (Q3_K) chunks a slice. In a
// plain layout those are 32·S bytes apart, in the same four banks, so a load took up to 8
// wavefronts (Q3_K and Q6_K 8, Q4_K 4, Q8_0 2). The flip, bits 0..2 of the line index with bit 0
// also xored with bit 3, puts the eight in eight different bank quads for every S
// (docs/perf/megakernel.md, session 39; plan_test checks it).
inline constexpr int kActLineBytes = 128;
TANDEM_HD constexpr int64_t ActRowBytes(int cols) {
  return (int64_t{cols} + kActLineBytes - 1) & ~int64_t{kActLineBytes - 1};
}
TANDEM_HD constexpr unsigned ActLineFlip(int line) {
  return static_cast<unsigned>((line & 7) ^ ((line >> 3) & 1));
}

// One activation set of n rows of `cols` (see CarveActs in device/matvec.cuh). Its int8 rows start
// on a 128-byte boundary: up to 112 bytes of padding before them, from a 16-byte-aligned cursor.
TANDEM_HD constexpr int64_t ActSetBytes(int n, int cols, bool fp32_shared) {
  return (kActLineBytes - 16) + int64_t{n} * ActRowBytes(cols) +
         2 * Align16(int64_t{n} * (cols / 32) * 4) +
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
