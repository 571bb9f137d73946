// A model as every consumer sees it: hyper-parameters, GGUF-style metadata, and tensors with
// llama.cpp names and ggml dims, whatever the source (GGUF file, synth:NAME, HF directory).
// Tensor bytes live in a file mapping or in buffers this object owns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/format/metadata.h"
#include "runtime/format/tensor_info.h"
#include "runtime/model/hparams.h"

namespace tandem::model {

// Progress of long loads and syntheses: done and total in bytes.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

class Model {
 public:
  virtual ~Model() = default;
  // "synth:tiny-qwen3next", a file path or a directory.
  const std::string& source() const { return source_; }
  const HParams& hparams() const { return hparams_; }
  const format::Metadata& metadata() const { return metadata_; }
  const std::vector<format::TensorInfo>& tensors() const { return tensors_; }
  const format::TensorInfo* Find(std::string_view name) const;
  // True when every tensor's data pointer is set.
  bool materialized() const;

 protected:
  std::string source_;
  HParams hparams_;
  format::Metadata metadata_;
  std::vector<format::TensorInfo> tensors_;
};

struct OpenOptions {
  // false: describe tensors (names, dims, types, bytes) without producing their bytes. A GGUF file
  // is always mapped (free); synthetic models skip generation.
  bool materialize = true;
  ProgressFn progress;
};

// Opens "synth:NAME[?quant=...&seed=N]", a .gguf file or a Hugging Face directory.
absl::StatusOr<std::unique_ptr<Model>> OpenModel(const std::string& spec,
                                                 const OpenOptions& options = {});

}  // namespace tandem::model
