// `tandem run`: generate text from a prompt (streamed to stdout, statistics to stderr), or an
// interactive chat loop with --chat.
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/text/chat.h"
#include "runtime/text/sampler.h"
#include "runtime/base/sizes.h"
#include "runtime/engine/generate.h"
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

void PrintStats(const engine::Engine& engine, const engine::Session& session, int generated,
                engine::StopReason reason) {
  const engine::SessionStats& st = session.stats();
  std::fprintf(stderr,
               "\n[%s backend] load %.2f s | prompt %d tok, %.1f tok/s | generated %d tok, "
               "decode %.2f tok/s over %d steps | first token %.3f s | stop: %s\n",
               engine.backend_name().c_str(), engine.load_seconds(), st.prompt_tokens,
               st.prompt_tok_s(), generated, st.decode_tok_s(), st.decode_steps,
               st.time_to_first_token, engine::StopReasonName(reason));
  if (const scheduler::OnlinePlacement* p = engine.placement()) {
    std::fprintf(stderr,
                 "[placement %s] %s of experts resident (budget %s), %d plan(s), routes on "
                 "resident experts: %.1f%% of %llu\n",
                 p->description().c_str(), FormatBytes(p->resident_bytes()).c_str(),
                 FormatBytes(p->expert_budget()).c_str(), p->plans_made(), 100.0 * p->hit_rate(),
                 static_cast<unsigned long long>(p->hits() + p->misses()));
  }
}

engine::GenerateOptions GenerateOptionsOf(const RunArgs& args) {
  engine::GenerateOptions o;
  o.max_tokens = args.n_predict;
  o.stop_strings = args.stops;
  o.ignore_eos = args.ignore_eos;
  o.on_text = [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  return o;
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
    auto result = engine::Generate(*session, *sampler, *ids, GenerateOptionsOf(args));
    if (!result.ok()) return Fail(result.status());
    std::fputc('\n', stdout);
    if (args.show_stats) PrintStats(**engine, *session, result->tokens.size(), result->stop);
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
    auto result = engine::Generate(*session, *sampler, *ids, GenerateOptionsOf(args));
    if (!result.ok()) return Fail(result.status());
    std::fputc('\n', stdout);
    history.push_back({"assistant", result->text});
    auto closed = fmt->Format(history, false);
    if (!closed.ok()) return Fail(closed.status());
    // Bring the session's context up to the closed turn (the end-of-turn marker and newline).
    rendered = *full + result->text;
    if (closed->compare(0, rendered.size(), rendered) == 0 && closed->size() > rendered.size()) {
      auto tail = tok.Encode(std::string_view(*closed).substr(rendered.size()), true);
      if (!tail.ok()) return Fail(tail.status());
      std::vector<float> unused;
      if (session->n_past() + static_cast<int>(tail->size()) < session->n_ctx() &&
          session->Prefill(*tail, false, &unused).ok()) {
        rendered = *closed;
      }
    }
    if (args.show_stats) PrintStats(**engine, *session, result->tokens.size(), result->stop);
  }
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
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
