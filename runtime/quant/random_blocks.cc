// Random block synthesis. Every byte first comes from a splitmix64 stream (8 bytes per step), which
// makes all quant bits uniform; then each block's scale fields are overwritten with values derived
// from the random bits they already hold, so no extra generator calls are needed per block.
// Scale magnitudes are set from the analytic mean square of the uniform quants, so the decoded RMS
// matches the target in expectation.
#include "runtime/quant/random_blocks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/quant/blocks.h"

namespace tandem::quant {
namespace {

[[noreturn]] void Fail(const char* what, GgmlType type, float target_rms) {
  std::fprintf(stderr, "RandomizeBlocks(%s, target_rms=%g): %s\n", GetTypeInfo(type).name,
               static_cast<double>(target_rms), what);
  std::abort();
}

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64: a Weyl sequence through a 64-bit mixer. The seed itself is mixed first so that
// nearby seeds give unrelated streams.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(Mix64(seed)) {}
  uint64_t Next() { return Mix64(state_ += 0x9E3779B97F4A7C15ull); }

 private:
  uint64_t state_;
};

void FillBytes(SplitMix64& rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.Next();
    std::memcpy(p + i, &r, 8);
  }
  if (i < n) {
    const uint64_t r = rng.Next();
    std::memcpy(p + i, &r, n - i);
  }
}

// Mean of k² over the integers lo..hi, each equally likely.
constexpr double MeanSquare(int lo, int hi) {
  double sum = 0;
  for (int k = lo; k <= hi; ++k) sum += static_cast<double>(k) * k;
  return sum / (hi - lo + 1);
}

// Random int8 quants with −128 folded onto −127 (the quantisers never emit −128, and SIMD kernels
// may rely on that): 256 equally likely bytes, two of which land on −127.
constexpr double kMeanSquareInt8 = (MeanSquare(-127, 127) * 255 + 127.0 * 127.0) / 256;

double TableMeanSquare(const int8_t* table) {
  double sum = 0;
  for (int k = 0; k < 16; ++k) sum += static_cast<double>(table[k]) * table[k];
  return sum / 16;
}

// Scale codes are drawn as base | (random & mask), the upper half of their magnitude range (signed
// codes also get a random sign), like the scales a quantiser gives sub-blocks of similar spread.
constexpr int kQ2KCodeBase = 8, kQ2KCodeMask = 7;            // 8..15
constexpr int kK4CodeBase = 32, kK4CodeMask = 31;            // 32..63 (Q4_K, Q5_K)
constexpr int kQ6KCodeBase = 64, kQ6KCodeMask = 63;          // ±(64..127)
constexpr int kSigned6CodeBase = 16, kSigned6CodeMask = 15;  // ±(16..31) (Q3_K, IQ4_XS)

// Overwrites the scale fields of one block, given a block whose bytes are all random.
struct Q8_0Scales {
  uint16_t d;
  void operator()(BlockQ8_0& b) const {
    b.d = static_cast<uint16_t>(d | (b.d & 0x8000u));  // random sign: the block means cancel
    for (int8_t& q : b.qs) q = std::max<int8_t>(q, -127);
  }
};

struct Q4_0Scales {
  uint16_t d;
  void operator()(BlockQ4_0& b) const { b.d = static_cast<uint16_t>(d | (b.d & 0x8000u)); }
};

struct Q5_0Scales {
  uint16_t d;
  void operator()(BlockQ5_0& b) const { b.d = static_cast<uint16_t>(d | (b.d & 0x8000u)); }
};

struct Q4_1Scales {  // m = −(mid-grid)·d centres the block
  uint16_t d, m;
  void operator()(BlockQ4_1& b) const {
    b.d = d;
    b.m = m;
  }
};

struct Q5_1Scales {
  uint16_t d, m;
  void operator()(BlockQ5_1& b) const {
    b.d = d;
    b.m = m;
  }
};

struct IQ4NLScales {
  uint16_t d;
  void operator()(BlockIQ4NL& b) const { b.d = static_cast<uint16_t>(d | (b.d & 0x8000u)); }
};

struct MXFP4Scales {
  uint8_t e_low;   // exponent whose RMS is at or below the target
  int high_below;  // a random byte below this picks e_low + 1 instead
  void operator()(BlockMXFP4& b) const {
    b.e = static_cast<uint8_t>(e_low + (b.e < high_below ? 1 : 0));
  }
};

// Sub-block min = sub-block scale with dmin = mid-grid·d: each sub-block is centred on zero.
struct Q2KScales {
  uint16_t d, dmin;
  void operator()(BlockQ2K& b) const {
    for (uint8_t& s : b.scales) {
      const int code = kQ2KCodeBase | (s & kQ2KCodeMask);
      s = static_cast<uint8_t>(code | code << 4);
    }
    b.d = d;
    b.dmin = dmin;
  }
};

struct Q3KScales {
  uint16_t d;
  void operator()(BlockQ3K& b) const {
    // Bytes 0..7 give 16 random magnitudes (one nibble each), bytes 8..9 the 16 signs.
    const uint8_t* raw = b.scales;
    const int signs = raw[8] | raw[9] << 8;
    int biased[16];
    for (int j = 0; j < 16; ++j) {
      const int magnitude = kSigned6CodeBase | ((raw[j >> 1] >> (4 * (j & 1))) & kSigned6CodeMask);
      biased[j] = 32 + (((signs >> j) & 1) ? -magnitude : magnitude);
    }
    uint8_t packed[12] = {};
    for (int j = 0; j < 16; ++j) {
      packed[j & 7] |= static_cast<uint8_t>((biased[j] & 0xF) << (4 * (j >> 3)));
      packed[8 + (j & 3)] |= static_cast<uint8_t>((biased[j] >> 4) << (2 * (j >> 2)));
    }
    std::memcpy(b.scales, packed, sizeof(packed));
    b.d = d;
  }
};

template <typename Block>
struct K4Scales {  // Q4_K and Q5_K
  uint16_t d, dmin;
  void operator()(Block& b) const {
    int codes[8];
    for (int j = 0; j < 8; ++j) codes[j] = kK4CodeBase | (b.scales[j] & kK4CodeMask);
    PackScaleMinK4(codes, codes, b.scales);
    b.d = d;
    b.dmin = dmin;
  }
};

struct Q6KScales {
  uint16_t d;
  void operator()(BlockQ6K& b) const {
    for (int8_t& s : b.scales) {
      const int raw = static_cast<uint8_t>(s);
      const int magnitude = kQ6KCodeBase | (raw & kQ6KCodeMask);
      s = static_cast<int8_t>((raw & 0x80) ? -magnitude : magnitude);
    }
    b.d = d;
  }
};

struct Q8KScales {
  float d;
  void operator()(BlockQ8K& b) const {
    const bool negative = std::signbit(b.d);  // the random sign bit
    b.d = negative ? -d : d;
    for (int8_t& q : b.qs) q = std::max<int8_t>(q, -127);
    for (int k = 0; k < kQK_K / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b.qs[16 * k + i];
      b.bsums[k] = static_cast<int16_t>(sum);
    }
  }
};

struct IQ4XSScales {
  uint16_t d;
  void operator()(BlockIQ4XS& b) const {
    // scales_l gives 8 random magnitudes (one nibble each), the low byte of scales_h the signs.
    const int signs = b.scales_h & 0xFF;
    uint8_t low[4] = {};
    uint16_t high = 0;
    for (int j = 0; j < 8; ++j) {
      const int magnitude =
          kSigned6CodeBase | ((b.scales_l[j >> 1] >> (4 * (j & 1))) & kSigned6CodeMask);
      const int biased = 32 + (((signs >> j) & 1) ? -magnitude : magnitude);
      low[j >> 1] |= static_cast<uint8_t>((biased & 0xF) << (4 * (j & 1)));
      high = static_cast<uint16_t>(high | (biased >> 4) << (2 * j));
    }
    std::memcpy(b.scales_l, low, sizeof(low));
    b.scales_h = high;
    b.d = d;
  }
};

// Fills blocks chunk by chunk: random bytes, then the scale fix-up while the chunk is still in
// cache. Chunks are a multiple of 8 blocks, so every chunk is a multiple of 8 bytes and the byte
// stream does not depend on the chunking.
template <typename Block, typename FixScales>
void RandomizeTyped(const FixScales& fix_scales, uint64_t seed, void* dst, int64_t n_blocks) {
  constexpr int64_t kChunkBlocks = 8 * std::max<int64_t>(1, 2048 / sizeof(Block));
  SplitMix64 rng(seed);
  Block* blocks = static_cast<Block*>(dst);
  for (int64_t start = 0; start < n_blocks; start += kChunkBlocks) {
    const int64_t count = std::min(kChunkBlocks, n_blocks - start);
    FillBytes(rng, reinterpret_cast<uint8_t*>(blocks + start), count * sizeof(Block));
    for (int64_t i = start; i < start + count; ++i) fix_scales(blocks[i]);
  }
}

// kNormalLevels standard-normal quantiles at probabilities (k + 0.5) / kNormalLevels, rescaled to
// a mean square of exactly 1. Built once per process (about 50k erfc calls).
constexpr int kNormalLevels = 1024;

const std::array<float, kNormalLevels>& UnitNormalQuantiles() {
  static const std::array<float, kNormalLevels> table = [] {
    std::array<float, kNormalLevels> quantiles;
    double sum_squares = 0;
    for (int k = 0; k < kNormalLevels; ++k) {
      const double p = (k + 0.5) / kNormalLevels;
      double lo = -10, hi = 10;  // bisection on Φ(x) = erfc(−x/√2) / 2
      for (int iteration = 0; iteration < 50; ++iteration) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
      }
      quantiles[k] = static_cast<float>(0.5 * (lo + hi));
      sum_squares += quantiles[k] * quantiles[k];
    }
    const double rescale = 1.0 / std::sqrt(sum_squares / kNormalLevels);
    for (float& q : quantiles) q = static_cast<float>(q * rescale);
    return quantiles;
  }();
  return table;
}

// Plain floats: inverse-CDF sampling of a normal distribution with kNormalLevels levels, four
// values per 64 random bits. The levels are converted to the output type once, up front.
template <typename T, typename ConvertFn>
void RandomizeFloats(uint64_t seed, float target_rms, T* out, int64_t n, ConvertFn convert) {
  const std::array<float, kNormalLevels>& quantiles = UnitNormalQuantiles();
  T table[kNormalLevels];
  for (int k = 0; k < kNormalLevels; ++k) table[k] = convert(quantiles[k] * target_rms);
  SplitMix64 rng(seed);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint64_t r = rng.Next();
    for (int k = 0; k < 4; ++k) out[i + k] = table[(r >> (16 * k)) & (kNormalLevels - 1)];
  }
  if (i < n) {
    const uint64_t r = rng.Next();
    for (int k = 0; i < n; ++i, ++k) out[i] = table[(r >> (16 * k)) & (kNormalLevels - 1)];
  }
}

}  // namespace

void RandomizeBlocks(GgmlType type, uint64_t seed, float target_rms, void* dst, int64_t n_blocks) {
  if (!(target_rms > 0.0f) || !std::isfinite(target_rms)) {
    Fail("target_rms must be positive and finite", type, target_rms);
  }
  const double t = target_rms;
  // The f16 bits of a scale, which must stay finite.
  const auto f16 = [type, target_rms](double value) {
    const uint16_t bits = F32ToFp16(static_cast<float>(value));
    if ((bits & 0x7C00u) == 0x7C00u)
      Fail("the scale this RMS needs overflows f16", type, target_rms);
    return bits;
  };
  switch (type) {
    case GgmlType::kF32:
      return RandomizeFloats(seed, target_rms, static_cast<float*>(dst), n_blocks,
                             [](float v) { return v; });
    case GgmlType::kF16:
      return RandomizeFloats(seed, target_rms, static_cast<uint16_t*>(dst), n_blocks,
                             [](float v) { return F32ToFp16(v); });
    case GgmlType::kBF16:
      return RandomizeFloats(seed, target_rms, static_cast<uint16_t*>(dst), n_blocks,
                             [](float v) { return F32ToBf16(v); });
    case GgmlType::kQ8_0:
      return RandomizeTyped<BlockQ8_0>(Q8_0Scales{f16(t / std::sqrt(kMeanSquareInt8))}, seed, dst,
                                       n_blocks);
    case GgmlType::kQ4_0:
      return RandomizeTyped<BlockQ4_0>(Q4_0Scales{f16(t / std::sqrt(MeanSquare(-8, 7)))}, seed, dst,
                                       n_blocks);
    case GgmlType::kQ5_0:
      return RandomizeTyped<BlockQ5_0>(Q5_0Scales{f16(t / std::sqrt(MeanSquare(-16, 15)))}, seed,
                                       dst, n_blocks);
    case GgmlType::kQ4_1: {
      // Centred on the grid's midpoint 7.5, the quants have mean square MeanSquare(0, 15) − 7.5².
      const double d = t / std::sqrt(MeanSquare(0, 15) - 7.5 * 7.5);
      return RandomizeTyped<BlockQ4_1>(Q4_1Scales{f16(d), f16(-7.5 * d)}, seed, dst, n_blocks);
    }
    case GgmlType::kQ5_1: {
      const double d = t / std::sqrt(MeanSquare(0, 31) - 15.5 * 15.5);
      return RandomizeTyped<BlockQ5_1>(Q5_1Scales{f16(d), f16(-15.5 * d)}, seed, dst, n_blocks);
    }
    case GgmlType::kIQ4_NL:
      return RandomizeTyped<BlockIQ4NL>(
          IQ4NLScales{f16(t / std::sqrt(TableMeanSquare(kIq4Codebook)))}, seed, dst, n_blocks);
    case GgmlType::kMXFP4: {
      // E8M0 only gives powers of two: mix the exponent just below the target with the one above
      // (four times the mean square) in the proportion that makes the mean square exact.
      const double table_mean_square = TableMeanSquare(kMxfp4Doubled);
      const double exact_exponent = std::log2(t / std::sqrt(table_mean_square));
      const int e_low = static_cast<int>(std::floor(exact_exponent)) + 128;
      if (e_low < 2 || e_low > 253) Fail("the RMS is outside the E8M0 range", type, target_rms);
      const double low_rms = std::sqrt(table_mean_square) * std::ldexp(1.0, e_low - 128);
      const double p_high = (t * t / (low_rms * low_rms) - 1.0) / 3.0;
      const int high_below = static_cast<int>(std::lround(p_high * 256));
      return RandomizeTyped<BlockMXFP4>(MXFP4Scales{static_cast<uint8_t>(e_low), high_below}, seed,
                                        dst, n_blocks);
    }
    case GgmlType::kQ2_K: {
      const double d = t / std::sqrt(MeanSquare(kQ2KCodeBase, kQ2KCodeBase + kQ2KCodeMask) *
                                     (MeanSquare(0, 3) - 1.5 * 1.5));
      return RandomizeTyped<BlockQ2K>(Q2KScales{f16(d), f16(1.5 * d)}, seed, dst, n_blocks);
    }
    case GgmlType::kQ3_K: {
      const double d =
          t / std::sqrt(MeanSquare(kSigned6CodeBase, kSigned6CodeBase + kSigned6CodeMask) *
                        MeanSquare(-4, 3));
      return RandomizeTyped<BlockQ3K>(Q3KScales{f16(d)}, seed, dst, n_blocks);
    }
    case GgmlType::kQ4_K: {
      const double d = t / std::sqrt(MeanSquare(kK4CodeBase, kK4CodeBase + kK4CodeMask) *
                                     (MeanSquare(0, 15) - 7.5 * 7.5));
      return RandomizeTyped<BlockQ4K>(K4Scales<BlockQ4K>{f16(d), f16(7.5 * d)}, seed, dst,
                                      n_blocks);
    }
    case GgmlType::kQ5_K: {
      const double d = t / std::sqrt(MeanSquare(kK4CodeBase, kK4CodeBase + kK4CodeMask) *
                                     (MeanSquare(0, 31) - 15.5 * 15.5));
      return RandomizeTyped<BlockQ5K>(K4Scales<BlockQ5K>{f16(d), f16(15.5 * d)}, seed, dst,
                                      n_blocks);
    }
    case GgmlType::kQ6_K: {
      const double d = t / std::sqrt(MeanSquare(kQ6KCodeBase, kQ6KCodeBase + kQ6KCodeMask) *
                                     MeanSquare(-32, 31));
      return RandomizeTyped<BlockQ6K>(Q6KScales{f16(d)}, seed, dst, n_blocks);
    }
    case GgmlType::kQ8_K:
      return RandomizeTyped<BlockQ8K>(Q8KScales{static_cast<float>(t / std::sqrt(kMeanSquareInt8))},
                                      seed, dst, n_blocks);
    case GgmlType::kIQ4_XS: {
      const double d =
          t / std::sqrt(MeanSquare(kSigned6CodeBase, kSigned6CodeBase + kSigned6CodeMask) *
                        TableMeanSquare(kIq4Codebook));
      return RandomizeTyped<BlockIQ4XS>(IQ4XSScales{f16(d)}, seed, dst, n_blocks);
    }
    default:
      Fail("no codec for this type", type, target_rms);
  }
}

}  // namespace tandem::quant
