// Text generation on a Session: prefill a prompt, then sample token by token until an end-of-
// generation token, the token limit, a stop string or the end of the context. Text is handed to
// a callback as it becomes complete UTF-8, never including any part of a stop string.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine/engine.h"
#include "runtime/text/sampler.h"

namespace tandem::engine {

enum class StopReason { kEndOfGeneration, kMaxTokens, kStopString, kContextFull };
const char* StopReasonName(StopReason reason);

struct GenerateOptions {
  int max_tokens = 128;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;  // keep going past end-of-generation tokens
  // Receives each newly complete piece of text (may be called with nothing for many tokens).
  std::function<void(const std::string& text)> on_text;
};

struct GenerateResult {
  std::string text;               // everything handed to on_text
  std::vector<int32_t> tokens;    // sampled tokens, the end-of-generation token included
  StopReason stop = StopReason::kMaxTokens;
};

// The session's engine must have a tokenizer. The prompt must fit the remaining context.
absl::StatusOr<GenerateResult> Generate(Session& session, text::Sampler& sampler,
                                        std::span<const int32_t> prompt,
                                        const GenerateOptions& options);

}  // namespace tandem::engine
