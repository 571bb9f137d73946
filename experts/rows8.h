// The 8-row interleaved weight layout ("rows8") that the AVX-512 and AVX2 Q4_K and Q3_K kernels
// read: the same bytes as GGUF's rows, rearranged once at load (PackRows8) so that one 64-byte
// vector feeds eight weight rows to a vpdpbusd against one broadcast activation quad-pair, and each
// block's scales (and mins) unpack for eight rows at once. Half the vector instructions of the
// GGUF-layout kernel per weight byte (docs/perf/experts.md, session 20). Layout only: no threads,
// no allocation.
#pragma once

#include <cstdint>

#include "runtime/quant/ggml_type.h"

namespace tandem::experts {

// How an expert tensor's rows lie in memory. kGguf: as the file stores them. kRows8: PackRows8's
// layout, only for types with CanPackRows8; a kernel for one layout never reads the other.
enum class WeightLayout { kGguf, kRows8 };

const char* WeightLayoutName(WeightLayout layout);

// Rows packed together.
inline constexpr int kRows8 = 8;

// Group block: 8 rows' 256-element block j (8 blocks' bytes). Q4_K (1152 bytes):
//   [0, 16)     d of rows 0..7 (f16)
//   [16, 32)    dmin of rows 0..7 (f16)
//   [32, 96)    byte 16l + 2s + i (l = 0..3, s = sub-block 0..7, i = 0..1; row r = 2l + i): scale
//               s of row r, low 4 bits, in the low nibble; min s of row r, low 4 bits, in the high
//   [96, 128)   byte p: (scale >> 4) | (min >> 4) << 2 of entry p of the bytes above in the low
//               nibble, of entry p + 32 in the high nibble
//   [128, 1152) 16 runs of 64 bytes: run 2s + t, byte 8r + b holds element 32s + 8t + b of row r
//               in its low nibble and element 32s + 16 + 8t + b in its high nibble
// Q3_K (880 bytes), with u = q + 4 (0..7) and scales biased by 32 (0..63) as GGUF stores them:
//   [0, 16)     d of rows 0..7 (f16)
//   [16, 80)    byte p: low 4 bits of scale entry p in the low nibble, of entry p + 64 in the high;
//               entry 64·(s / 8) + 16·(r / 2) + 2·(s % 8) + r % 2 is sub-block s (0..15) of row r
//   [80, 112)   byte p: top 2 bits of entry p + 32m in bits 2m, 2m + 1 (m = 0..3)
//   [112, 624)  8 runs of 64 bytes: bits 2m, 2m + 1 of byte q of run k: u & 3 of vector 4k + m
//   [624, 880)  4 runs of 64 bytes: bit j of byte q of run k: u >> 2 of vector 8k + j
//               (vector 2s + t, byte 8r + b: element 16s + 8t + b of row r)
// A group of 8 rows holds its nb group blocks in order, groups one after another, so rows
// [8g, 8g + 8) start at byte 8g · row_bytes as in the GGUF layout, and any run of whole groups is
// a valid matrix of its own.
inline constexpr int64_t kRows8GroupBlockBytesQ4K = 1152;
inline constexpr int64_t kRows8GroupBlockBytesQ3K = 880;

// True when `type` has a rows8 layout and `rows` fills whole groups (Q4_K or Q3_K, rows % 8 == 0).
bool CanPackRows8(quant::GgmlType type, int64_t rows);

// Rearranges `rows` rows of `cols` elements (GGUF layout, quant::RowBytes each) into dst (the same
// size, not overlapping src). Requires CanPackRows8(type, rows) and cols a multiple of 256.
void PackRows8(quant::GgmlType type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

// The inverse: dst gets back the GGUF bytes PackRows8 read.
void UnpackRows8(quant::GgmlType type, const uint8_t* src, int64_t rows, int64_t cols,
                 uint8_t* dst);

}  // namespace tandem::experts
