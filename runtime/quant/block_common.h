// Block sizes and the nibble order shared by several block formats (spec §2.3, §2.4).
// C++17, host and device; nothing here allocates or touches memory beyond the block it is given.
#pragma once

#include <cstdint>

#include "runtime/quant/host_device.h"

namespace tandem::quant {

// Elements per block of the 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4.
inline constexpr int kQK = 32;
// Elements per super-block of the K-quants, Q8_K and IQ4_XS.
inline constexpr int kQK_K = 256;

// The 4-bit field of element j (0..31) in the 16 bytes `qs` of a 32-element group: byte i holds
// element i in its low nibble and element i+16 in its high nibble.
TANDEM_HD int Nibble32(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
}

// The 2-bit field of element e (0..255) in the 64 bytes `qs` of Q2_K and Q3_K: each 32-byte half
// of qs serves 128 elements as four consecutive 32-element runs, run s at bit pair s.
TANDEM_HD int TwoBitField(const uint8_t* qs, int e) {
  const int half = e >> 7;
  const int run = (e & 127) >> 5;
  return (qs[32 * half + (e & 31)] >> (2 * run)) & 3;
}

// Reads a little-endian u32 from 4 bytes that may be unaligned (Q5_0 / Q5_1 qh fields).
TANDEM_HD uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace tandem::quant
