// Q6_K: 256 6-bit values (q in −32..31) in 16 sub-blocks of 16 with signed 8-bit scales and one
// f16 factor: x = d·scales[j]·q (spec §2.4). C++17, host and device; the quantiser is host-only
// (q6_k.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ6K {
  static constexpr GgmlType kType = GgmlType::kQ6_K;
  static constexpr int kElems = kQK_K;

  uint8_t ql[kQK_K / 2];  // low 4 bits, see Q6KQuant
  uint8_t qh[kQK_K / 4];  // high 2 bits
  int8_t scales[16];      // one per 16 elements
  uint16_t d;             // f16
};
static_assert(sizeof(BlockQ6K) == 210);
static_assert(offsetof(BlockQ6K, qh) == 128 && offsetof(BlockQ6K, scales) == 192 &&
              offsetof(BlockQ6K, d) == 208);

// Within each 128-element half h, run g (0..3) of 32 elements takes its low nibbles from
// ql[64h + 32·(g%2) + l] (low nibble for g < 2, high for g >= 2) and its high bits from bit pair g
// of qh[32h + l]. The quant planes may sit apart from the block (the CUDA kernels' layout).
TANDEM_HD int Q6KQuant(const uint8_t* ql, const uint8_t* qh, int e) {
  const int half = e >> 7;
  const int run = (e & 127) >> 5;
  const int l = e & 31;
  const uint8_t low_byte = ql[64 * half + 32 * (run & 1) + l];
  const int low4 = run < 2 ? (low_byte & 0xF) : (low_byte >> 4);
  const int high2 = (qh[32 * half + l] >> (2 * run)) & 3;
  return (low4 | high2 << 4) - 32;
}
TANDEM_HD int Q6KQuant(const BlockQ6K& b, int e) { return Q6KQuant(b.ql, b.qh, e); }

TANDEM_HD float DequantizeElement(const BlockQ6K& b, int e) {
  const float dl = Fp16ToF32(b.d) * static_cast<float>(b.scales[e >> 4]);
  return dl * static_cast<float>(Q6KQuant(b, e));
}

TANDEM_HD void DequantizeBlock(const BlockQ6K& b, float* out) {
  const float d = Fp16ToF32(b.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    const int8_t* sc = b.scales + 8 * half;
    float* y = out + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int sub = l >> 4;  // 16-element sub-block inside each 32-element run
      const int q0 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q1 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      y[l] = d * static_cast<float>(sc[sub]) * static_cast<float>(q0);
      y[l + 32] = d * static_cast<float>(sc[sub + 2]) * static_cast<float>(q1);
      y[l + 64] = d * static_cast<float>(sc[sub + 4]) * static_cast<float>(q2);
      y[l + 96] = d * static_cast<float>(sc[sub + 6]) * static_cast<float>(q3);
    }
  }
}

// Per sub-block least-squares scale over q in −32..31, then int8 codes under one f16 factor.
void QuantizeBlocks(const float* x, BlockQ6K* out, int64_t n_blocks);

}  // namespace tandem::quant
