// Internal to experts/kernels_avx2.cc and kernels_avx512.cc (both compiled with at least
// -mavx2 -mfma -mf16c): AVX2 decoders that fill kernel_blocks.h's KBlock / a 32-byte register with
// exactly the bytes the scalar decoders produce. Internal linkage, as in kernel_blocks.h.
#pragma once

#include <immintrin.h>

#include <array>
#include <utility>

#include "experts/kernel_blocks.h"
#include "experts/kernels.h"

namespace tandem::experts {
namespace {

static inline float F16(uint16_t h) { return _cvtsh_ss(h); }

static inline __m256i Low4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
static inline __m256i High4(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
static inline __m256i Bits(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8(static_cast<char>(mask)));
}
static inline __m256i LoadU(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
static inline void Store(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }

// Generic: the scalar decoder (formats without an AVX2 decoder of their own).
template <typename B>
static inline void DecodeK(const B& b, KBlock* out) { ScalarDecodeK(b, out); }

static inline void Q4KScales(const uint8_t* scales, float d, float dmin, KBlock* out) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    quant::ScaleMinK4(scales, j, &sc, &m);
    out->sc[2 * j] = out->sc[2 * j + 1] = static_cast<int16_t>(sc);
    out->corr[2 * j] = out->corr[2 * j + 1] = dmin * static_cast<float>(m);
  }
  out->d = d;
}

static inline void DecodeK(const quant::BlockQ4K& b, KBlock* out) {
  for (int k = 0; k < 4; ++k) {
    const __m256i v = LoadU(b.qs + 32 * k);
    Store(out->q + 64 * k, Low4(v));
    Store(out->q + 64 * k + 32, High4(v));
  }
  Q4KScales(b.scales, F16(b.d), F16(b.dmin), out);
}

static inline void DecodeK(const quant::BlockQ5K& b, KBlock* out) {
  const __m256i qh = LoadU(b.qh);
  for (int k = 0; k < 4; ++k) {
    const __m256i v = LoadU(b.qs + 32 * k);
    const __m256i h_lo = _mm256_slli_epi16(Bits(qh, 2 * k, 1), 4);
    const __m256i h_hi = _mm256_slli_epi16(Bits(qh, 2 * k + 1, 1), 4);
    Store(out->q + 64 * k, _mm256_or_si256(Low4(v), h_lo));
    Store(out->q + 64 * k + 32, _mm256_or_si256(High4(v), h_hi));
  }
  Q4KScales(b.scales, F16(b.d), F16(b.dmin), out);
}

static inline void DecodeK(const quant::BlockQ3K& b, KBlock* out) {
  const __m256i hmask = LoadU(b.hmask);
  for (int h = 0; h < 2; ++h) {
    const __m256i v = LoadU(b.qs + 32 * h);
    for (int s = 0; s < 4; ++s) {
      const __m256i low2 = Bits(v, 2 * s, 3);
      const __m256i high = _mm256_slli_epi16(Bits(hmask, 4 * h + s, 1), 2);
      Store(out->q + 128 * h + 32 * s, _mm256_or_si256(low2, high));  // q + 4
    }
  }
  const float d = F16(b.d);
  for (int j = 0; j < 16; ++j) {
    const int sc = quant::Q3KScale(b.scales, j);
    out->sc[j] = static_cast<int16_t>(sc);
    out->corr[j] = 4.0f * d * static_cast<float>(sc);
  }
  out->d = d;
}

static inline void DecodeK(const quant::BlockQ6K& b, KBlock* out) {
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = LoadU(b.ql + 64 * h), ql1 = LoadU(b.ql + 64 * h + 32);
    const __m256i qh = LoadU(b.qh + 32 * h);
    uint8_t* q = out->q + 128 * h;
    Store(q, _mm256_or_si256(Low4(ql0), _mm256_slli_epi16(Bits(qh, 0, 3), 4)));
    Store(q + 32, _mm256_or_si256(Low4(ql1), _mm256_slli_epi16(Bits(qh, 2, 3), 4)));
    Store(q + 64, _mm256_or_si256(High4(ql0), _mm256_slli_epi16(Bits(qh, 4, 3), 4)));
    Store(q + 96, _mm256_or_si256(High4(ql1), _mm256_slli_epi16(Bits(qh, 6, 3), 4)));
  }
  const float d = F16(b.d);
  for (int j = 0; j < 16; ++j) {
    out->sc[j] = b.scales[j];
    out->corr[j] = 32.0f * d * static_cast<float>(b.scales[j]);
  }
  out->d = d;
}

static inline void DecodeK(const quant::BlockQ2K& b, KBlock* out) {
  for (int h = 0; h < 2; ++h) {
    const __m256i v = LoadU(b.qs + 32 * h);
    for (int s = 0; s < 4; ++s) Store(out->q + 128 * h + 32 * s, Bits(v, 2 * s, 3));
  }
  const float dmin = F16(b.dmin);
  for (int j = 0; j < 16; ++j) {
    out->sc[j] = b.scales[j] & 0xF;
    out->corr[j] = dmin * static_cast<float>(b.scales[j] >> 4);
  }
  out->d = F16(b.d);
}

static inline __m128i Iq4Table() {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4Codebook));
}

static inline void DecodeK(const quant::BlockIQ4XS& b, KBlock* out) {
  const __m128i table = Iq4Table();
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int j = 0; j < 8; ++j) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * j));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(v, mask));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), mask));
    _mm_store_si128(reinterpret_cast<__m128i*>(out->q + 32 * j), lo);
    _mm_store_si128(reinterpret_cast<__m128i*>(out->q + 32 * j + 16), hi);
    out->sc[2 * j] = out->sc[2 * j + 1] = static_cast<int16_t>(quant::Iq4XsScale(b, j));
    out->corr[2 * j] = out->corr[2 * j + 1] = 0.0f;
  }
  out->d = F16(b.d);
}

// 32-element blocks straight into a register of 32 signed bytes, plus the block's weight scale.
static inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
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
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kMxfp4Doubled));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), Nibbles32(b.qs));
}

static inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Kernel<T, N>::Run for N = 1..8 activation rows, chosen by n_act at run time.
using RowsFn = void (*)(const uint8_t*, int64_t, int, int64_t, const uint8_t* const*, float*,
                        int64_t);
template <template <quant::GgmlType, int> class Kernel, quant::GgmlType T, size_t... I>
constexpr std::array<RowsFn, sizeof...(I)> RowsTable(std::index_sequence<I...>) {
  return {&Kernel<T, static_cast<int>(I) + 1>::Run...};
}

template <template <quant::GgmlType, int> class Kernel, quant::GgmlType T>
static inline void DispatchRows(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                                const uint8_t* const* act, int n_act, float* out,
                                int64_t out_stride) {
  static constexpr auto kTable =
      RowsTable<Kernel, T>(std::make_index_sequence<kMaxKernelRows>());
  kTable[n_act - 1](w, w_stride, n_wrows, k, act, out, out_stride);
}

}  // namespace
}  // namespace tandem::experts
