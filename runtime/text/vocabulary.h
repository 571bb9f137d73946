// The data of a byte-level BPE tokenizer (spec §4.1): token texts, types, ranked merges, special
// ids and the chat template, loaded from GGUF metadata or from a Hugging Face tokenizer.json.
// Loading checks everything a file can get wrong and says which key or path is at fault; it does
// not build lookup tables (Tokenizer::Create does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/format/metadata.h"
#include "runtime/text/pretokenizer.h"

namespace tandem::text {

// Values as stored in tokenizer.ggml.token_type (0, "undefined", is read as kNormal).
enum class TokenType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

const char* TokenTypeName(TokenType type);

struct Vocabulary {
  // Text of each token by id. NORMAL tokens are in the byte-level alphabet ("Ġhello"); CONTROL and
  // USER_DEFINED tokens hold their literal text ("<|im_end|>", "<think>"); BYTE tokens are
  // "<0xAB>".
  std::vector<std::string> tokens;
  std::vector<TokenType> types;  // same length as tokens
  // Merges in rank order (index 0 merges first), as byte-level strings.
  std::vector<std::pair<std::string, std::string>> merges;

  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t eot_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  PreTokenizerKind pre = PreTokenizerKind::kQwen2;
  std::optional<std::string> chat_template;

  // Non-fatal findings of the loader (for example a missing tokenizer.ggml.pre), for the caller to
  // show to the user.
  std::vector<std::string> warnings;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }

  // Reads the tokenizer.* keys of a GGUF file (spec §4.1/§4.2). Errors: tokenizer.ggml.model other
  // than "gpt2", missing/mistyped arrays, a merge without a separating space, an unknown
  // tokenizer.ggml.pre (the message lists the supported ones), a special id outside the vocabulary
  // (the message names the key). A missing tokenizer.ggml.pre means qwen2, with a warning.
  static absl::StatusOr<Vocabulary> FromGgufMetadata(const format::Metadata& metadata);

  // Reads a Hugging Face tokenizer.json (model.vocab, model.merges as "a b" strings or [a, b]
  // pairs, added_tokens, the Split pre-tokenizer regex) and, when present beside it,
  // tokenizer_config.json (bos/eos/pad tokens, add_bos/add_eos, chat_template) and
  // chat_template.jinja. Ids missing from the file become "[PAD<id>]" UNUSED tokens; with
  // `min_vocab_size` the vocabulary is padded the same way up to the model's embedding rows.
  static absl::StatusOr<Vocabulary> FromHfTokenizerJson(const std::string& path,
                                                        int32_t min_vocab_size = 0);

  // Structural checks shared by both loaders and by hand-built vocabularies: sizes agree, special
  // ids are in range.
  absl::Status Validate() const;

  // Writes the tokenizer.* keys llama.cpp reads (model "gpt2", pre, tokens, token_type, merges,
  // special ids, add_bos/add_eos, chat_template) so that FromGgufMetadata reads them back.
  void AppendToGgufMetadata(format::Metadata* metadata) const;
};

// True for texts that end a turn or a document (<|im_end|>, <|endoftext|>, <|eot_id|>, ...). The
// loaders force such tokens to CONTROL, as llama.cpp does.
bool IsEndOfGenerationText(std::string_view text);

// Maps a GGUF tokenizer.ggml.pre name to a pre-tokenizer; the error lists the supported names.
absl::StatusOr<PreTokenizerKind> PreTokenizerKindFromName(std::string_view name);

}  // namespace tandem::text
