// GGUF reader and writer tests: round trips through the writer, the spec's worked example, and a
// catalogue of corrupted files built byte by byte (independently of the writer), each of which must
// be rejected with its own message and without reading out of bounds.
#include "runtime/format/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"

namespace tandem::format {
namespace {

using quant::GgmlType;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

uint64_t Pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Metadata with every scalar type and an array of every element type (strings included).
Metadata AllTypesMetadata() {
  Metadata md;
  md.Add("general.architecture", Value::Str("qwen3moe"));
  md.Add("t.u8", Value::U8(250));
  md.Add("t.i8", Value::I8(-100));
  md.Add("t.u16", Value::U16(65000));
  md.Add("t.i16", Value::I16(-32000));
  md.Add("t.u32", Value::U32(4000000000u));
  md.Add("t.i32", Value::I32(-2000000000));
  md.Add("t.f32", Value::F32(3.25f));
  md.Add("t.bool_true", Value::Bool(true));
  md.Add("t.bool_false", Value::Bool(false));
  md.Add("t.str_empty", Value::Str(""));
  md.Add("t.str_utf8", Value::Str("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c"));
  md.Add("t.u64", Value::U64(~0ull));
  md.Add("t.i64", Value::I64(INT64_MIN));
  md.Add("t.f64", Value::F64(-1e-300));
  md.Add("a.u8", Value::Arr({ValueType::kUint8, std::vector<uint8_t>{0, 1, 255}}));
  md.Add("a.i8", Value::Arr({ValueType::kInt8, std::vector<int8_t>{-128, 0, 127}}));
  md.Add("a.u16", Value::Arr({ValueType::kUint16, std::vector<uint16_t>{1, 65535}}));
  md.Add("a.i16", Value::Arr({ValueType::kInt16, std::vector<int16_t>{-32768, 32767}}));
  md.Add("a.u32", Value::Arr({ValueType::kUint32, std::vector<uint32_t>{7, 4294967295u}}));
  md.Add("a.i32", Value::Arr({ValueType::kInt32, std::vector<int32_t>{-1, 2, -3}}));
  md.Add("a.f32", Value::Arr({ValueType::kFloat32, std::vector<float>{0.5f, -1e30f, 1e-30f}}));
  md.Add("a.bool", Value::Arr({ValueType::kBool, std::vector<bool>{true, false, true}}));
  md.Add("a.str", Value::Arr({ValueType::kString,
                              std::vector<std::string>{"<s>", "", "\xe2\x96\x81the", "a b"}}));
  md.Add("a.u64", Value::Arr({ValueType::kUint64, std::vector<uint64_t>{0, ~0ull}}));
  md.Add("a.i64", Value::Arr({ValueType::kInt64, std::vector<int64_t>{INT64_MIN, INT64_MAX}}));
  md.Add("a.f64", Value::Arr({ValueType::kFloat64, std::vector<double>{1.0 / 3.0, -2.5}}));
  md.Add("a.empty_str", Value::Arr({ValueType::kString, std::vector<std::string>{}}));
  md.Add("a.empty_f32", Value::Arr({ValueType::kFloat32, std::vector<float>{}}));
  return md;
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type;
};

// Several types, including ones Tandem only stores (i32) and block-quantised ones.
const std::vector<TensorSpec>& RoundTripTensors() {
  static const std::vector<TensorSpec> specs = {
      {"token_embd.weight", {64, 3}, GgmlType::kF32},
      {"blk.0.attn_q.weight", {32, 5}, GgmlType::kF16},
      {"blk.0.ffn_gate_exps.weight", {256, 2, 3}, GgmlType::kQ4_K},
      {"blk.0.ffn_down_exps.weight", {64, 4, 2, 2}, GgmlType::kQ8_0},
      {"blk.0.attn_norm.weight", {7}, GgmlType::kBF16},
      {"blk.0.ids", {5}, GgmlType::kI32},
      {"blk.0.ffn_up_exps.weight", {32, 3}, GgmlType::kMXFP4},
  };
  return specs;
}

class GgufRoundTripTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufRoundTripTest, MetadataAndTensorBytesSurvive) {
  const uint32_t alignment = GetParam();
  Metadata md = AllTypesMetadata();
  if (alignment != kGgufDefaultAlignment) md.Add("general.alignment", Value::U32(alignment));
  GgufWriter writer(md);
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < RoundTripTensors().size(); ++i) {
    const TensorSpec& s = RoundTripTensors()[i];
    TensorInfo probe{.name = s.name, .dims = s.dims, .type = s.type};
    data.push_back(RandomBytes(probe.rows() * probe.row_bytes(), 1000 + i));
    ASSERT_TRUE(writer.AddTensor(s.name, s.dims, s.type, data.back()).ok());
  }
  absl::StatusOr<std::vector<uint8_t>> buffer = writer.WriteToBuffer();
  ASSERT_TRUE(buffer.ok()) << buffer.status();

  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(*buffer, "roundtrip.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.metadata(), md);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  ASSERT_EQ(f.tensors().size(), RoundTripTensors().size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    const TensorSpec& s = RoundTripTensors()[i];
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.dims, s.dims);
    EXPECT_EQ(t.type, s.type);
    EXPECT_EQ(t.nbytes, data[i].size());
    EXPECT_EQ(t.offset, expected_offset) << "offsets must be tight";
    expected_offset += Pad(t.nbytes, alignment);
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.nbytes), 0) << t.name;
    EXPECT_EQ(t.data, buffer->data() + f.data_offset() + t.offset);
    // The padding between tensors is zero.
    for (uint64_t b = t.nbytes; b < Pad(t.nbytes, alignment); ++b) ASSERT_EQ(t.data[b], 0);
    EXPECT_EQ(f.FindTensor(s.name), &t);
  }
  EXPECT_EQ(buffer->size(), f.data_offset() + expected_offset);
  EXPECT_EQ(f.file_size(), buffer->size());
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufRoundTripTest, ::testing::Values(32u, 64u));

TEST(GgufWriterTest, WriteThenOpenFromDisk) {
  const std::string path = ::testing::TempDir() + "/tandem_write_open.gguf";
  Metadata md = AllTypesMetadata();
  GgufWriter writer(md);
  std::vector<uint8_t> a = RandomBytes(64 * 3 * 4, 1);
  ASSERT_TRUE(writer.AddTensor("a", {64, 3}, GgmlType::kF32, a).ok());
  int fills = 0;
  ASSERT_TRUE(writer
                  .AddTensor("b", {256, 2}, GgmlType::kQ6_K,
                             [&](std::span<uint8_t> out) {
                               ++fills;
                               EXPECT_EQ(out.size(), 2u * 210u);
                               for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(i * 7);
                               return absl::OkStatus();
                             })
                  .ok());
  absl::Status written = writer.Write(path);
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(fills, 1);
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(path, ".tmp-", ::getpid())));

  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->name(), path);
  EXPECT_EQ((*file)->metadata(), md);
  const TensorInfo* b = (*file)->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, Pad(a.size(), 32));
  for (size_t i = 0; i < b->nbytes; ++i) ASSERT_EQ(b->data[i], uint8_t(i * 7));
  EXPECT_EQ(std::memcmp((*file)->FindTensor("a")->data, a.data(), a.size()), 0);
  // The same writer into memory gives the same bytes.
  absl::StatusOr<std::vector<uint8_t>> buffer = writer.WriteToBuffer();
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(buffer->size(), std::filesystem::file_size(path));
  std::filesystem::remove(path);
}

TEST(GgufWriterTest, FailedFillLeavesNothingBehind) {
  const std::string path = ::testing::TempDir() + "/tandem_failed_fill.gguf";
  std::filesystem::remove(path);
  GgufWriter writer(Metadata{});
  ASSERT_TRUE(writer
                  .AddTensor("x", {32}, GgmlType::kF32,
                             [](std::span<uint8_t>) {
                               return absl::DataLossError("source shard unreadable");
                             })
                  .ok());
  absl::Status status = writer.Write(path);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("filling tensor 'x': source shard unreadable"), std::string::npos)
      << status;
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(path, ".tmp-", ::getpid())));
}

TEST(GgufWriterTest, UnwritableDirectoryIsAnError) {
  GgufWriter writer(Metadata{});
  absl::Status status = writer.Write("/nonexistent-dir-for-tandem/x.gguf");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/nonexistent-dir-for-tandem/x.gguf.tmp-"), std::string::npos)
      << status;
}

TEST(GgufWriterTest, AddTensorValidatesNamesAndDims) {
  GgufWriter writer(Metadata{});
  std::vector<uint8_t> bytes(128);
  auto msg = [](const absl::Status& s) { return std::string(s.message()); };
  ASSERT_TRUE(writer.AddTensor("ok", {32}, GgmlType::kF32, bytes).ok());
  EXPECT_NE(msg(writer.AddTensor("", {32}, GgmlType::kF32, bytes)).find("empty name"),
            std::string::npos);
  EXPECT_NE(msg(writer.AddTensor(std::string(64, 'n'), {32}, GgmlType::kF32, bytes))
                .find("is 64 bytes; the limit is 63"),
            std::string::npos);
  EXPECT_TRUE(writer.AddTensor(std::string(63, 'n'), {32}, GgmlType::kF32, bytes).ok());
  EXPECT_NE(msg(writer.AddTensor("ok", {32}, GgmlType::kF32, bytes)).find("duplicate tensor name"),
            std::string::npos);
  EXPECT_NE(
      msg(writer.AddTensor("d5", {32, 1, 1, 1, 1}, GgmlType::kF32, bytes)).find("has 5 dimensions"),
      std::string::npos);
  EXPECT_NE(msg(writer.AddTensor("d0", {}, GgmlType::kF32, bytes)).find("has 0 dimensions"),
            std::string::npos);
  EXPECT_NE(msg(writer.AddTensor("blk", {100}, GgmlType::kQ4_K, bytes))
                .find("ne[0] = 100 is not a multiple of the block size 256"),
            std::string::npos);
  EXPECT_NE(msg(writer.AddTensor("neg", {-32}, GgmlType::kF32, bytes)).find("must be positive"),
            std::string::npos);
  EXPECT_NE(msg(writer.AddTensor("size", {16}, GgmlType::kF32, bytes))
                .find("needs 64 bytes but 128 were given"),
            std::string::npos);
  EXPECT_NE(msg(writer.AddTensor("nofill", {32}, GgmlType::kF32, GgufWriter::Fill{}))
                .find("no fill callback"),
            std::string::npos);
  EXPECT_NE(msg(writer.AddTensor("type", {32}, static_cast<GgmlType>(77), bytes))
                .find("unknown ggml type id 77"),
            std::string::npos);
}

TEST(GgufWriterTest, RejectsBadAlignmentAndInconsistentArrays) {
  Metadata bad_value;
  bad_value.Add("general.alignment", Value::U32(48));
  auto r1 = GgufWriter(bad_value).WriteToBuffer();
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("48 is not a non-zero power of two"), std::string::npos);

  Metadata bad_type;
  bad_type.Add("general.alignment", Value::U64(64));
  auto r2 = GgufWriter(bad_type).WriteToBuffer();
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("has type uint64"), std::string::npos);

  Metadata inconsistent;
  inconsistent.Add("x", Value::Arr({ValueType::kInt32, std::vector<float>{1.0f}}));
  auto r3 = GgufWriter(inconsistent).WriteToBuffer();
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("elem_type is int32 but the array holds float32"),
            std::string::npos);

  Metadata empty_key;
  empty_key.Add("", Value::U8(1));
  auto r4 = GgufWriter(empty_key).WriteToBuffer();
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("must be 1 to 65535 bytes"), std::string::npos);
}

TEST(GgufWriterTest, NoTensorsStillPadsAndParses) {
  Metadata md;
  md.Add("general.architecture", Value::Str("x"));
  auto buffer = GgufWriter(md).WriteToBuffer();
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(buffer->size() % 32, 0u);
  auto file = GgufFile::Parse(*buffer, "empty.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_EQ((*file)->data_offset(), buffer->size());
}

// Spec §1.9: alignment 64, six KVs, a = F32 (3, 2), b = Q8_0 (64). The metadata ends at byte 401,
// data_offset is 448 and b sits at offset 64.
TEST(GgufWriterTest, SpecWorkedExample) {
  Metadata md;
  md.Add("general.architecture", Value::Str("qwen2"));
  md.Add("general.alignment", Value::U32(64));
  md.Add("tokenizer.ggml.add_bos_token", Value::Bool(true));  // 28-byte key
  md.Add("qwen2.rope.freq_base", Value::F32(1e6f));           // 20-byte key
  md.Add("tokenizer.ggml.tokens",                             // 21-byte key, 18 string bytes
         Value::Arr({ValueType::kString, std::vector<std::string>{"alpha", "beta", "gamma1234"}}));
  md.Add("tokenizer.ggml.token_type",  // 25-byte key
         Value::Arr({ValueType::kInt32, std::vector<int32_t>{1, 1, 3}}));
  GgufWriter writer(md);
  std::vector<float> a = {0, 1, 2, 10, 11, 12};
  ASSERT_TRUE(writer
                  .AddTensor("a", {3, 2}, GgmlType::kF32,
                             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a.data()),
                                                      a.size() * sizeof(float)))
                  .ok());
  std::vector<uint8_t> b = RandomBytes(68, 9);
  ASSERT_TRUE(writer.AddTensor("b", {64}, GgmlType::kQ8_0, b).ok());
  auto buffer = writer.WriteToBuffer();
  ASSERT_TRUE(buffer.ok());
  // Byte 400 is the last byte of b's offset field (u64 64 at 393..400); 401..447 is padding.
  EXPECT_EQ((*buffer)[393], 64);
  for (int i = 394; i <= 400; ++i) EXPECT_EQ((*buffer)[i], 0) << i;
  for (int i = 401; i < 448; ++i) EXPECT_EQ((*buffer)[i], 0) << i;
  EXPECT_EQ(buffer->size(), 448u + 64u + 128u);

  auto file = GgufFile::Parse(*buffer, "example.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 3u);
  EXPECT_EQ((*file)->metadata().size(), 6u);
  EXPECT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->data_offset(), 448u);
  EXPECT_EQ((*file)->FindTensor("b")->offset, 64u);
  EXPECT_EQ((*file)->FindTensor("b")->nbytes, 68u);
  // ne = [3, 2] holding [0, 1, 2, 10, 11, 12]: element (i0=2, i1=1) is 12.
  const float* af = reinterpret_cast<const float*>((*file)->FindTensor("a")->data);
  EXPECT_EQ(af[1 * 3 + 2], 12.0f);
}

// ------------------------------------------------------------------------------------------------
// A byte-level GGUF builder, independent of GgufWriter, so that every field can be corrupted.

class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Raw(const std::vector<uint8_t>& v) {
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  std::vector<uint8_t> bytes() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

struct RawKv {
  std::string key;
  uint32_t type;
  std::vector<uint8_t> payload;
};
struct RawTensor {
  std::string name;
  std::vector<int64_t> dims;
  uint32_t type;
  uint64_t offset;
  std::optional<uint32_t> n_dims;  // overrides dims.size() when set
};

RawKv KvU32(std::string key, uint32_t v) { return {key, 4, Bytes().Put(v).bytes()}; }
RawKv KvStr(std::string key, std::string v) { return {key, 8, Bytes().Str(v).bytes()}; }

struct RawGguf {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // overrides tensors.size()
  std::vector<RawKv> kvs = {
      KvStr("general.architecture", "qwen3moe"),
      KvU32("qwen3moe.block_count", 2),
      {"tokenizer.ggml.tokens", 9,
       Bytes().Put<uint32_t>(8).Put<uint64_t>(3).Str("a").Str("bc").Str("def").bytes()},
  };
  // a: 16 f32 = 64 bytes at 0; b: one q8_0 block = 34 bytes at 64 (padded to 96 -> ends at 128).
  std::vector<RawTensor> tensors = {
      {"a", {8, 2}, 0, 0, {}},
      {"b", {32}, 8, 64, {}},
  };
  uint32_t alignment = 32;
  uint64_t data_bytes = 128;

  std::vector<uint8_t> Build() const {
    Bytes out;
    for (char c : magic) out.Put<char>(c);
    out.Put(version);
    out.Put<uint64_t>(tensor_count.value_or(tensors.size()));
    out.Put<uint64_t>(kvs.size());
    for (const RawKv& kv : kvs) out.Str(kv.key).Put(kv.type).Raw(kv.payload);
    for (const RawTensor& t : tensors) {
      out.Str(t.name).Put<uint32_t>(t.n_dims.value_or(t.dims.size()));
      for (int64_t d : t.dims) out.Put(d);
      out.Put(t.type).Put(t.offset);
    }
    std::vector<uint8_t> bytes = out.bytes();
    bytes.resize(Pad(bytes.size(), alignment), 0);
    std::vector<uint8_t> data = RandomBytes(data_bytes, 5);
    bytes.insert(bytes.end(), data.begin(), data.end());
    return bytes;
  }
};

absl::Status ParseStatus(const std::vector<uint8_t>& bytes) {
  return GgufFile::Parse(bytes, "corrupt.gguf").status();
}

TEST(GgufReaderTest, RawBaselineIsValid) {
  RawGguf raw;
  auto file = GgufFile::Parse(raw.Build(), "base.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ((*file)->metadata().GetString("general.architecture"), "qwen3moe");
  const Array* tokens = (*file)->metadata().Find("tokenizer.ggml.tokens")->AsArray();
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(std::get<std::vector<std::string>>(tokens->values),
            (std::vector<std::string>{"a", "bc", "def"}));
}

TEST(GgufReaderTest, AcceptsVersion2GapsAndStorageOnlyTypes) {
  RawGguf raw;
  raw.version = 2;
  raw.tensors = {{"a", {8, 2}, 0, 0, {}},     // 64 bytes at 0
                 {"ids", {4}, 26, 128, {}},   // i32: parses, the model layer decides
                 {"f64", {2}, 28, 96, {}},    // out of order and with a gap before it
                 {"q81", {32}, 9, 192, {}}};  // q8_1: 36 bytes
  raw.data_bytes = 192 + 36;
  auto file = GgufFile::Parse(raw.Build(), "v2.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 2u);
  EXPECT_EQ((*file)->FindTensor("ids")->type, GgmlType::kI32);
  EXPECT_EQ((*file)->FindTensor("q81")->nbytes, 36u);
}

// One corruption: how to make it, and a substring only its message contains.
struct Corruption {
  std::string label;
  std::function<std::vector<uint8_t>()> make;
  std::string expect;
};

std::vector<Corruption> Corruptions() {
  const size_t full = RawGguf().Build().size();
  auto mutate = [](std::function<void(RawGguf&)> f) {
    return [f] {
      RawGguf raw;
      f(raw);
      return raw.Build();
    };
  };
  auto truncated = [](size_t n) {
    return [n] {
      std::vector<uint8_t> b = RawGguf().Build();
      b.resize(n);
      return b;
    };
  };
  auto tensor = [](std::function<void(RawTensor&)> f) {
    return [f](RawGguf& g) { f(g.tensors[1]); };
  };
  return {
      {"empty file", truncated(0), "truncated header: magic needs 4 bytes at offset 0"},
      {"truncated header", truncated(12), "truncated header: tensor_count needs 8 bytes"},
      {"truncated metadata key", truncated(24 + 8 + 5),
       "truncated metadata: key of key/value #0 of 3"},
      {"truncated metadata value", truncated(24 + 8 + 20 + 4 + 8 + 3),
       "truncated metadata: string value of key 'general.architecture'"},
      {"truncated tensor infos", truncated(200), "truncated tensor-info table"},
      {"truncated data", truncated(full - 40),
       absl::StrCat("truncated data section: tensor 'b' (offset 64, 34 bytes) ends at byte ",
                    full - 64 + 34, " but the file is ", full - 40, " bytes")},
      {"bad magic", mutate([](RawGguf& g) { g.magic = "GGML"; }), "not a GGUF file: magic is"},
      {"byte-swapped magic", mutate([](RawGguf& g) { g.magic = "FUGG"; }),
       "magic is \"FUGG\" (byte-swapped \"GGUF\"): this is a big-endian GGUF file"},
      {"version 1", mutate([](RawGguf& g) { g.version = 1; }), "unsupported GGUF version 1"},
      {"version 4", mutate([](RawGguf& g) { g.version = 4; }), "unsupported GGUF version 4"},
      {"version 0", mutate([](RawGguf& g) { g.version = 0; }), "unsupported GGUF version 0"},
      {"big-endian version", mutate([](RawGguf& g) { g.version = 0x03000000; }),
       "version reads as 0x03000000: this is a big-endian GGUF file (byte-swapped version 3)"},
      {"negative tensor count", mutate([](RawGguf& g) { g.tensor_count = ~0ull; }),
       "tensor_count 18446744073709551615 is negative as int64"},
      {"bad value type id", mutate([](RawGguf& g) { g.kvs[1].type = 13; }),
       "key 'qwen3moe.block_count' has bad value type id 13"},
      {"bad array element type id", mutate([](RawGguf& g) {
         g.kvs[2].payload = Bytes().Put<uint32_t>(200).Put<uint64_t>(0).bytes();
       }),
       "bad value type id 200 for the array elements"},
      {"huge string length",
       mutate([](RawGguf& g) { g.kvs[0].payload = Bytes().Put<uint64_t>(1ull << 40).bytes(); }),
       "string value of key 'general.architecture' has length 1099511627776, more than the limit"},
      {"huge array count", mutate([](RawGguf& g) {
         g.kvs[2].payload = Bytes().Put<uint32_t>(4).Put<uint64_t>(1ull << 40).bytes();
       }),
       "array has 1099511627776 elements, more than the limit of 2^30"},
      {"array count beyond the file", mutate([](RawGguf& g) {
         g.kvs[2].payload = Bytes().Put<uint32_t>(8).Put<uint64_t>(1ull << 29).bytes();
       }),
       "string array of key 'tokenizer.ggml.tokens' (536870912 elements) needs"},
      {"nested array", mutate([](RawGguf& g) {
         g.kvs[2].payload = Bytes()
                                .Put<uint32_t>(9)
                                .Put<uint64_t>(1)
                                .Put<uint32_t>(4)
                                .Put<uint64_t>(1)
                                .Put<uint32_t>(7)
                                .bytes();
       }),
       "key 'tokenizer.ggml.tokens': nested arrays are not supported"},
      {"duplicate key", mutate([](RawGguf& g) { g.kvs[1].key = "general.architecture"; }),
       "duplicate metadata key 'general.architecture' (key/value #1)"},
      {"empty key", mutate([](RawGguf& g) { g.kvs[1].key = ""; }),
       "metadata key/value #1 has an empty key"},
      {"alignment 48", mutate([](RawGguf& g) { g.kvs.push_back(KvU32("general.alignment", 48)); }),
       "general.alignment = 48 is not a non-zero power of two"},
      {"alignment 0", mutate([](RawGguf& g) { g.kvs.push_back(KvU32("general.alignment", 0)); }),
       "general.alignment = 0 is not"},
      {"alignment of wrong type", mutate([](RawGguf& g) {
         g.kvs.push_back({"general.alignment", 10, Bytes().Put<uint64_t>(32).bytes()});
       }),
       "general.alignment has type uint64 (value 32); it must be uint32"},
      {"duplicate tensor name", mutate(tensor([](RawTensor& t) { t.name.assign(1, 'a'); })),
       "duplicate tensor name 'a' (tensor #1)"},
      {"empty tensor name", mutate(tensor([](RawTensor& t) { t.name = ""; })),
       "tensor #1 has an empty name"},
      {"tensor name too long", mutate(tensor([](RawTensor& t) { t.name = std::string(64, 'x'); })),
       "is 64 bytes; the limit is 63"},
      {"n_dims 5", mutate(tensor([](RawTensor& t) {
         t.dims = {32, 1, 1, 1, 1};
       })),
       "tensor 'b' has n_dims = 5; GGUF allows 1 to 4"},
      {"n_dims 0", mutate(tensor([](RawTensor& t) { t.dims = {}; })), "has n_dims = 0"},
      {"negative dim", mutate(tensor([](RawTensor& t) {
         t.dims = {32, -2};
       })),
       "has dimension 1 = -2 in [32, -2]; dimensions must be positive"},
      {"zero dim", mutate(tensor([](RawTensor& t) {
         t.dims = {32, 0};
       })),
       "has dimension 1 = 0 in [32, 0]"},
      {"element count overflow", mutate(tensor([](RawTensor& t) {
         t.dims = {1ll << 32, 1ll << 32};
       })),
       "dims [4294967296, 4294967296]: element count overflows int64"},
      {"byte size overflow", mutate(tensor([](RawTensor& t) {
         t.type = 0;
         t.dims = {1ll << 31, 1ll << 31};
       })),
       "(f32) dims [2147483648, 2147483648]: byte size overflows int64"},
      {"ne[0] not a block multiple", mutate(tensor([](RawTensor& t) { t.dims = {48}; })),
       "tensor 'b' (q8_0): ne[0] = 48 is not a multiple of the block size 32"},
      {"unknown tensor type", mutate(tensor([](RawTensor& t) { t.type = 77; })),
       "tensor 'b' has unknown ggml type id 77"},
      {"offset beyond file", mutate(tensor([](RawTensor& t) { t.offset = 1 << 20; })),
       "tensor 'b' (offset 1048576, 34 bytes) ends at byte"},
      {"offset near 2^64", mutate(tensor([](RawTensor& t) { t.offset = ~0ull - 31; })),
       "ends at byte beyond 2^64"},
      {"overlapping tensors", mutate(tensor([](RawTensor& t) { t.offset = 32; })),
       "tensors 'a' [0, 64) and 'b' [32, 66) overlap"},
      {"misaligned offset", mutate(tensor([](RawTensor& t) { t.offset = 80; })),
       "tensor 'b' offset 80 is not a multiple of the alignment 32"},
      {"data section beyond file",
       [] {
         std::vector<uint8_t> b = RawGguf().Build();
         b.resize(b.size() - 128 - 5);  // ends inside the padding before the data section
         return b;
       },
       "the data section starts at byte"},
  };
}

TEST(GgufReaderTest, EveryCorruptionHasItsOwnMessage) {
  std::set<std::string> messages;
  const std::vector<Corruption> corruptions = Corruptions();
  ASSERT_GE(corruptions.size(), 12u);
  for (const Corruption& c : corruptions) {
    absl::Status status = ParseStatus(c.make());
    ASSERT_FALSE(status.ok()) << c.label << " was accepted";
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.label;
    const std::string message(status.message());
    EXPECT_NE(message.find(c.expect), std::string::npos)
        << c.label << ": message '" << message << "' lacks '" << c.expect << "'";
    EXPECT_EQ(message.rfind("corrupt.gguf: ", 0), 0u) << c.label << ": " << message;
    EXPECT_TRUE(messages.insert(message).second) << c.label << " repeats '" << message << "'";
  }
}

// A file whose last tensor fills its padded slot exactly: any truncation loses a needed byte.
TEST(GgufReaderTest, TruncationAtEveryByteIsRejected) {
  Metadata md;
  md.Add("general.architecture", Value::Str("qwen3"));
  md.Add("a.str", Value::Arr({ValueType::kString, std::vector<std::string>{"x", "yz"}}));
  md.Add("a.f32", Value::Arr({ValueType::kFloat32, std::vector<float>{1.0f, 2.0f}}));
  md.Add("t.bool", Value::Bool(true));
  GgufWriter writer(md);
  const std::vector<uint8_t> q = RandomBytes(34, 1);
  const std::vector<uint8_t> f = RandomBytes(64, 2);
  ASSERT_TRUE(writer.AddTensor("q", {32}, GgmlType::kQ8_0, q).ok());
  ASSERT_TRUE(writer.AddTensor("f", {8, 2}, GgmlType::kF32, f).ok());
  auto buffer = writer.WriteToBuffer();
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(GgufFile::Parse(*buffer, "whole.gguf").ok());
  for (size_t n = 0; n < buffer->size(); ++n) {
    // A fresh copy of exactly n bytes, so that ASan catches any read past the end.
    std::vector<uint8_t> cut(buffer->begin(), buffer->begin() + n);
    auto file = GgufFile::Parse(cut, "cut.gguf");
    EXPECT_FALSE(file.ok()) << "truncated to " << n << " bytes was accepted";
    if (!file.ok()) {
      EXPECT_NE(file.status().message().find("truncated"), std::string::npos)
          << n << ": " << file.status();
    }
  }
}

TEST(GgufReaderTest, OpenMissingFileNamesThePath) {
  auto file = GgufFile::Open("/nonexistent/tandem/model.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("/nonexistent/tandem/model.gguf"), std::string::npos);
}

TEST(GgufReaderTest, KeysWithOddBytesAreEscapedInMessages) {
  RawGguf raw;
  raw.kvs[1].key = std::string("bad\n\x01key", 8);
  raw.kvs[1].type = 99;
  absl::Status status = ParseStatus(raw.Build());
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("'bad\\n\\001key' has bad value type id 99"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace tandem::format
