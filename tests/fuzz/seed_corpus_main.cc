// Writes a small seed corpus for the fuzzers: valid GGUF files (every value type, several tensor
// types, alignments 32 and 64) and valid safetensors files. Usage: fuzz_seed_corpus OUT_DIR
// (creates OUT_DIR/gguf and OUT_DIR/safetensors). Not a test: it asserts nothing about the readers.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/format/gguf.h"

namespace {

namespace fs = std::filesystem;
using tandem::format::Array;
using tandem::format::GgufWriter;
using tandem::format::Metadata;
using tandem::format::Value;
using tandem::format::ValueType;
using tandem::quant::GgmlType;

bool Save(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13);
  return v;
}

struct Tensor {
  const char* name;
  std::vector<int64_t> dims;
  GgmlType type;
};

bool WriteGguf(const fs::path& path, const Metadata& md, const std::vector<Tensor>& tensors) {
  GgufWriter writer(md);
  std::vector<std::vector<uint8_t>> data;
  data.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    const auto& info = tandem::quant::GetTypeInfo(t.type);
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    data.push_back(Pattern(n / info.block_elems * info.block_bytes, uint8_t(data.size())));
    absl::Status s = writer.AddTensor(t.name, t.dims, t.type, data.back());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return false;
    }
  }
  absl::Status s = writer.Write(path.string());
  if (!s.ok()) std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
  return s.ok();
}

std::vector<uint8_t> Safetensors(const nlohmann::json& header, const std::vector<uint8_t>& data) {
  const std::string text = header.dump();
  const uint64_t len = text.size();
  std::vector<uint8_t> out(8 + text.size() + data.size());
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + text.size(), data.data(), data.size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out(argv[1]);
  fs::create_directories(out / "gguf");
  fs::create_directories(out / "safetensors");
  bool ok = true;

  Metadata minimal;
  minimal.Add("general.architecture", Value::Str("qwen3"));
  ok &= WriteGguf(out / "gguf" / "minimal.gguf", minimal, {{"w", {32}, GgmlType::kF32}});

  Metadata all;
  all.Add("general.architecture", Value::Str("qwen3moe"));
  all.Add("u8", Value::U8(1));
  all.Add("i8", Value::I8(-1));
  all.Add("u16", Value::U16(2));
  all.Add("i16", Value::I16(-2));
  all.Add("u32", Value::U32(3));
  all.Add("i32", Value::I32(-3));
  all.Add("f32", Value::F32(0.5f));
  all.Add("bool", Value::Bool(true));
  all.Add("u64", Value::U64(4));
  all.Add("i64", Value::I64(-4));
  all.Add("f64", Value::F64(0.25));
  all.Add("tokens", Value::Arr({ValueType::kString, std::vector<std::string>{"<s>", "a", ""}}));
  all.Add("types", Value::Arr({ValueType::kInt32, std::vector<int32_t>{1, 2, 3}}));
  all.Add("scores", Value::Arr({ValueType::kFloat32, std::vector<float>{-1.f, 0.f}}));
  all.Add("flags", Value::Arr({ValueType::kBool, std::vector<bool>{true, false}}));
  all.Add("big", Value::Arr({ValueType::kUint64, std::vector<uint64_t>{1, 2}}));
  ok &= WriteGguf(out / "gguf" / "all_types.gguf", all,
                  {{"token_embd.weight", {64, 2}, GgmlType::kF16},
                   {"blk.0.ffn_gate_exps.weight", {256, 1, 2}, GgmlType::kQ4_K},
                   {"blk.0.ffn_down_exps.weight", {32, 2}, GgmlType::kQ8_0},
                   {"blk.0.attn_norm.weight", {4}, GgmlType::kBF16}});

  Metadata align64;
  align64.Add("general.architecture", Value::Str("qwen2"));
  align64.Add("general.alignment", Value::U32(64));
  ok &= WriteGguf(out / "gguf" / "align64.gguf", align64,
                  {{"a", {3, 2}, GgmlType::kF32}, {"b", {64}, GgmlType::kQ8_0}});

  nlohmann::json two = {
      {"__metadata__", {{"format", "pt"}}},
      {"w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
      {"n", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
  };
  ok &= Save(out / "safetensors" / "two.safetensors", Safetensors(two, Pattern(32, 1)));
  nlohmann::json empty = {
      {"e", {{"dtype", "F16"}, {"shape", {0, 4}}, {"data_offsets", {0, 0}}}},
      {"h", {{"dtype", "F16"}, {"shape", {1, 2}}, {"data_offsets", {0, 4}}}},
  };
  ok &= Save(out / "safetensors" / "empty_tensor.safetensors", Safetensors(empty, Pattern(4, 7)));
  return ok ? 0 : 1;
}
