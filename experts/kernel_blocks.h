// Internal to experts/kernels_*.cc: the per-block algebra (KBlock, Block32) and the scalar
// decoders the scalar kernels use as the oracle, the format traits, and the format dispatch. The
// SIMD decoders (kernel_decode_avx2.h) never build a KBlock but must yield the same values. Everything
// here has internal linkage because each kernel file is compiled with different -m flags; sharing
// one out-of-line copy across them could run AVX-512 code on an AVX2-only CPU.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/quant/blocks.h"

namespace tandem::experts {
namespace {

// A 256-element K-family block (paired with Q8_K activations):
//   dot = dy · ( d · Σ_j sc_j · Σ_{e∈j} q_e·qy_e  −  Σ_j corr_j · bsums_j ),  j over 16 runs of 16.
// q is unsigned (0..63) for the formats with an offset or a min folded into corr; signed int8 for
// IQ4_XS (kSigned), whose corr is zero.
struct alignas(64) KBlock {
  uint8_t q[256];    // offset 0
  float corr[16];    // offset 256: 64-byte aligned for one AVX-512 load
  int16_t sc[16];    // offset 320
  float d;
};

// A 32-element block (paired with Q8_0 activations): dot = d · dy · Σ q·qy, q signed.
struct alignas(32) Block32 {
  int8_t q[32];
  float d;
};

using quant::Fp16ToF32;

// --- K family -------------------------------------------------------------------------------

static inline void ScalarDecodeK(const quant::BlockQ4K& b, KBlock* out) {
  const float d = Fp16ToF32(b.d), dmin = Fp16ToF32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    quant::ScaleMinK4(b.scales, j, &sc, &m);
    out->sc[2 * j] = out->sc[2 * j + 1] = static_cast<int16_t>(sc);
    out->corr[2 * j] = out->corr[2 * j + 1] = dmin * static_cast<float>(m);
    const uint8_t* qs = b.qs + 32 * (j >> 1);
    for (int l = 0; l < 32; ++l) out->q[32 * j + l] = (j & 1) ? qs[l] >> 4 : qs[l] & 0xF;
  }
  out->d = d;
}

static inline void ScalarDecodeK(const quant::BlockQ5K& b, KBlock* out) {
  const float d = Fp16ToF32(b.d), dmin = Fp16ToF32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    quant::ScaleMinK4(b.scales, j, &sc, &m);
    out->sc[2 * j] = out->sc[2 * j + 1] = static_cast<int16_t>(sc);
    out->corr[2 * j] = out->corr[2 * j + 1] = dmin * static_cast<float>(m);
    const uint8_t* qs = b.qs + 32 * (j >> 1);
    for (int l = 0; l < 32; ++l) {
      const int low = (j & 1) ? qs[l] >> 4 : qs[l] & 0xF;
      out->q[32 * j + l] = static_cast<uint8_t>(low | ((b.qh[l] >> j) & 1) << 4);
    }
  }
  out->d = d;
}

static inline void ScalarDecodeK(const quant::BlockQ3K& b, KBlock* out) {
  const float d = Fp16ToF32(b.d);
  for (int j = 0; j < 16; ++j) {
    const int sc = quant::Q3KScale(b.scales, j);
    out->sc[j] = static_cast<int16_t>(sc);
    out->corr[j] = 4.0f * d * static_cast<float>(sc);  // q + 4 stored, 4·Σqy removed here
  }
  for (int e = 0; e < 256; ++e) out->q[e] = static_cast<uint8_t>(quant::Q3KQuant(b, e) + 4);
  out->d = d;
}

static inline void ScalarDecodeK(const quant::BlockQ6K& b, KBlock* out) {
  const float d = Fp16ToF32(b.d);
  for (int j = 0; j < 16; ++j) {
    out->sc[j] = b.scales[j];
    out->corr[j] = 32.0f * d * static_cast<float>(b.scales[j]);  // q + 32 stored
  }
  for (int e = 0; e < 256; ++e) out->q[e] = static_cast<uint8_t>(quant::Q6KQuant(b, e) + 32);
  out->d = d;
}

static inline void ScalarDecodeK(const quant::BlockQ2K& b, KBlock* out) {
  const float d = Fp16ToF32(b.d), dmin = Fp16ToF32(b.dmin);
  for (int j = 0; j < 16; ++j) {
    out->sc[j] = b.scales[j] & 0xF;
    out->corr[j] = dmin * static_cast<float>(b.scales[j] >> 4);
  }
  for (int e = 0; e < 256; ++e) out->q[e] = static_cast<uint8_t>(quant::TwoBitField(b.qs, e));
  out->d = d;
}

static inline void ScalarDecodeK(const quant::BlockIQ4XS& b, KBlock* out) {
  for (int j = 0; j < 8; ++j) {
    out->sc[2 * j] = out->sc[2 * j + 1] = static_cast<int16_t>(quant::Iq4XsScale(b, j));
    out->corr[2 * j] = out->corr[2 * j + 1] = 0.0f;
    for (int r = 0; r < 32; ++r) {
      const int idx = quant::Nibble32(b.qs + 16 * j, r);
      out->q[32 * j + r] = static_cast<uint8_t>(quant::kIq4Codebook[idx]);
    }
  }
  out->d = Fp16ToF32(b.d);
}

// --- 32 family ------------------------------------------------------------------------------

static inline void ScalarDecode32(const quant::BlockQ8_0& b, Block32* out) {
  std::memcpy(out->q, b.qs, 32);
  out->d = Fp16ToF32(b.d);
}

static inline void ScalarDecode32(const quant::BlockQ4_0& b, Block32* out) {
  for (int j = 0; j < 32; ++j) out->q[j] = static_cast<int8_t>(quant::Nibble32(b.qs, j) - 8);
  out->d = Fp16ToF32(b.d);
}

static inline void ScalarDecode32(const quant::BlockIQ4NL& b, Block32* out) {
  for (int j = 0; j < 32; ++j) out->q[j] = quant::kIq4Codebook[quant::Nibble32(b.qs, j)];
  out->d = Fp16ToF32(b.d);
}

static inline void ScalarDecode32(const quant::BlockMXFP4& b, Block32* out) {
  for (int j = 0; j < 32; ++j) out->q[j] = quant::kMxfp4Doubled[quant::Nibble32(b.qs, j)];
  out->d = quant::E8M0ToF32Half(b.e);
}

// Traits: which block struct and family each supported weight type uses. kK: a 256-element
// K-family block (KBlock algebra); kSigned: q is signed int8 (the SIMD paths move the sign onto the
// activation); kMin: the correction term has its own factor dmin (Q4_K, Q5_K, Q2_K) instead of
// the block's d (Q3_K, Q6_K, whose corr is an integer multiple of d·sc); kFloat: F16/BF16/F32 rows
// against f32 activations.
enum class Family { kK, k32, kFloat };
template <Family kF, bool kS, bool kM = false>
struct FormatTraits {
  static constexpr Family kFamily = kF;
  static constexpr bool kK = kF == Family::kK, kSigned = kS, kMin = kM;
};
template <quant::GgmlType T>
struct Format;
// One line per format reads as a table.
// clang-format off
template <> struct Format<quant::GgmlType::kQ4_K> : FormatTraits<Family::kK, false, true> { using Block = quant::BlockQ4K; };
template <> struct Format<quant::GgmlType::kQ5_K> : FormatTraits<Family::kK, false, true> { using Block = quant::BlockQ5K; };
template <> struct Format<quant::GgmlType::kQ3_K> : FormatTraits<Family::kK, false> { using Block = quant::BlockQ3K; };
template <> struct Format<quant::GgmlType::kQ6_K> : FormatTraits<Family::kK, false> { using Block = quant::BlockQ6K; };
template <> struct Format<quant::GgmlType::kQ2_K> : FormatTraits<Family::kK, false, true> { using Block = quant::BlockQ2K; };
template <> struct Format<quant::GgmlType::kIQ4_XS> : FormatTraits<Family::kK, true> { using Block = quant::BlockIQ4XS; };
template <> struct Format<quant::GgmlType::kQ8_0> : FormatTraits<Family::k32, true> { using Block = quant::BlockQ8_0; };
template <> struct Format<quant::GgmlType::kQ4_0> : FormatTraits<Family::k32, true> { using Block = quant::BlockQ4_0; };
template <> struct Format<quant::GgmlType::kIQ4_NL> : FormatTraits<Family::k32, true> { using Block = quant::BlockIQ4NL; };
template <> struct Format<quant::GgmlType::kMXFP4> : FormatTraits<Family::k32, true> { using Block = quant::BlockMXFP4; };
template <> struct Format<quant::GgmlType::kF16> : FormatTraits<Family::kFloat, true> {};
template <> struct Format<quant::GgmlType::kBF16> : FormatTraits<Family::kFloat, true> {};
template <> struct Format<quant::GgmlType::kF32> : FormatTraits<Family::kFloat, true> {};
// clang-format on

// Bytes of one weight of a kFloat format.
template <quant::GgmlType T>
inline constexpr int64_t kFloatBytes = T == quant::GgmlType::kF32 ? 4 : 2;

// f32 value of weight i of an F16 / BF16 / F32 row.
template <quant::GgmlType T>
static inline float FloatWeight(const uint8_t* row, int64_t i) {
  if constexpr (T == quant::GgmlType::kF32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (T == quant::GgmlType::kF16) {
    return quant::Fp16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return quant::Bf16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
  }
}

// Calls F::template Make<T>() for the supported type `type`, returning its DotFn, or nullptr.
template <typename Maker>
static inline auto DispatchFormat(quant::GgmlType type) -> decltype(Maker::template Make<quant::GgmlType::kQ4_K>()) {
  using quant::GgmlType;
  // clang-format off
  switch (type) {
    case GgmlType::kQ4_K: return Maker::template Make<GgmlType::kQ4_K>();
    case GgmlType::kQ3_K: return Maker::template Make<GgmlType::kQ3_K>();
    case GgmlType::kQ8_0: return Maker::template Make<GgmlType::kQ8_0>();
    case GgmlType::kQ6_K: return Maker::template Make<GgmlType::kQ6_K>();
    case GgmlType::kQ5_K: return Maker::template Make<GgmlType::kQ5_K>();
    case GgmlType::kQ2_K: return Maker::template Make<GgmlType::kQ2_K>();
    case GgmlType::kIQ4_XS: return Maker::template Make<GgmlType::kIQ4_XS>();
    case GgmlType::kQ4_0: return Maker::template Make<GgmlType::kQ4_0>();
    case GgmlType::kIQ4_NL: return Maker::template Make<GgmlType::kIQ4_NL>();
    case GgmlType::kMXFP4: return Maker::template Make<GgmlType::kMXFP4>();
    case GgmlType::kF16: return Maker::template Make<GgmlType::kF16>();
    case GgmlType::kBF16: return Maker::template Make<GgmlType::kBF16>();
    case GgmlType::kF32: return Maker::template Make<GgmlType::kF32>();
    default: return nullptr;
  }
  // clang-format on
}

}  // namespace
}  // namespace tandem::experts
