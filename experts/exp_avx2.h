// Internal to experts/ files compiled with AVX2 and FMA (kernels_avx2.cc, attention_avx2.cc): an
// 8-wide e^x. Internal linkage, like the other kernel headers, because each file has its own -m
// flags.
#pragma once

#include <immintrin.h>

namespace tandem::experts {
namespace {

// e^t for t in [-87, 88] (so the result is a normal float): t = n·ln2 + r with n = round(t·log2 e)
// and |r| ≤ ln2/2 (ln2 in two parts, so r is exact to a few ulp), e^r by Cephes' degree-6
// polynomial, and 2^n built in the exponent field.
inline __m256 ExpAvx2(__m256 t) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), t);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 er = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i pow2n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(er, _mm256_castsi256_ps(pow2n));
}

}  // namespace
}  // namespace tandem::experts
