// Loads a Hugging Face checkpoint directory (config.json + safetensors, sharded or not) as a Model in
// llama.cpp's GGUF conventions, doing what llama.cpp's converter does: +1 baked into zero-centred
// norms, ssm_a = -exp(A_log), qwen3next's qkvz regrouped, qwen35moe's value heads tiled, experts
// stacked. Tensors that need no change stay in the file mapping (zero copy).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/model.h"

namespace tandem::model {

absl::StatusOr<std::unique_ptr<Model>> OpenHfModel(const std::string& dir);

}  // namespace tandem::model
