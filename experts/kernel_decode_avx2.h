// Internal to experts/kernels_avx2.cc and kernels_avx512.cc (both compiled with at least
// -mavx2 -mfma -mf16c): per-format AVX2 decoders that the fused kernels (kernel_simd.h) call one
// 32-element run at a time, straight from the GGUF bytes into a register, never through memory.
// Each yields exactly the values of kernel_blocks.h's scalar decoders (q, or q plus its offset),
// and the block's per-16-element integer scales and corrections. Internal linkage, as in
// kernel_blocks.h.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "experts/kernel_blocks.h"

namespace tandem::experts {
namespace {

static inline float F16(uint16_t h) { return _cvtsh_ss(h); }

static inline __m256i LoadU(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
static inline __m128i LoadU128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
static inline __m256i Low4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
static inline __m256i High4(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
// (v >> shift) & mask in every byte (shift <= 7, so no bits cross from the neighbouring byte).
static inline __m256i Bits(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8(static_cast<char>(mask)));
}

// A block's integer scales, one per 16 elements, and what the kernel subtracts per 16 elements
// (corr16 · bsums of the Q8_K activation), with their float factors:
//   dot = y.d · (d · Σ_j sc16_j Σ_{e∈j} q_e·y_e − dcorr · Σ_j corr16_j · bsums_j)
// where dcorr is dmin for Format::kMin types and d otherwise.
struct KScales {
  __m256i sc16;
  __m256i corr16;
  float d, dmin;
};

static inline __m128i Iq4Table() { return LoadU128(quant::kIq4Codebook); }

// Q4_K / Q5_K: the 12 packed bytes as [sc0..sc7, m0..m7] (the bit layout of ScaleMinK4), in
// general-purpose registers: the kernels are bound by the vector pipes, so this stays off them
// (a pshufb/shift version measured 6% slower for Q4_K on 2026-11-29, experts_bench hot/1).
static inline __m128i ScaleMinBytesK4(const uint8_t* s) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3F, m_lo = w[1] & 0x3F3F3F3F;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0F) | ((w[0] >> 6) & 0x03030303) << 4;
  const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0F) | ((w[1] >> 6) & 0x03030303) << 4;
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}
static inline KScales ScalesK4(const uint8_t* scales, uint16_t d, uint16_t dmin) {
  const __m128i x = ScaleMinBytesK4(scales);  // one scale and min per 32: each used twice
  return {_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(x, x)),
          _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(x, x)), F16(d), F16(dmin)};
}

// KSource<T>(block).Run(r): elements 32r..32r+31 as bytes; Scales(): the block's KScales.
template <quant::GgmlType T>
struct KSource;

template <>
struct KSource<quant::GgmlType::kQ4_K> {
  static constexpr bool kStored = false;
  const quant::BlockQ4K& b;
  __m256i Run(int r) const {
    const __m256i v = LoadU(b.qs + 32 * (r >> 1));
    return (r & 1) ? High4(v) : Low4(v);
  }
  KScales Scales() const { return ScalesK4(b.scales, b.d, b.dmin); }
};

template <>
struct KSource<quant::GgmlType::kQ5_K> {
  static constexpr bool kStored = false;
  const quant::BlockQ5K& b;
  __m256i Run(int r) const {
    const __m256i v = LoadU(b.qs + 32 * (r >> 1));
    const __m256i high = _mm256_slli_epi16(Bits(LoadU(b.qh), r, 1), 4);
    return _mm256_or_si256((r & 1) ? High4(v) : Low4(v), high);
  }
  KScales Scales() const { return ScalesK4(b.scales, b.d, b.dmin); }
};

template <>
struct KSource<quant::GgmlType::kQ3_K> {  // q + 4 (0..7)
  static constexpr bool kStored = false;
  const quant::BlockQ3K& b;
  __m256i Run(int r) const {
    const __m256i low2 = Bits(LoadU(b.qs + 32 * (r >> 2)), 2 * (r & 3), 3);
    return _mm256_or_si256(low2, _mm256_slli_epi16(Bits(LoadU(b.hmask), r, 1), 2));
  }
  KScales Scales() const {
    // Low nibbles: bytes 0..7 (scales 0..7 low, 8..15 high); top two bits: byte 8 + j%4 at bit
    // pair j/4, i.e. the u32 of bytes 8..11 shifted right by 2·(j/4) in 32-bit group j/4.
    const __m128i s8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i low4 =
        _mm_unpacklo_epi64(_mm_and_si128(s8, nib), _mm_and_si128(_mm_srli_epi16(s8, 4), nib));
    uint32_t top;
    std::memcpy(&top, b.scales + 8, 4);
    const __m128i high2 = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)),
        _mm_set1_epi8(3));
    const __m128i sc8 =
        _mm_sub_epi8(_mm_or_si128(low4, _mm_slli_epi16(high2, 4)), _mm_set1_epi8(32));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    return {sc16, _mm256_slli_epi16(sc16, 2), F16(b.d), 0.0f};  // 4·Σ y removed per q + 4
  }
};

template <>
struct KSource<quant::GgmlType::kQ6_K> {  // q + 32 (0..63)
  static constexpr bool kStored = false;
  const quant::BlockQ6K& b;
  __m256i Run(int r) const {
    const int h = r >> 2, g = r & 3;
    const __m256i v = LoadU(b.ql + 64 * h + 32 * (g & 1));
    const __m256i high = _mm256_slli_epi16(Bits(LoadU(b.qh + 32 * h), 2 * g, 3), 4);
    return _mm256_or_si256((g >> 1) ? High4(v) : Low4(v), high);
  }
  KScales Scales() const {
    const __m256i sc16 = _mm256_cvtepi8_epi16(LoadU128(b.scales));
    return {sc16, _mm256_slli_epi16(sc16, 5), F16(b.d), 0.0f};  // 32·Σ y removed per q + 32
  }
};

template <>
struct KSource<quant::GgmlType::kQ2_K> {
  static constexpr bool kStored = false;
  const quant::BlockQ2K& b;
  __m256i Run(int r) const { return Bits(LoadU(b.qs + 32 * (r >> 2)), 2 * (r & 3), 3); }
  KScales Scales() const {
    const __m128i s = LoadU128(b.scales), nib = _mm_set1_epi8(0x0F);
    return {_mm256_cvtepu8_epi16(_mm_and_si128(s, nib)),
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), nib)), F16(b.d), F16(b.dmin)};
  }
};

template <>
struct KSource<quant::GgmlType::kIQ4_XS> {  // signed codebook values
  static constexpr bool kStored = false;
  const quant::BlockIQ4XS& b;
  __m256i Run(int r) const {
    const __m128i v = LoadU128(b.qs + 16 * r), nib = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(Iq4Table(), _mm_and_si128(v, nib));
    const __m128i hi = _mm_shuffle_epi8(Iq4Table(), _mm_and_si128(_mm_srli_epi16(v, 4), nib));
    return _mm256_set_m128i(hi, lo);
  }
  KScales Scales() const {
    alignas(32) int16_t sc[16];
    for (int j = 0; j < 8; ++j)
      sc[2 * j] = sc[2 * j + 1] = static_cast<int16_t>(quant::Iq4XsScale(b, j));
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(sc)), _mm256_setzero_si256(),
            F16(b.d), 0.0f};
  }
};

// A K-family block decoded once for the tiled path: the runs KSource yields, and its KScales.
struct alignas(64) DecodedK {
  uint8_t q[256];
  int16_t sc16[16];
  int16_t corr16[16];
  float d, dmin;
};
static_assert(sizeof(DecodedK) == 384);

template <quant::GgmlType T>
static inline void StoreDecoded(const KSource<T>& src, DecodedK* out) {
  for (int r = 0; r < 8; ++r) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->q + 32 * r), src.Run(r));
  }
  const KScales s = src.Scales();
  _mm256_store_si256(reinterpret_cast<__m256i*>(out->sc16), s.sc16);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out->corr16), s.corr16);
  out->d = s.d;
  out->dmin = s.dmin;
}

struct StoredK {
  static constexpr bool kStored = true;
  const DecodedK& t;
  __m256i Run(int r) const {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(t.q + 32 * r));
  }
  KScales Scales() const {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(t.sc16)),
            _mm256_load_si256(reinterpret_cast<const __m256i*>(t.corr16)), t.d, t.dmin};
  }
};

// 32-element blocks straight into a register of 32 signed bytes, plus the block's weight scale.
static inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i v = LoadU128(qs), mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}
static inline __m256i Decode32(const quant::BlockQ8_0& b, float* d) {
  *d = F16(b.d);
  return LoadU(b.qs);
}
static inline __m256i Decode32(const quant::BlockQ4_0& b, float* d) {
  *d = F16(b.d);
  return _mm256_sub_epi8(Nibbles32(b.qs), _mm256_set1_epi8(8));
}
static inline __m256i Decode32(const quant::BlockIQ4NL& b, float* d) {
  *d = F16(b.d);
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(Iq4Table()), Nibbles32(b.qs));
}
static inline __m256i Decode32(const quant::BlockMXFP4& b, float* d) {
  *d = quant::E8M0ToF32Half(b.e);
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(LoadU128(quant::kMxfp4Doubled)),
                             Nibbles32(b.qs));
}

static inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest of v's lanes (exact: max is order-free for numbers; v holds no NaN).
static inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

}  // namespace
}  // namespace tandem::experts
