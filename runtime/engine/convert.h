// `tandem convert`: a Hugging Face checkpoint directory (qwen3_moe, qwen3_next, qwen3_5_moe) to a
// GGUF file with llama.cpp's conventions. Norms, ssm parameters and the router stay f32; other
// matrices take `type_name` ("f32", "q8_0", "q4_k", ...). Nothing is left behind on failure.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace tandem::engine {

absl::Status ConvertHfToGguf(const std::string& dir, const std::string& out,
                             const std::string& type_name);

}  // namespace tandem::engine
