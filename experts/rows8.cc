// PackRows8 / UnpackRows8 (rows8.h): plain byte shuffles, run once per tensor at load.
#include "experts/rows8.h"

#include <cassert>
#include <cstring>

#include "runtime/quant/blocks.h"
#include "runtime/quant/q3_k.h"
#include "runtime/quant/q4_k.h"

namespace tandem::experts {
namespace {

static_assert(kRows8GroupBlockBytesQ4K == kRows8 * sizeof(quant::BlockQ4K));
static_assert(kRows8GroupBlockBytesQ3K == kRows8 * sizeof(quant::BlockQ3K));

void SetQ4Element(quant::BlockQ4K& b, int e, int q) {
  const int sub = e >> 5;
  uint8_t& byte = b.qs[32 * (sub >> 1) + (e & 31)];
  byte = (sub & 1) ? static_cast<uint8_t>((byte & 0x0F) | q << 4)
                   : static_cast<uint8_t>((byte & 0xF0) | q);
}

// Entry index of (row r, sub-block s) in the scale bytes: 16l + 2s + i for r = 2l + i.
int ScaleEntry(int r, int s) { return 16 * (r / 2) + 2 * s + r % 2; }

void PackGroupBlock(const quant::BlockQ4K* const rows[kRows8], uint8_t* g) {
  uint16_t d[2 * kRows8];
  uint8_t low[64], high[64];
  for (int r = 0; r < kRows8; ++r) {
    d[r] = rows[r]->d;
    d[kRows8 + r] = rows[r]->dmin;
    for (int s = 0; s < 8; ++s) {
      int sc = 0, m = 0;
      quant::ScaleMinK4(rows[r]->scales, s, &sc, &m);
      const int p = ScaleEntry(r, s);
      low[p] = static_cast<uint8_t>((sc & 0xF) | (m & 0xF) << 4);
      high[p] = static_cast<uint8_t>(sc >> 4 | (m >> 4) << 2);
    }
  }
  std::memcpy(g, d, sizeof(d));
  std::memcpy(g + 32, low, sizeof(low));
  for (int p = 0; p < 32; ++p) g[96 + p] = static_cast<uint8_t>(high[p] | high[p + 32] << 4);
  // Elements 32s + 8t .. +7 and 32s + 16 + 8t .. +7 of a row are the same nibble (s % 2) of 8
  // consecutive qs bytes each: eight at a time as 64-bit words.
  for (int s = 0; s < 8; ++s) {
    for (int t = 0; t < 2; ++t) {
      for (int r = 0; r < kRows8; ++r) {
        uint64_t lo, hi;
        std::memcpy(&lo, rows[r]->qs + 32 * (s / 2) + 8 * t, 8);
        std::memcpy(&hi, rows[r]->qs + 32 * (s / 2) + 16 + 8 * t, 8);
        const uint64_t nib = 0x0F0F0F0F0F0F0F0Full;
        const uint64_t packed = ((lo >> (4 * (s % 2))) & nib) | ((hi >> (4 * (s % 2))) & nib) << 4;
        std::memcpy(g + 128 + 64 * (2 * s + t) + 8 * r, &packed, 8);
      }
    }
  }
}

void UnpackGroupBlock(const uint8_t* g, quant::BlockQ4K* const rows[kRows8]) {
  uint16_t d[2 * kRows8];
  std::memcpy(d, g, sizeof(d));
  for (int r = 0; r < kRows8; ++r) {
    rows[r]->d = d[r];
    rows[r]->dmin = d[kRows8 + r];
    int sc[8], m[8];
    for (int s = 0; s < 8; ++s) {
      const int p = ScaleEntry(r, s);
      const int high = (g[96 + p % 32] >> (p < 32 ? 0 : 4)) & 0xF;
      sc[s] = (g[32 + p] & 0xF) | (high & 3) << 4;
      m[s] = g[32 + p] >> 4 | (high >> 2) << 4;
    }
    quant::PackScaleMinK4(sc, m, rows[r]->scales);
    for (int s = 0; s < 8; ++s) {
      for (int t = 0; t < 2; ++t) {
        for (int b = 0; b < 8; ++b) {
          const uint8_t byte = g[128 + 64 * (2 * s + t) + 8 * r + b];
          SetQ4Element(*rows[r], 32 * s + 8 * t + b, byte & 0xF);
          SetQ4Element(*rows[r], 32 * s + 16 + 8 * t + b, byte >> 4);
        }
      }
    }
  }
}

// Q3_K. Entry of (row r, sub-block s) in the scale bytes: Q4_K's entry of (r, s % 8) in the
// 64-entry half s / 8, so that each 128-bit lane of either half holds rows 2l, 2l + 1.
int Q3ScaleEntry(int r, int s) { return 64 * (s / 8) + ScaleEntry(r, s % 8); }

// Element e of Q3_K row r sits in vector 2·(e / 16) + (e / 8) % 2, byte 8r + e % 8.
int Q3Vector(int e) { return 2 * (e / 16) + (e / 8) % 2; }

void PackGroupBlockQ3(const quant::BlockQ3K* const rows[kRows8], uint8_t* g) {
  uint16_t d[kRows8];
  uint8_t biased[128];
  uint8_t* low2 = g + 112;   // 8 runs of 64 bytes, 2 bits per vector
  uint8_t* high1 = g + 624;  // 4 runs of 64 bytes, 1 bit per vector
  std::memset(low2, 0, 512 + 256);
  for (int r = 0; r < kRows8; ++r) {
    const quant::BlockQ3K& b = *rows[r];
    d[r] = b.d;
    for (int s = 0; s < 16; ++s) {
      biased[Q3ScaleEntry(r, s)] = static_cast<uint8_t>(quant::Q3KScale(b.scales, s) + 32);
    }
    // u = q + 4 = low bits | (hmask bit << 2). Vector v's 8 elements of this row, e0 .. e0 + 7,
    // have their low bits in 8 consecutive qs bytes (TwoBitField) and their high bits in 8
    // consecutive hmask bytes (bit e / 32 of byte e % 32): eight at a time as 64-bit words.
    for (int v = 0; v < 32; ++v) {
      const int e0 = 16 * (v / 2) + 8 * (v % 2);
      uint64_t lows, highs;
      std::memcpy(&lows, b.qs + 32 * (e0 >> 7) + (e0 & 31), 8);
      std::memcpy(&highs, b.hmask + (e0 & 31), 8);
      lows = (lows >> (2 * ((e0 & 127) >> 5))) & 0x0303030303030303ull;
      highs = (highs >> (e0 >> 5)) & 0x0101010101010101ull;
      uint64_t low_run, high_run;
      std::memcpy(&low_run, low2 + 64 * (v / 4) + 8 * r, 8);
      std::memcpy(&high_run, high1 + 64 * (v / 8) + 8 * r, 8);
      low_run |= lows << (2 * (v % 4));
      high_run |= highs << (v % 8);
      std::memcpy(low2 + 64 * (v / 4) + 8 * r, &low_run, 8);
      std::memcpy(high1 + 64 * (v / 8) + 8 * r, &high_run, 8);
    }
  }
  std::memcpy(g, d, sizeof(d));
  for (int p = 0; p < 64; ++p) {
    g[16 + p] = static_cast<uint8_t>((biased[p] & 0xF) | (biased[p + 64] & 0xF) << 4);
  }
  for (int p = 0; p < 32; ++p) {
    uint8_t high = 0;
    for (int m = 0; m < 4; ++m) high |= static_cast<uint8_t>((biased[p + 32 * m] >> 4) << (2 * m));
    g[80 + p] = high;
  }
}

void UnpackGroupBlockQ3(const uint8_t* g, quant::BlockQ3K* const rows[kRows8]) {
  uint16_t d[kRows8];
  std::memcpy(d, g, sizeof(d));
  for (int r = 0; r < kRows8; ++r) {
    quant::BlockQ3K& b = *rows[r];
    b.d = d[r];
    std::memset(b.scales, 0, sizeof(b.scales));
    for (int s = 0; s < 16; ++s) {
      const int p = Q3ScaleEntry(r, s);
      const int low4 = (g[16 + p % 64] >> (p < 64 ? 0 : 4)) & 0xF;
      const int high2 = (g[80 + p % 32] >> (2 * (p / 32))) & 3;
      const int biased = low4 | high2 << 4;
      // Q3KScale's packing: low nibbles in bytes 0..7, top bits in byte 8 + s % 4.
      b.scales[s % 8] |= static_cast<uint8_t>((biased & 0xF) << (s < 8 ? 0 : 4));
      b.scales[8 + s % 4] |= static_cast<uint8_t>((biased >> 4) << (2 * (s / 4)));
    }
    std::memset(b.qs, 0, sizeof(b.qs));
    std::memset(b.hmask, 0, sizeof(b.hmask));
    for (int e = 0; e < quant::kQK_K; ++e) {
      const int v = Q3Vector(e), q = 8 * r + e % 8;
      const int low = (g[112 + 64 * (v / 4) + q] >> (2 * (v % 4))) & 3;
      const int high = (g[624 + 64 * (v / 8) + q] >> (v % 8)) & 1;
      // TwoBitField's place, and hmask bit e / 32 of byte e % 32.
      b.qs[32 * (e >> 7) + (e & 31)] |= static_cast<uint8_t>(low << (2 * ((e & 127) >> 5)));
      b.hmask[e & 31] |= static_cast<uint8_t>(high << (e >> 5));
    }
  }
}

}  // namespace

const char* WeightLayoutName(WeightLayout layout) {
  return layout == WeightLayout::kRows8 ? "rows8" : "gguf";
}

bool CanPackRows8(quant::GgmlType type, int64_t rows) {
  return (type == quant::GgmlType::kQ4_K || type == quant::GgmlType::kQ3_K) && rows > 0 &&
         rows % kRows8 == 0;
}

void PackRows8(quant::GgmlType type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  assert(CanPackRows8(type, rows) && cols % quant::kQK_K == 0);
  const int64_t row_bytes = quant::RowBytes(type, cols), nb = cols / quant::kQK_K;
  const int64_t block_bytes = quant::GetTypeInfo(type).block_bytes;
  for (int64_t g = 0; g < rows / kRows8; ++g) {
    for (int64_t j = 0; j < nb; ++j) {
      const uint8_t* in[kRows8];
      for (int r = 0; r < kRows8; ++r) in[r] = src + (kRows8 * g + r) * row_bytes + j * block_bytes;
      uint8_t* out = dst + kRows8 * g * row_bytes + j * kRows8 * block_bytes;
      if (type == quant::GgmlType::kQ4_K) {
        PackGroupBlock(reinterpret_cast<const quant::BlockQ4K* const*>(in), out);
      } else {
        PackGroupBlockQ3(reinterpret_cast<const quant::BlockQ3K* const*>(in), out);
      }
    }
  }
}

void UnpackRows8(quant::GgmlType type, const uint8_t* src, int64_t rows, int64_t cols,
                 uint8_t* dst) {
  assert(CanPackRows8(type, rows) && cols % quant::kQK_K == 0);
  const int64_t row_bytes = quant::RowBytes(type, cols), nb = cols / quant::kQK_K;
  const int64_t block_bytes = quant::GetTypeInfo(type).block_bytes;
  for (int64_t g = 0; g < rows / kRows8; ++g) {
    for (int64_t j = 0; j < nb; ++j) {
      uint8_t* out[kRows8];
      for (int r = 0; r < kRows8; ++r)
        out[r] = dst + (kRows8 * g + r) * row_bytes + j * block_bytes;
      const uint8_t* in = src + kRows8 * g * row_bytes + j * kRows8 * block_bytes;
      if (type == quant::GgmlType::kQ4_K) {
        UnpackGroupBlock(in, reinterpret_cast<quant::BlockQ4K* const*>(out));
      } else {
        UnpackGroupBlockQ3(in, reinterpret_cast<quant::BlockQ3K* const*>(out));
      }
    }
  }
}

}  // namespace tandem::experts
