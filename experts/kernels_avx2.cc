// AVX2 kernels (compiled with -mavx2 -mfma -mf16c; called only after CpuSupports(kAvx2)).
// The loops are kernel_simd.h's; this policy gives them 32-byte chunks (one 32-element run),
// maddubs (u8 × s8 → s16 pairs) then madd with the run's per-16 scales (→ s32) for K blocks,
// maddubs + madd with ones for 32-element blocks, and F16C / a 16-bit shift for F16 / BF16.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "experts/exp_avx2.h"
#include "experts/kernel_avx2_rows.h"
#include "experts/kernel_rows8_avx2.h"
#include "experts/kernel_simd.h"
#include "experts/kernels_internal.h"

namespace tandem::experts {
namespace {

struct Avx2Policy {
  using IVec = __m256i;
  using FVec = __m256;
  static constexpr int kChunkBytes = 32, kChunks = 8, kFloats = 8;
  // Q4_K at 1..8 rows: int16 sums across chunks, one madd per four chunks (kernel_avx2_rows.h).
  template <quant::GgmlType T, int N>
  static constexpr bool kOwnKernel = T == quant::GgmlType::kQ4_K;
  template <quant::GgmlType T, int N>
  using OwnKernel = Avx2KRows<T, N>;

  static IVec ZeroI() { return _mm256_setzero_si256(); }
  static FVec ZeroF() { return _mm256_setzero_ps(); }
  template <class Src>
  static IVec Chunk(const Src& src, int c) {
    return src.Run(c);
  }

  // Scales as (sc_j, sc_j) int32 pairs: lo = [S0..S3 | S8..S11], hi = [S4..S7 | S12..S15]
  // (unpack works within 128-bit lanes); run c needs S_2c in its low lane and S_2c+1 in its high.
  struct Scales {
    __m256i lo, hi;
  };
  static Scales PrepareScales(__m256i sc16) {
    return {_mm256_unpacklo_epi16(sc16, sc16), _mm256_unpackhi_epi16(sc16, sc16)};
  }
  static IVec ChunkScale(const Scales& s, int c) {
    const int p = (c & 1) * 2 + (c & 4);
    return _mm256_permutevar8x32_epi32((c & 2) ? s.hi : s.lo,
                                       _mm256_setr_epi32(p, p, p, p, p + 1, p + 1, p + 1, p + 1));
  }
  static IVec LoadY(const int8_t* p) { return LoadU(p); }
  static IVec Abs(IVec w) { return _mm256_sign_epi8(w, w); }
  static IVec SignOf(IVec y, IVec w) { return _mm256_sign_epi8(y, w); }
  static IVec DotScaled(IVec acc, IVec uq, IVec y, IVec scale) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(uq, y), scale));
  }
  static IVec AddI(IVec a, IVec b) { return _mm256_add_epi32(a, b); }
  static IVec SubCorr(IVec total, __m256i corr) { return _mm256_sub_epi32(total, corr); }
  static FVec FmaScalar(IVec isum, float s, FVec acc) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(s), acc);
  }
  static float Reduce(FVec v) { return HorizontalSum(v); }
  static __m256i Dot32(__m256i uw, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(uw, y), _mm256_set1_epi16(1));
  }

  template <quant::GgmlType T>
  static FVec LoadWeights(const uint8_t* row, int64_t i) {
    if constexpr (T == quant::GgmlType::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    const __m128i v = LoadU128(reinterpret_cast<const uint16_t*>(row) + i);
    if constexpr (T == quant::GgmlType::kF16) {
      return _mm256_cvtph_ps(v);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    }
  }
  static FVec LoadF(const float* p) { return _mm256_loadu_ps(p); }
  static FVec Fma(FVec a, FVec b, FVec c) { return _mm256_fmadd_ps(a, b, c); }
  static FVec AddF(FVec a, FVec b) { return _mm256_add_ps(a, b); }
};

}  // namespace

DotFn GetAvx2Kernel(quant::GgmlType type) { return DispatchFormat<SimdMaker<Avx2Policy>>(type); }

DotFn GetAvx2Rows8Kernel(quant::GgmlType type) {
  switch (type) {
    case quant::GgmlType::kQ4_K:
      return &DotRows8<Rows8Avx2Q4K>;
    case quant::GgmlType::kQ3_K:
      return &DotRows8<Rows8Avx2Q3K>;
    default:
      return nullptr;
  }
}

namespace {

// q[0..3] (32 int32, in element order) clamped to [-127, 127] and stored as 32 int8.
void StoreClamped127(const __m256i* q, int8_t* dst) {
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i c[4];
  for (int i = 0; i < 4; ++i) c[i] = _mm256_min_epi32(_mm256_max_epi32(q[i], lo), hi);
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  // packs interleave 128-bit lanes; this dword order puts the 32 bytes back in element order.
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(dst),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

}  // namespace

void QuantizeQ8KAvx2(const float* x, quant::BlockQ8K* out, int64_t n_blocks) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < n_blocks; ++b, x += quant::kQK_K) {
    quant::BlockQ8K& block = out[b];
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int e = 0; e < quant::kQK_K; e += 8) {
      const __m256 v = _mm256_loadu_ps(x + e);
      m = _mm256_max_ps(m, _mm256_and_ps(v, magnitude));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (!_mm256_testz_ps(nan, nan)) {  // the scalar code skips NaNs in its search for the maximum
      quant::QuantizeBlocks(x, &block, 1);
      continue;
    }
    const float amax = HorizontalMax(m);
    if (amax == 0.0f) {
      block.d = 0.0f;
      std::memset(block.qs, 0, sizeof(block.qs));
      std::memset(block.bsums, 0, sizeof(block.bsums));
      continue;
    }
    // The scalar code takes the first element of largest magnitude, with its sign (without NaNs,
    // amax is some |x[e]|, so the search ends inside the block).
    int first = 0;
    while (std::fabs(x[first]) != amax) ++first;
    const float inverse_scale = -127.0f / x[first];
    const __m256 s = _mm256_set1_ps(inverse_scale);
    for (int e = 0; e < quant::kQK_K; e += 32) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        // cvtps rounds to nearest, ties to even (the default MXCSR mode), as std::nearbyint does.
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(s, _mm256_loadu_ps(x + e + 8 * i)));
      }
      StoreClamped127(q, block.qs + e);
    }
    block.d = 1.0f / inverse_scale;
    for (int k = 0; k < quant::kQK_K / 16; ++k) {
      const __m256i v = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block.qs + 16 * k)));
      const __m256i pairs = _mm256_madd_epi16(v, _mm256_set1_epi16(1));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
      s4 = _mm_hadd_epi32(s4, s4);
      s4 = _mm_hadd_epi32(s4, s4);
      block.bsums[k] = static_cast<int16_t>(_mm_cvtsi128_si32(s4));
    }
  }
}

void SiluMulAvx2(float* h, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(h + i);
    // e^-x with -x clamped to [-87, 88]: past those ends silu(x) is x to the last bit, or within
    // 1e-36 of 0. A NaN x gets a finite exponent (max and min return their second operand) and
    // stays NaN through the division.
    const __m256 t =
        _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), _mm256_set1_ps(-87.0f)),
                      _mm256_set1_ps(88.0f));
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), ExpAvx2(t)));
    _mm256_storeu_ps(h + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  SiluMulScalar(h + i, u + i, n - i);
}

void QuantizeQ8_0Avx2(const float* x, quant::BlockQ8_0* out, int64_t n_blocks) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  for (int64_t b = 0; b < n_blocks; ++b, x += quant::kQK) {
    // max(|x|, m) keeps m where x is NaN, as std::fmax does.
    __m256 m = _mm256_setzero_ps();
    for (int e = 0; e < quant::kQK; e += 8) {
      m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + e), magnitude), m);
    }
    // The scale as the scalar code computes it: rounded to f16 first.
    out[b].d = quant::F32ToFp16(HorizontalMax(m) / 127.0f);
    const float d = quant::Fp16ToF32(out[b].d);
    const __m256 inverse = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      // std::round: half away from zero. p - trunc(p) is exact, so its magnitude decides.
      const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), inverse);
      const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 away =
          _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(p, t), magnitude), half, _CMP_GE_OQ);
      const __m256 step = _mm256_and_ps(away, _mm256_or_ps(one, _mm256_and_ps(p, sign)));
      q[i] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
    }
    StoreClamped127(q, out[b].qs);
  }
}

}  // namespace tandem::experts
