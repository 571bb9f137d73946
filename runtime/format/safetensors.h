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

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;     // torch order (row-major, last axis contiguous)
  quant::GgmlType type;           // kF32, kF16 or kBF16
  std::span<const uint8_t> data;  // into the mapping
  std::string file;               // the shard it came from
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes,
                                                                std::string name);
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& user_metadata() const { return user_metadata_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> map_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> user_metadata_;  // "__metadata__"
};

// A Hugging Face model directory: config.json plus one safetensors file or an index of shards.
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
