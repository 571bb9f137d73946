// Safetensors and Hugging Face checkpoint tests. Files are written by hand here (8-byte length,
// JSON, data) so that each field can be corrupted on its own.
#include "runtime/format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"

namespace tandem::format {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> MakeFile(const std::string& header, const std::vector<uint8_t>& data,
                              std::optional<uint64_t> header_len = std::nullopt) {
  const uint64_t len = header_len.value_or(header.size());
  std::vector<uint8_t> out(8 + header.size() + data.size());
  std::memcpy(out.data(), &len, 8);  // little-endian host
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

std::vector<uint8_t> Iota(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i);
  return v;
}

// Two tensors: w (F32 [2, 3], 24 bytes at 0) and n (BF16 [4], 8 bytes at 24), plus metadata.
const char kValidHeader[] = R"({"__metadata__":{"format":"pt"},)"
                            R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                            R"("n":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";

void WriteFile(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}
void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

fs::path FreshDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(SafetensorsTest, ParsesAValidFile) {
  std::vector<uint8_t> data = Iota(32, 1);
  std::vector<uint8_t> bytes = MakeFile(kValidHeader, data);
  auto file = SafetensorsFile::Parse(bytes, "valid.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  const auto& tensors = (*file)->tensors();
  ASSERT_EQ(tensors.size(), 2u);
  // File order, not JSON key order.
  EXPECT_EQ(tensors[0].name, "w");
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tensors[0].type, quant::GgmlType::kF32);
  EXPECT_EQ(tensors[0].data.size(), 24u);
  EXPECT_EQ(tensors[0].data.data(), bytes.data() + 8 + std::strlen(kValidHeader));
  EXPECT_EQ(tensors[0].file, "valid.safetensors");
  EXPECT_EQ(tensors[1].name, "n");
  EXPECT_EQ(tensors[1].type, quant::GgmlType::kBF16);
  EXPECT_EQ(std::vector<uint8_t>(tensors[1].data.begin(), tensors[1].data.end()),
            std::vector<uint8_t>(data.begin() + 24, data.end()));
  EXPECT_EQ((*file)->user_metadata().at("format"), "pt");
}

TEST(SafetensorsTest, OpenFromDiskAndEmptyTensors) {
  fs::path dir = FreshDir("tandem_st_open");
  std::string header = R"({"e":{"dtype":"F16","shape":[0,5],"data_offsets":[0,0]},)"
                       R"("h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  WriteFile(dir / "x.safetensors", MakeFile(header, Iota(4, 9)));
  auto file = SafetensorsFile::Open((dir / "x.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ((*file)->name(), (dir / "x.safetensors").string());
  for (const SafetensorsTensor& t : (*file)->tensors()) {
    if (t.name == "h") {
      EXPECT_EQ(t.data[0], 9);
    } else {
      EXPECT_TRUE(t.data.empty());
    }
  }
  auto missing = SafetensorsFile::Open((dir / "missing.safetensors").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find((dir / "missing.safetensors").string()),
            std::string::npos);
}

struct Corruption {
  std::string label;
  std::vector<uint8_t> bytes;
  std::string expect;
};

TEST(SafetensorsTest, EveryCorruptionHasItsOwnMessage) {
  const std::vector<uint8_t> data = Iota(32, 1);
  auto with = [&](const std::string& header) { return MakeFile(header, data); };
  auto tensor = [&](const std::string& body) { return with(absl::StrCat(R"({"t":)", body, "}")); };
  const std::vector<Corruption> corruptions = {
      {"too short", {1, 2, 3}, "the file is 3 bytes, too short for the 8-byte header length"},
      {"huge header length", MakeFile(kValidHeader, data, 200'000'000),
       "header length 200000000 exceeds the limit of 100000000 bytes"},
      {"header length past end", MakeFile(kValidHeader, data, 5000),
       "header length 5000 runs past the end of the file"},
      {"invalid json", with(R"({"t":{"dtype":"F32",)"), "is not valid JSON"},
      {"header not an object", with("[1,2,3]"), "header is a JSON array, expected an object"},
      {"unsupported dtype", tensor(R"({"dtype":"I64","shape":[4],"data_offsets":[0,32]})"),
       "tensor 't' has dtype 'I64'; Tandem reads F32, F16 and BF16"},
      {"missing dtype", tensor(R"({"shape":[4],"data_offsets":[0,16]})"),
       "tensor 't' has no string \"dtype\""},
      {"missing shape", tensor(R"({"dtype":"F32","data_offsets":[0,16]})"),
       "tensor 't' has no array \"shape\""},
      {"negative shape", tensor(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"),
       "tensor 't' has shape entry 0 = -4, which is not a non-negative integer"},
      {"float shape", tensor(R"({"dtype":"F32","shape":[4.5],"data_offsets":[0,16]})"),
       "has shape entry 0 = 4.5, which is not"},
      {"three offsets", tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16,32]})"),
       "tensor 't' has no two-element array \"data_offsets\""},
      {"string offset", tensor(R"({"dtype":"F32","shape":[4],"data_offsets":["0",16]})"),
       "has data_offsets [\"0\",16], which are not non-negative integers"},
      {"begin after end", tensor(R"({"dtype":"F32","shape":[0],"data_offsets":[16,8]})"),
       "has data_offsets [16, 8) with begin after end"},
      {"end beyond data", tensor(R"({"dtype":"F32","shape":[16],"data_offsets":[0,64]})"),
       "truncated data: tensor 't' data_offsets [0, 64) run past the data section of 32 bytes"},
      {"size mismatch", tensor(R"({"dtype":"F16","shape":[4],"data_offsets":[0,16]})"),
       "tensor 't' (F16, shape [4]) has 16 bytes of data but its shape needs 8"},
      {"shape overflow",
       tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]})"),
       "element count of the shape overflows"},
      {"byte size overflow",
       tensor(R"({"dtype":"F32","shape":[4294967296,1073741824],"data_offsets":[0,16]})"),
       "its shape needs more than 2^64"},
      {"overlap",
       with(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})"),
       "tensors 'a' [0, 16) and 'b' [8, 24) overlap"},
      {"metadata not strings", with(R"({"__metadata__":{"format":1}})"),
       "__metadata__ entry 'format' is a JSON number, expected a string"},
      {"metadata not an object", with(R"({"__metadata__":[]})"),
       "__metadata__ is a JSON array, expected an object of strings"},
      {"tensor not an object", with(R"({"t":7})"), "tensor 't' is a JSON number"},
      {"empty tensor name", with(R"({"":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
       "a tensor has an empty name"},
  };
  std::set<std::string> messages;
  for (const Corruption& c : corruptions) {
    auto file = SafetensorsFile::Parse(c.bytes, "corrupt.safetensors");
    ASSERT_FALSE(file.ok()) << c.label << " was accepted";
    const std::string message(file.status().message());
    EXPECT_NE(message.find(c.expect), std::string::npos)
        << c.label << ": message '" << message << "' lacks '" << c.expect << "'";
    EXPECT_EQ(message.rfind("corrupt.safetensors: ", 0), 0u) << message;
    EXPECT_TRUE(messages.insert(message).second) << c.label << " repeats '" << message << "'";
  }
}

TEST(SafetensorsTest, TruncationAtEveryByteIsRejected) {
  std::vector<uint8_t> bytes = MakeFile(kValidHeader, Iota(32, 1));
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_FALSE(SafetensorsFile::Parse(cut, "cut.safetensors").ok()) << n;
  }
}

TEST(HfCheckpointTest, SingleFile) {
  fs::path dir = FreshDir("tandem_hf_single");
  WriteText(dir / "config.json", R"({"model_type":"qwen3_moe","num_experts":128})");
  WriteFile(dir / "model.safetensors", MakeFile(kValidHeader, Iota(32, 1)));
  auto ckpt = HfCheckpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->config()["model_type"], "qwen3_moe");
  EXPECT_EQ((*ckpt)->tensors().size(), 2u);
  ASSERT_NE((*ckpt)->Find("w"), nullptr);
  EXPECT_EQ((*ckpt)->Find("w")->file, (dir / "model.safetensors").string());
  EXPECT_EQ((*ckpt)->Find("nope"), nullptr);
}

// Two shards listed by model.safetensors.index.json.
fs::path MakeShardedDir(const std::string& name, const std::string& index) {
  fs::path dir = FreshDir(name);
  WriteText(dir / "config.json", R"({"model_type":"qwen2"})");
  WriteFile(dir / "model-00001-of-00002.safetensors",
            MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]}})",
                     Iota(12, 10)));
  WriteFile(dir / "model-00002-of-00002.safetensors",
            MakeFile(R"({"c":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]}})", Iota(6, 50)));
  WriteText(dir / "model.safetensors.index.json", index);
  return dir;
}

const char kGoodIndex[] =
    R"({"metadata":{"total_size":18},"weight_map":{)"
    R"("a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
    R"("c":"model-00002-of-00002.safetensors"}})";

TEST(HfCheckpointTest, ShardedWithIndex) {
  fs::path dir = MakeShardedDir("tandem_hf_sharded", kGoodIndex);
  auto ckpt = HfCheckpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->tensors().size(), 3u);
  const SafetensorsTensor* c = (*ckpt)->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c->data[0], 50);
  EXPECT_EQ(c->file, (dir / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ((*ckpt)->Find("b")->data[0], 18);
}

std::string OpenError(const fs::path& dir) {
  auto ckpt = HfCheckpoint::Open(dir.string());
  EXPECT_FALSE(ckpt.ok());
  return ckpt.ok() ? "" : std::string(ckpt.status().message());
}

TEST(HfCheckpointTest, DirectoryErrors) {
  {
    fs::path dir = FreshDir("tandem_hf_noconfig");
    EXPECT_NE(OpenError(dir).find("config.json is missing"), std::string::npos);
  }
  {
    fs::path dir = FreshDir("tandem_hf_badconfig");
    WriteText(dir / "config.json", "{\"model_type\": ");
    EXPECT_NE(OpenError(dir).find("config.json: invalid JSON"), std::string::npos);
  }
  {
    fs::path dir = FreshDir("tandem_hf_noweights");
    WriteText(dir / "config.json", "{}");
    EXPECT_NE(OpenError(dir).find("neither model.safetensors.index.json nor model.safetensors"),
              std::string::npos);
  }
  EXPECT_NE(OpenError("/nonexistent/tandem_dir").find("/nonexistent/tandem_dir: not a directory"),
            std::string::npos);
  {
    fs::path dir = MakeShardedDir(
        "tandem_hf_missing_tensor",
        R"({"weight_map":{"a":"model-00001-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})");
    EXPECT_NE(OpenError(dir).find("weight_map puts tensor 'z' in model-00002-of-00002.safetensors, "
                                  "but that shard has no such tensor"),
              std::string::npos);
  }
  {
    // The index says 'c' lives in shard 1, but only shard 2 has it.
    fs::path dir = MakeShardedDir(
        "tandem_hf_wrong_shard",
        R"({"weight_map":{"a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}})");
    EXPECT_NE(OpenError(dir).find("weight_map puts tensor 'c' in model-00001-of-00002"),
              std::string::npos);
  }
  {
    fs::path dir = MakeShardedDir("tandem_hf_dup", kGoodIndex);
    WriteFile(dir / "model-00002-of-00002.safetensors",
              MakeFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Iota(4, 0)));
    EXPECT_NE(OpenError(dir).find("tensor 'a' appears in both"), std::string::npos);
  }
  {
    fs::path dir = MakeShardedDir("tandem_hf_missing_shard",
                                  R"({"weight_map":{"a":"model-00009-of-00009.safetensors"}})");
    EXPECT_NE(OpenError(dir).find((dir / "model-00009-of-00009.safetensors").string()),
              std::string::npos);
  }
  {
    fs::path dir = MakeShardedDir("tandem_hf_escape", R"({"weight_map":{"a":"../x.safetensors"}})");
    EXPECT_NE(OpenError(dir).find("which is not a file inside the directory"), std::string::npos);
  }
  {
    fs::path dir = MakeShardedDir("tandem_hf_bad_index", R"({"weights":{}})");
    EXPECT_NE(OpenError(dir).find("has no \"weight_map\" object"), std::string::npos);
  }
  {
    fs::path dir = MakeShardedDir("tandem_hf_corrupt_shard", kGoodIndex);
    WriteFile(dir / "model-00002-of-00002.safetensors", {1, 2});
    EXPECT_NE(OpenError(dir).find("model-00002-of-00002.safetensors: truncated"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace tandem::format
