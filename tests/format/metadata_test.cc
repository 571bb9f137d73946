// Tests for typed metadata values and the ordered key/value map (no files involved).
#include "runtime/format/metadata.h"

#include <gtest/gtest.h>

#include "runtime/format/tensor_info.h"

namespace tandem::format {
namespace {

TEST(ValueTest, TypeMatchesEveryConstructor) {
  EXPECT_EQ(Value::U8(1).type(), ValueType::kUint8);
  EXPECT_EQ(Value::I8(-1).type(), ValueType::kInt8);
  EXPECT_EQ(Value::U16(1).type(), ValueType::kUint16);
  EXPECT_EQ(Value::I16(-1).type(), ValueType::kInt16);
  EXPECT_EQ(Value::U32(1).type(), ValueType::kUint32);
  EXPECT_EQ(Value::I32(-1).type(), ValueType::kInt32);
  EXPECT_EQ(Value::F32(1.5f).type(), ValueType::kFloat32);
  EXPECT_EQ(Value::Bool(true).type(), ValueType::kBool);
  EXPECT_EQ(Value::Str("x").type(), ValueType::kString);
  EXPECT_EQ(Value::Arr(Array{}).type(), ValueType::kArray);
  EXPECT_EQ(Value::U64(1).type(), ValueType::kUint64);
  EXPECT_EQ(Value::I64(-1).type(), ValueType::kInt64);
  EXPECT_EQ(Value::F64(1.5).type(), ValueType::kFloat64);
  EXPECT_EQ(Value().type(), ValueType::kUint8);
}

TEST(ValueTest, TypeNames) {
  EXPECT_STREQ(ValueTypeName(ValueType::kUint32), "uint32");
  EXPECT_STREQ(ValueTypeName(ValueType::kArray), "array");
  EXPECT_STREQ(ValueTypeName(ValueType::kFloat64), "float64");
  EXPECT_STREQ(ValueTypeName(static_cast<ValueType>(99)), "unknown");
}

TEST(ValueTest, AsIntAcceptsEveryIntegerThatFits) {
  EXPECT_EQ(Value::U8(200).AsInt(), 200);
  EXPECT_EQ(Value::I8(-7).AsInt(), -7);
  EXPECT_EQ(Value::U16(65535).AsInt(), 65535);
  EXPECT_EQ(Value::I16(-300).AsInt(), -300);
  EXPECT_EQ(Value::U32(4000000000u).AsInt(), 4000000000LL);
  EXPECT_EQ(Value::I32(-5).AsInt(), -5);
  EXPECT_EQ(Value::U64(1ull << 40).AsInt(), 1LL << 40);
  EXPECT_EQ(Value::I64(-(1LL << 50)).AsInt(), -(1LL << 50));
  EXPECT_EQ(Value::U64(~0ull).AsInt(), std::nullopt);  // does not fit int64
  EXPECT_EQ(Value::F32(1.0f).AsInt(), std::nullopt);
  EXPECT_EQ(Value::Bool(true).AsInt(), std::nullopt);
  EXPECT_EQ(Value::Str("3").AsInt(), std::nullopt);
}

TEST(ValueTest, AsFloatAsBoolAsStringAsArray) {
  EXPECT_EQ(Value::F32(0.25f).AsFloat(), 0.25);
  EXPECT_EQ(Value::F64(1e-6).AsFloat(), 1e-6);
  EXPECT_EQ(Value::I32(-3).AsFloat(), -3.0);
  EXPECT_EQ(Value::Str("x").AsFloat(), std::nullopt);
  EXPECT_EQ(Value::Bool(false).AsBool(), false);
  EXPECT_EQ(Value::U8(1).AsBool(), std::nullopt);
  ASSERT_NE(Value::Str("qwen3moe").AsString(), nullptr);
  EXPECT_EQ(*Value::Str("qwen3moe").AsString(), "qwen3moe");
  EXPECT_EQ(Value::U8(1).AsString(), nullptr);
  Array a{ValueType::kInt32, std::vector<int32_t>{1, 2, 3}};
  Value v = Value::Arr(a);
  ASSERT_NE(v.AsArray(), nullptr);
  EXPECT_EQ(v.AsArray()->size(), 3u);
  EXPECT_EQ(v.AsArray()->elem_type, ValueType::kInt32);
  EXPECT_EQ(Value::U8(1).AsArray(), nullptr);
}

TEST(ValueTest, ToString) {
  EXPECT_EQ(Value::U8(200).ToString(), "200");
  EXPECT_EQ(Value::I8(-2).ToString(), "-2");
  EXPECT_EQ(Value::U64(~0ull).ToString(), "18446744073709551615");
  EXPECT_EQ(Value::F32(0.5f).ToString(), "0.5");
  EXPECT_EQ(Value::Bool(true).ToString(), "true");
  EXPECT_EQ(Value::Str("a\"b\n").ToString(), "\"a\\\"b\\n\"");
  EXPECT_EQ(Value::Arr(Array{ValueType::kString, std::vector<std::string>{"x", "y"}}).ToString(),
            "[\"x\", \"y\"]");
  std::vector<int32_t> many(100, 7);
  std::string s = Value::Arr(Array{ValueType::kInt32, many}).ToString();
  EXPECT_EQ(s, "[7, 7, 7, 7, 7, 7, 7, 7, ... (100 elements)]");
  EXPECT_NE(Value::Str(std::string(1000, 'z')).ToString().find("(1000 bytes)"), std::string::npos);
}

TEST(MetadataTest, AddKeepsOrderAndRejectsDuplicates) {
  Metadata md;
  EXPECT_TRUE(md.Add("general.architecture", Value::Str("qwen3moe")));
  EXPECT_TRUE(md.Add("qwen3moe.block_count", Value::U32(48)));
  EXPECT_FALSE(md.Add("general.architecture", Value::Str("llama")));
  ASSERT_EQ(md.size(), 2u);
  EXPECT_EQ(md.entries()[0].first, "general.architecture");
  EXPECT_EQ(md.entries()[1].first, "qwen3moe.block_count");
  EXPECT_EQ(md.GetString("general.architecture"), "qwen3moe");
  EXPECT_EQ(md.GetInt("qwen3moe.block_count"), 48);
  EXPECT_EQ(md.GetFloat("qwen3moe.block_count"), 48.0);
  EXPECT_EQ(md.GetString("qwen3moe.block_count"), std::nullopt);
  EXPECT_EQ(md.GetInt("missing"), std::nullopt);
  EXPECT_EQ(md.Find("missing"), nullptr);
}

TEST(MetadataTest, SetReplacesInPlaceOrAppends) {
  Metadata md;
  md.Set("a", Value::U32(1));
  md.Set("b", Value::U32(2));
  md.Set("a", Value::F32(3.0f));
  ASSERT_EQ(md.size(), 2u);
  EXPECT_EQ(md.entries()[0].first, "a");
  EXPECT_EQ(md.Find("a")->type(), ValueType::kFloat32);
  EXPECT_EQ(md.GetFloat("a"), 3.0);
  Metadata copy = md;  // the index survives a copy
  EXPECT_EQ(copy, md);
  EXPECT_EQ(copy.GetInt("b"), 2);
  copy.Set("b", Value::U32(5));
  EXPECT_NE(copy, md);
}

TEST(TensorInfoTest, DimsToStringAndShapeHelpers) {
  EXPECT_EQ(DimsToString({2048, 768, 128}), "[2048, 768, 128]");
  EXPECT_EQ(DimsToString({}), "[]");
  TensorInfo t{.name = "w", .dims = {256, 3}, .type = quant::GgmlType::kQ4_K};
  EXPECT_EQ(t.elements(), 768);
  EXPECT_EQ(t.rows(), 3);
  EXPECT_EQ(t.row_bytes(), 144);
}

}  // namespace
}  // namespace tandem::format
