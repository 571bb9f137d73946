// The byte-level BPE vocabulary that synthetic models carry: 256 byte tokens in the GPT-2
// byte-to-unicode alphabet, merges learned deterministically from a short built-in text, Qwen's
// special tokens, and [PAD<i>] tokens up to the model's vocabulary size. Small enough to build in
// milliseconds; nothing here depends on model weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/format/metadata.h"
#include "runtime/model/hparams.h"

namespace tandem::model {

// llama.cpp token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

struct SynthVocab {
  std::vector<std::string> tokens;  // byte-level alphabet (UTF-8 of the mapped code points)
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // "left right", rank = index
  int32_t bos_id = 0;               // <|endoftext|>
  int32_t eos_id = 0;               // <|im_end|>
  int32_t pad_id = 0;               // <|endoftext|>
};

// Byte tokens, learned merges and the five special tokens, without padding. Built once.
const SynthVocab& BaseSynthVocab();
// Smallest vocabulary size, a multiple of 32, that holds the base vocabulary.
int TinyVocabSize();

// The Qwen ChatML template that synthetic models carry.
extern const char kSynthChatTemplate[];

// Adds the tokenizer.* keys for the base vocabulary padded with [PAD<i>] UNUSED tokens to
// `n_vocab` entries (n_vocab >= base size). "qwen35" pre-tokenizer for qwen35moe, else "qwen2".
void AddSynthTokenizerMetadata(int n_vocab, Arch arch, format::Metadata* metadata);

}  // namespace tandem::model
