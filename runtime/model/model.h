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
#include <unordered_map>
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
  // Subclasses call this once tensors_ is final; Find() then answers by hash lookup (a linear
  // scan otherwise).
  void IndexTensors();

  std::string source_;
  HParams hparams_;
  format::Metadata metadata_;
  std::vector<format::TensorInfo> tensors_;

 private:
  std::unordered_map<std::string, size_t> index_;  // name -> index in tensors_
};

struct OpenOptions {
  // false: describe tensors (names, dims, types, bytes) without producing their bytes. A GGUF file
  // is always mapped (free); synthetic models skip generation.
  bool materialize = true;
  // true: a GGUF file whose tensors do not match its architecture's tensor map is an error listing
  // the problems. false (inspection): it opens, and ValidateTensors() reports the problems.
  bool validate = true;
  ProgressFn progress;
};

// The --help text for MODEL arguments: the accepted forms and the synth:NAME?KEY=VALUE syntax.
extern const char kModelSpecHelp[];

// Opens "synth:NAME[?KEY=VALUE&...]" (keys: seed, expert_ff, attention, quant, experts, shexp,
// dense, router, embed, output; see kModelSpecHelp), a .gguf file or a Hugging Face directory.
absl::StatusOr<std::unique_ptr<Model>> OpenModel(const std::string& spec,
                                                 const OpenOptions& options = {});

}  // namespace tandem::model
