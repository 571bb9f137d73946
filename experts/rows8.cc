// PackRows8 / UnpackRows8 (rows8.h): plain byte shuffles, run once per tensor at load.
#include "experts/rows8.h"

#include <cassert>
#include <cstring>

#include "runtime/quant/blocks.h"
#include "runtime/quant/q4_k.h"

namespace tandem::experts {
namespace {

// Element e (0..255) of a GGUF Q4_K block, 0..15.
int Q4Element(const quant::BlockQ4K& b, int e) {
  const int sub = e >> 5;
  const uint8_t byte = b.qs[32 * (sub >> 1) + (e & 31)];
  return (sub & 1) ? byte >> 4 : byte & 0xF;
}

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
  for (int s = 0; s < 8; ++s) {
    for (int t = 0; t < 2; ++t) {
      for (int r = 0; r < kRows8; ++r) {
        for (int b = 0; b < 8; ++b) {
          const int lo = Q4Element(*rows[r], 32 * s + 8 * t + b);
          const int hi = Q4Element(*rows[r], 32 * s + 16 + 8 * t + b);
          g[128 + 64 * (2 * s + t) + 8 * r + b] = static_cast<uint8_t>(lo | hi << 4);
        }
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

}  // namespace

const char* WeightLayoutName(WeightLayout layout) {
  return layout == WeightLayout::kRows8 ? "rows8" : "gguf";
}

bool CanPackRows8(quant::GgmlType type, int64_t rows) {
  return type == quant::GgmlType::kQ4_K && rows > 0 && rows % kRows8 == 0;
}

void PackRows8(quant::GgmlType type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  assert(CanPackRows8(type, rows) && cols % quant::kQK_K == 0);
  static_assert(kRows8GroupBlockBytes == kRows8 * sizeof(quant::BlockQ4K));
  const int64_t row_bytes = quant::RowBytes(type, cols), nb = cols / quant::kQK_K;
  for (int64_t g = 0; g < rows / kRows8; ++g) {
    for (int64_t j = 0; j < nb; ++j) {
      const quant::BlockQ4K* in[kRows8];
      for (int r = 0; r < kRows8; ++r) {
        in[r] = reinterpret_cast<const quant::BlockQ4K*>(src + (kRows8 * g + r) * row_bytes) + j;
      }
      PackGroupBlock(in, dst + kRows8 * g * row_bytes + j * kRows8GroupBlockBytes);
    }
  }
}

void UnpackRows8(quant::GgmlType type, const uint8_t* src, int64_t rows, int64_t cols,
                 uint8_t* dst) {
  assert(CanPackRows8(type, rows) && cols % quant::kQK_K == 0);
  const int64_t row_bytes = quant::RowBytes(type, cols), nb = cols / quant::kQK_K;
  for (int64_t g = 0; g < rows / kRows8; ++g) {
    for (int64_t j = 0; j < nb; ++j) {
      quant::BlockQ4K* out[kRows8];
      for (int r = 0; r < kRows8; ++r) {
        out[r] = reinterpret_cast<quant::BlockQ4K*>(dst + (kRows8 * g + r) * row_bytes) + j;
      }
      UnpackGroupBlock(src + kRows8 * g * row_bytes + j * kRows8GroupBlockBytes, out);
    }
  }
}

}  // namespace tandem::experts
