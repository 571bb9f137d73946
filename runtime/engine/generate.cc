#include "runtime/engine/generate.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/text/stop_strings.h"

namespace tandem::engine {

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfGeneration: return "end of generation token";
    case StopReason::kMaxTokens: return "max tokens";
    case StopReason::kStopString: return "stop string";
    case StopReason::kContextFull: return "context full";
  }
  return "";
}

absl::StatusOr<GenerateResult> Generate(Session& session, text::Sampler& sampler,
                                        std::span<const int32_t> prompt,
                                        const GenerateOptions& options) {
  const text::Tokenizer* tok = session.engine().tokenizer();
  if (tok == nullptr) {
    return absl::FailedPreconditionError("text generation needs a tokenizer; this model has none");
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (session.n_past() + static_cast<int>(prompt.size()) >= session.n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat(
        "the prompt (", prompt.size(), " tokens, ", session.n_past(),
        " already in context) does not fit the context of ", session.n_ctx(), " tokens"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  TANDEM_RETURN_IF_ERROR(session.Prefill(prompt, false, &logits));
  for (int32_t t : prompt) sampler.Accept(t);

  GenerateResult result;
  text::StreamingDecoder decoder(*tok);
  text::StopStringMatcher stops(options.stop_strings);
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    result.text += piece;
    if (options.on_text) options.on_text(piece);
  };
  for (int i = 0; i < options.max_tokens; ++i) {
    TANDEM_ASSIGN_OR_RETURN(const int32_t next, sampler.Sample(logits));
    if (i == 0) {
      session.stats().time_to_first_token =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    sampler.Accept(next);
    result.tokens.push_back(next);
    if (!options.ignore_eos && tok->IsEndOfGeneration(next)) {
      result.stop = StopReason::kEndOfGeneration;
      break;
    }
    const text::StopStringMatcher::Result r = stops.Push(decoder.Push(next));
    emit(r.text);
    if (r.stopped) {
      result.stop = StopReason::kStopString;
      return result;
    }
    if (i + 1 == options.max_tokens) break;
    if (session.n_past() + 1 > session.n_ctx()) {
      result.stop = StopReason::kContextFull;
      break;
    }
    TANDEM_RETURN_IF_ERROR(session.Decode(next, &logits));
  }
  emit(stops.Push(decoder.Flush()).text);
  emit(stops.Flush());
  return result;
}

}  // namespace tandem::engine
