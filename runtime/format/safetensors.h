// Hugging Face checkpoints: safetensors files (F32/F16/BF16; JSON header; bounds-checked), sharded
// checkpoints through model.safetensors.index.json, and config.json. Tensors keep torch's shape
// order here ([out, in]); converting to ggml dims is the model layer's job.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/base/mapped_file.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::format {

// Sanity limit on the JSON header, checked before it is parsed.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;                    // torch order (row-major, last axis contiguous)
  quant::GgmlType type = quant::GgmlType::kF32;  // kF32, kF16 or kBF16
  std::span<const uint8_t> data;                 // into the mapping
  std::string file;                              // the shard it came from
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses bytes that stay owned by the caller (fuzzing, tests). `name` appears in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes,
                                                                std::string name);
  const std::string& name() const { return name_; }
  // In file order (ascending data offset).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& user_metadata() const { return user_metadata_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> map_;  // null when parsed from caller-owned bytes
  std::string name_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> user_metadata_;  // "__metadata__"
};

// A Hugging Face model directory: config.json plus one safetensors file or an index of shards
// (model.safetensors.index.json, whose weight_map names the shard of each tensor). Shard names must
// stay inside the directory. A tensor may appear in one shard only.
class HfCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<HfCheckpoint>> Open(const std::string& dir);
  const nlohmann::json& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  // All tensors of all shards, by name.
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(const std::string& name) const;

 private:
  HfCheckpoint() = default;
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace tandem::format
