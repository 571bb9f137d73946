// `tandem run`: generate text from a prompt (streamed to stdout, statistics to stderr), or an
// interactive chat loop with --chat.
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/text/chat.h"
#include "runtime/text/sampler.h"
#include "runtime/text/stop_strings.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {
namespace {

struct RunArgs {
  engine::EngineOptions engine;
  std::string prompt;
  bool chat = false;
  std::string system;
  std::string chat_template = "auto";
  int n_predict = 128;
  text::SamplerConfig sampler;
  std::vector<std::string> stops;
  bool ignore_eos = false;
  bool show_stats = true;
};

enum class StopReason { kEos, kMaxTokens, kStopString, kContextFull };

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEos: return "end of generation token";
    case StopReason::kMaxTokens: return "max tokens";
    case StopReason::kStopString: return "stop string";
    case StopReason::kContextFull: return "context full";
  }
  return "";
}

// Prefills `prompt_tokens` after what the session holds, then samples until a stop. Streams text
// to stdout; returns the generated text.
absl::StatusOr<std::string> Generate(engine::Engine& engine, engine::Session& session,
                                     text::Sampler& sampler, const RunArgs& args,
                                     std::span<const int32_t> prompt_tokens, StopReason* reason,
                                     int* generated) {
  const text::Tokenizer& tok = *engine.tokenizer();
  if (session.n_past() + static_cast<int>(prompt_tokens.size()) >= session.n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat(
        "the prompt (", prompt_tokens.size(), " tokens, ", session.n_past(),
        " already in context) does not fit the context of ", session.n_ctx(),
        " tokens; raise --ctx"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  absl::Status s = session.Prefill(prompt_tokens, false, &logits);
  if (!s.ok()) return s;
  for (int32_t t : prompt_tokens) sampler.Accept(t);
  text::StreamingDecoder decoder(tok);
  text::StopStringMatcher stops(args.stops);
  std::string out;
  auto emit = [&out](const std::string& piece) {
    if (piece.empty()) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    out += piece;
  };
  *reason = StopReason::kMaxTokens;
  for (int i = 0; i < args.n_predict; ++i) {
    auto next = sampler.Sample(logits);
    if (!next.ok()) return next.status();
    if (i == 0) {
      session.stats().time_to_first_token =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    sampler.Accept(*next);
    ++*generated;
    if (!args.ignore_eos && tok.IsEndOfGeneration(*next)) {
      *reason = StopReason::kEos;
      break;
    }
    text::StopStringMatcher::Result r = stops.Push(decoder.Push(*next));
    emit(r.text);
    if (r.stopped) {
      *reason = StopReason::kStopString;
      break;
    }
    if (i + 1 == args.n_predict) break;
    if (session.n_past() + 1 > session.n_ctx()) {
      *reason = StopReason::kContextFull;
      break;
    }
    s = session.Decode(*next, &logits);
    if (!s.ok()) return s;
  }
  if (*reason != StopReason::kStopString) emit(stops.Push(decoder.Flush()).text + stops.Flush());
  return out;
}

void PrintStats(const engine::Engine& engine, const engine::Session& session, int generated,
                StopReason reason) {
  const engine::SessionStats& st = session.stats();
  std::fprintf(stderr,
               "\n[%s backend] load %.2f s | prompt %d tok, %.1f tok/s | generated %d tok, "
               "decode %.2f tok/s over %d steps | first token %.3f s | stop: %s\n",
               engine.backend_name().c_str(), engine.load_seconds(), st.prompt_tokens,
               st.prompt_tok_s(), generated, st.decode_tok_s(), st.decode_steps,
               st.time_to_first_token, StopReasonName(reason));
}

int RunOnce(const RunArgs& args) {
  auto engine = LoadEngine(args.engine);
  if (!engine.ok()) return Fail(engine.status());
  for (const std::string& note : (*engine)->notes()) std::fprintf(stderr, "note: %s\n", note.c_str());
  if ((*engine)->tokenizer() == nullptr) {
    return Fail(absl::FailedPreconditionError(
        "this model has no tokenizer; pass --tokenizer tokenizer.json or use `tandem logits`"));
  }
  const text::Tokenizer& tok = *(*engine)->tokenizer();
  auto sampler = text::Sampler::Create(args.sampler, (*engine)->hparams().n_vocab);
  if (!sampler.ok()) return Fail(sampler.status());
  auto session = (*engine)->NewSession();

  if (!args.chat) {
    auto ids = tok.Encode(args.prompt, /*parse_special=*/true);
    if (!ids.ok()) return Fail(ids.status());
    if (ids->empty()) return Fail(absl::InvalidArgumentError("the prompt is empty"));
    std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
    StopReason reason;
    int generated = 0;
    auto text = Generate(**engine, *session, *sampler, args, *ids, &reason, &generated);
    if (!text.ok()) return Fail(text.status());
    std::fputc('\n', stdout);
    if (args.show_stats) PrintStats(**engine, *session, generated, reason);
    return 0;
  }

  const text::Vocabulary& vocab = tok.vocabulary();
  auto fmt = text::ChatFormatter::Select(
      vocab.chat_template, args.chat_template,
      vocab.bos_id >= 0 ? std::string(tok.TokenText(vocab.bos_id)) : "",
      vocab.eos_id >= 0 ? std::string(tok.TokenText(vocab.eos_id)) : "");
  if (!fmt.ok()) return Fail(fmt.status());
  std::vector<text::ChatMessage> history;
  if (!args.system.empty()) history.push_back({"system", args.system});
  std::string rendered;  // the prompt text already in the session's context
  std::fprintf(stderr, "chat with %s; an empty line or end of input quits\n",
               (*engine)->model().source().c_str());
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    history.push_back({"user", line});
    auto full = fmt->Format(history, /*add_generation_prompt=*/true);
    if (!full.ok()) return Fail(full.status());
    // The session already holds `rendered`; feed only the new suffix of the conversation.
    if (full->compare(0, rendered.size(), rendered) != 0) {
      session->Reset();
      rendered.clear();
    }
    auto ids = tok.Encode(std::string_view(*full).substr(rendered.size()), true);
    if (!ids.ok()) return Fail(ids.status());
    StopReason reason;
    int generated = 0;
    auto reply = Generate(**engine, *session, *sampler, args, *ids, &reason, &generated);
    if (!reply.ok()) return Fail(reply.status());
    std::fputc('\n', stdout);
    history.push_back({"assistant", *reply});
    auto closed = fmt->Format(history, false);
    if (!closed.ok()) return Fail(closed.status());
    // Bring the session's context up to the closed turn (the end-of-turn marker and newline).
    rendered = *full + *reply;
    if (closed->compare(0, rendered.size(), rendered) == 0 && closed->size() > rendered.size()) {
      auto tail = tok.Encode(std::string_view(*closed).substr(rendered.size()), true);
      if (!tail.ok()) return Fail(tail.status());
      std::vector<float> unused;
      if (session->n_past() + static_cast<int>(tail->size()) < session->n_ctx() &&
          session->Prefill(*tail, false, &unused).ok()) {
        rendered = *closed;
      }
    }
    if (args.show_stats) PrintStats(**engine, *session, generated, reason);
  }
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  args->sampler.seed = 0;
  CLI::App* cmd = app.add_subcommand(
      "run", "Generate text: stream the continuation of -p PROMPT to stdout (statistics on "
             "stderr), or chat interactively with --chat.");
  AddEngineFlags(cmd, &args->engine);
  auto* prompt = cmd->add_option("-p,--prompt", args->prompt,
                                 "Prompt text (special tokens such as <|im_start|> are parsed)");
  auto* chat = cmd->add_flag("--chat", args->chat, "Interactive chat loop on stdin/stdout");
  prompt->excludes(chat);
  cmd->add_option("--system", args->system, "System message for --chat");
  cmd->add_option("--chat-template", args->chat_template,
                  "auto (the model's template, else ChatML) or chatml (built-in)")
      ->capture_default_str();
  cmd->add_option("-n,--n-predict", args->n_predict, "Maximum tokens to generate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temp", args->sampler.temperature, "Temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", args->sampler.top_k, "Keep the k most likely tokens; 0 = off")
      ->capture_default_str();
  cmd->add_option("--top-p", args->sampler.top_p, "Nucleus sampling mass; 1 = off")
      ->capture_default_str();
  cmd->add_option("--min-p", args->sampler.min_p,
                  "Drop tokens below min-p times the top probability; 0 = off")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", args->sampler.repetition_penalty,
                  "Repetition penalty over the last --repeat-last-n tokens; 1 = off")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", args->sampler.penalty_last_n,
                  "Window of the repetition penalty")
      ->capture_default_str();
  cmd->add_option("--seed", args->sampler.seed, "Sampling seed: the same seed gives the same tokens")
      ->capture_default_str();
  cmd->add_option("--stop", args->stops, "Stop when this text is generated (repeatable)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("!--no-stats", args->show_stats, "Do not print statistics to stderr");
  cmd->callback([args, cmd, exit_code] {
    if (!args->chat && cmd->count("--prompt") == 0) {
      *exit_code = Fail(absl::InvalidArgumentError("give a prompt with -p, or use --chat"));
      return;
    }
    *exit_code = RunOnce(*args);
  });
}

}  // namespace tandem::cli
