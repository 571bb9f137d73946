// `tandem logits`: raw float32 logits for given token ids, for oracles and hidden checks.
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {

void RegisterLogits(CLI::App& app, int* exit_code) {
  struct Args {
    engine::EngineOptions engine;
    std::string tokens;
    bool all_positions = false;
    int decode_from = 0;
    std::string out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "logits",
      "Write raw little-endian float32 logits (positions x vocab) for a list of token ids.\n"
      "Without --all-positions only the last position's row is written.");
  AddEngineFlags(cmd, &args->engine);
  cmd->add_option("--tokens", args->tokens, "Comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_flag("--all-positions", args->all_positions, "Write a row for every position");
  cmd->add_option("--decode-from", args->decode_from,
                  "Prefill the first K tokens in one pass, then feed the rest one token at a time "
                  "(0: one prefill of all tokens)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--output", args->out, "Output file (float32, positions x vocab)")->required();
  cmd->callback([args, exit_code] {
    auto tokens = ParseTokenList(args->tokens);
    if (!tokens.ok()) return void(*exit_code = Fail(tokens.status()));
    const int T = static_cast<int>(tokens->size());
    if (args->decode_from > T) {
      return void(*exit_code = Fail(absl::InvalidArgumentError(absl::StrCat(
                      "--decode-from ", args->decode_from, " exceeds the ", T, " tokens given"))));
    }
    auto engine = LoadEngine(args->engine);
    if (!engine.ok()) return void(*exit_code = Fail(engine.status()));
    auto session = (*engine)->NewSession();
    std::vector<float> all, step;
    const int k = args->decode_from > 0 ? args->decode_from : T;
    absl::Status s = session->Prefill(std::span(*tokens).first(k), args->all_positions, &all);
    for (int t = k; s.ok() && t < T; ++t) {
      s = session->Decode((*tokens)[t], &step);
      if (s.ok()) {
        if (!args->all_positions) all.clear();
        all.insert(all.end(), step.begin(), step.end());
      }
    }
    if (!s.ok()) return void(*exit_code = Fail(s));
    s = WriteFileAtomically(args->out, std::span(reinterpret_cast<const uint8_t*>(all.data()),
                                                 all.size() * sizeof(float)));
    if (!s.ok()) return void(*exit_code = Fail(s));
    const int vocab = (*engine)->hparams().n_vocab;
    std::fprintf(stderr, "wrote %zu x %d logits to %s\n", all.size() / vocab, vocab,
                 args->out.c_str());
  });
}

}  // namespace tandem::cli
