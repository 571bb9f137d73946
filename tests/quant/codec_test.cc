// The row-level codec: dispatch equals the per-type block functions, type names parse, random
// blocks are valid, have the requested RMS and are reproducible, and misuse aborts.
#include "runtime/quant/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/quant/blocks.h"
#include "tests/quant/block_types.h"

namespace tandem::quant {
namespace {

std::vector<uint8_t> RandomRow(GgmlType type, uint64_t seed, float rms, int64_t n_blocks) {
  std::vector<uint8_t> row(n_blocks * GetTypeInfo(type).block_bytes);
  RandomizeBlocks(type, seed, rms, row.data(), n_blocks);
  return row;
}

template <typename Block>
class CodecTest : public ::testing::Test {};
TYPED_TEST_SUITE(CodecTest, BlockTypes, BlockTypeNames);

// DequantizeRow and DequantizeElement(type, ...) give exactly what the block functions give, and
// the per-element decoder in each header agrees with its block decoder.
TYPED_TEST(CodecTest, DequantizeRowMatchesBlockDecode) {
  constexpr int64_t kBlocks = 37;
  constexpr int kElems = TypeParam::kElems;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const std::vector<uint8_t> row = RandomRow(TypeParam::kType, seed, 1.0f, kBlocks);
  std::vector<TypeParam> blocks(kBlocks);
  std::memcpy(blocks.data(), row.data(), row.size());

  std::vector<float> from_row(kBlocks * kElems, NAN);
  DequantizeRow(TypeParam::kType, row.data(), from_row.data(), kBlocks * kElems);
  float block_values[kElems];
  for (int64_t b = 0; b < kBlocks; ++b) {
    DequantizeBlock(blocks[b], block_values);
    for (int e = 0; e < kElems; ++e) {
      const int64_t i = b * kElems + e;
      ASSERT_EQ(F32ToBits(from_row[i]), F32ToBits(block_values[e])) << "block " << b << " e " << e;
      ASSERT_EQ(F32ToBits(DequantizeElement(blocks[b], e)), F32ToBits(block_values[e]));
      ASSERT_EQ(F32ToBits(DequantizeElement(TypeParam::kType, row.data(), i)),
                F32ToBits(block_values[e]));
    }
  }
}

TYPED_TEST(CodecTest, QuantizeRowMatchesBlockQuantiser) {
  constexpr int64_t kBlocks = 9;
  const std::vector<float> x = GaussianData(FreshSeed(), kBlocks * TypeParam::kElems);
  std::vector<TypeParam> blocks(kBlocks);
  QuantizeBlocks(x.data(), blocks.data(), kBlocks);
  std::vector<uint8_t> row(RowBytes(TypeParam::kType, kBlocks * TypeParam::kElems), 0xEE);
  QuantizeRow(TypeParam::kType, x.data(), row.data(), kBlocks * TypeParam::kElems);
  ASSERT_EQ(row.size(), blocks.size() * sizeof(TypeParam));
  EXPECT_EQ(std::memcmp(row.data(), blocks.data(), row.size()), 0);
}

TEST(Codec, FloatRows) {
  const std::vector<float> x = GaussianData(FreshSeed(), 64);
  std::vector<float> y(64, NAN);
  std::vector<uint8_t> row(64 * 4);
  QuantizeRow(GgmlType::kF32, x.data(), row.data(), 64);
  DequantizeRow(GgmlType::kF32, row.data(), y.data(), 64);
  EXPECT_EQ(x, y);
  EXPECT_EQ(DequantizeElement(GgmlType::kF32, row.data(), 17), x[17]);

  QuantizeRow(GgmlType::kF16, x.data(), row.data(), 64);
  DequantizeRow(GgmlType::kF16, row.data(), y.data(), 64);
  const uint16_t* f16 = reinterpret_cast<const uint16_t*>(row.data());
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(f16[i], F32ToFp16(x[i]));
    ASSERT_EQ(y[i], Fp16ToF32(f16[i]));
  }
  EXPECT_EQ(DequantizeElement(GgmlType::kF16, row.data(), 63), y[63]);

  QuantizeRow(GgmlType::kBF16, x.data(), row.data(), 64);
  DequantizeRow(GgmlType::kBF16, row.data(), y.data(), 64);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(f16[i], F32ToBf16(x[i]));
    ASSERT_EQ(y[i], Bf16ToF32(f16[i]));
  }
}

TEST(Codec, CanQuantizeExactlyTheTypesWithACodec) {
  for (const TypeInfo& info : kTypeInfos)
    EXPECT_EQ(CanQuantize(info.type), info.has_codec) << info.name;
}

TEST(Codec, ParseTypeName) {
  EXPECT_EQ(*ParseTypeName("q4_k"), GgmlType::kQ4_K);
  EXPECT_EQ(*ParseTypeName("Q4_K"), GgmlType::kQ4_K);
  EXPECT_EQ(*ParseTypeName("BF16"), GgmlType::kBF16);
  EXPECT_EQ(*ParseTypeName("iq4_xs"), GgmlType::kIQ4_XS);
  EXPECT_EQ(*ParseTypeName("MXFP4"), GgmlType::kMXFP4);
  for (const TypeInfo& info : kTypeInfos) EXPECT_EQ(*ParseTypeName(info.name), info.type);

  for (const char* bad : {"q4_k_m", "", "q4", "f8"}) {
    const absl::StatusOr<GgmlType> parsed = ParseTypeName(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_NE(message.find(std::string("\"") + bad + "\""), std::string::npos) << message;
    EXPECT_NE(message.find("q4_k, q5_k"), std::string::npos) << message;  // lists the names
    EXPECT_NE(message.find("mxfp4"), std::string::npos) << message;
  }
}

// Every type with a codec: random blocks decode to finite values with the requested RMS (within
// ±30%; measured within 1%) and a mean near zero, and the bytes depend only on the seed.
TEST(RandomizeBlocks, ValidWithTargetRmsAndReproducible) {
  constexpr int64_t kElements = 1 << 16;
  for (const TypeInfo& info : kTypeInfos) {
    if (!info.has_codec) continue;
    for (const float target : {0.02f, 1.5f}) {
      SCOPED_TRACE(::testing::Message() << info.name << " target " << target);
      const int64_t n_blocks = kElements / info.block_elems;
      const std::vector<uint8_t> row = RandomRow(info.type, 42, target, n_blocks);
      std::vector<float> values(kElements, NAN);
      DequantizeRow(info.type, row.data(), values.data(), kElements);
      double sum = 0, sum_squares = 0;
      for (const float v : values) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sum_squares += static_cast<double>(v) * v;
      }
      const double rms = std::sqrt(sum_squares / kElements);
      EXPECT_GT(rms, 0.7 * target);
      EXPECT_LT(rms, 1.3 * target);
      EXPECT_LT(std::fabs(sum / kElements), 0.05 * target);

      EXPECT_EQ(RandomRow(info.type, 42, target, n_blocks), row);
      EXPECT_NE(RandomRow(info.type, 43, target, n_blocks), row);
    }
  }
}

// Fields with internal consistency rules: Q8_K sums match the quants, and the int8 formats never
// hold −128 (the quantisers never write it and SIMD sign tricks rely on that).
TEST(RandomizeBlocks, ConsistentAuxiliaryFields) {
  std::vector<BlockQ8K> q8k(64);
  RandomizeBlocks(GgmlType::kQ8_K, FreshSeed(), 1.0f, q8k.data(), 64);
  for (const BlockQ8K& b : q8k) {
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        ASSERT_NE(b.qs[16 * k + i], -128);
        sum += b.qs[16 * k + i];
      }
      ASSERT_EQ(b.bsums[k], sum);
    }
  }
  std::vector<BlockQ8_0> q8(512);
  RandomizeBlocks(GgmlType::kQ8_0, FreshSeed(), 1.0f, q8.data(), 512);
  for (const BlockQ8_0& b : q8) {
    for (const int8_t q : b.qs) ASSERT_NE(q, -128);
  }
}

// An odd block count and sizes that are not multiples of 8 bytes still fill every byte.
TEST(RandomizeBlocks, OddSizesFillEverything) {
  for (const TypeInfo& info : kTypeInfos) {
    if (!info.has_codec) continue;
    SCOPED_TRACE(info.name);
    const int64_t n_blocks = 3;
    std::vector<uint8_t> a(n_blocks * info.block_bytes, 0x00);
    std::vector<uint8_t> b(n_blocks * info.block_bytes, 0xFF);
    RandomizeBlocks(info.type, 7, 1.0f, a.data(), n_blocks);
    RandomizeBlocks(info.type, 7, 1.0f, b.data(), n_blocks);
    EXPECT_EQ(a, b);  // no byte keeps its previous contents
  }
}

using CodecDeathTest = ::testing::Test;

TEST_F(CodecDeathTest, MisuseAborts) {
  std::vector<uint8_t> row(1024);
  std::vector<float> values(512);
  EXPECT_DEATH(DequantizeRow(GgmlType::kQ4_K, row.data(), values.data(), 100),
               "not a multiple of the block size 256");
  EXPECT_DEATH(QuantizeRow(GgmlType::kQ8_1, values.data(), row.data(), 32), "no codec");
  EXPECT_DEATH(RandomizeBlocks(GgmlType::kQ4_0, 1, -1.0f, row.data(), 1), "positive and finite");
  EXPECT_DEATH(RandomizeBlocks(GgmlType::kQ4_0, 1, 1e9f, row.data(), 1), "overflows f16");
}

}  // namespace
}  // namespace tandem::quant
