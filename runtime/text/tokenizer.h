// Byte-level BPE tokenizer for Qwen-family models (spec §4.3–§4.5): special-token partition, regex
// pre-tokenisation, GPT-2 byte mapping, rank-ordered merges; and the inverse (Decode and a
// streaming decoder that only ever emits complete UTF-8). Immutable after Create, so Encode/Decode
// may run on several threads at once. It knows nothing of models or chat formats.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "runtime/text/pretokenizer.h"
#include "runtime/text/vocabulary.h"

namespace tandem::text {

class Tokenizer {
 public:
  // Builds the lookup tables. Fails on an invalid vocabulary (Vocabulary::Validate).
  static absl::StatusOr<Tokenizer> Create(Vocabulary vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  const Vocabulary& vocabulary() const { return vocab_; }
  int32_t size() const { return vocab_.size(); }
  // Non-fatal findings of Create (for example byte values without a token), for the user.
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Text to ids.
  // 1. Special-token partition: the texts of USER_DEFINED tokens always, and of CONTROL and
  //    UNKNOWN tokens when `parse_special`, are cut out as single tokens. Tokens are taken longest
  //    text first (ties: lower id), each splitting every remaining raw fragment at all of its
  //    non-overlapping occurrences, left to right.
  // 2. Each raw fragment is split by the pre-tokenizer regex (invalid UTF-8 input bytes are first
  //    replaced by U+FFFD, one per byte).
  // 3. Each piece's bytes become byte-level symbols, merged by rank (lowest rank first, leftmost
  //    on ties), and each final symbol is looked up; a symbol that is not a token falls back to
  //    its single-byte tokens (then to the unknown token; with neither, Encode fails).
  // `add_special` prepends BOS / appends EOS where the vocabulary's add_bos / add_eos ask for it.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special,
                                              bool add_special = false) const;

  // The stored text of a token (byte-level alphabet for NORMAL tokens); empty for ids out of range.
  std::string_view TokenText(int32_t id) const;
  TokenType TokenTypeOf(int32_t id) const;
  // Id of the token whose stored text is exactly `text`, or -1.
  int32_t FindToken(std::string_view text) const;
  // True for eos, eot and tokens whose text marks an end of turn (<|im_end|>, <|endoftext|>, ...).
  bool IsEndOfGeneration(int32_t id) const;

  // Appends the bytes of one token: NORMAL through the inverse byte map; BYTE as its byte;
  // USER_DEFINED as its literal text; CONTROL and UNKNOWN as their literal text only when
  // `render_special`; UNUSED and ids outside the vocabulary as nothing. The bytes of one token may
  // end inside a UTF-8 sequence.
  void AppendTokenBytes(int32_t id, bool render_special, std::string* out) const;

  // Concatenated token bytes (may be invalid UTF-8 if the ids split a character).
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

 private:
  Tokenizer(Vocabulary vocab, PreTokenizer pre);
  absl::Status BuildTables();
  int32_t InternSymbol(std::string text);

  struct BpeScratch;
  // Appends the ids of one pre-tokenised piece.
  absl::Status EncodePiece(std::string_view piece, BpeScratch* scratch,
                           std::vector<int32_t>* out) const;

  struct MergeInfo {
    int32_t rank;
    int32_t result;  // symbol id of the merged string
  };
  struct SpecialToken {
    std::string_view text;  // points into vocab_.tokens
    int32_t id;
    bool always;  // USER_DEFINED: matched even without parse_special
  };

  Vocabulary vocab_;
  PreTokenizer pre_;
  std::vector<std::string> warnings_;
  // Symbol ids: [0, vocab size) are tokens; larger ids are byte-level strings reachable by merges
  // that are not tokens themselves (kept so that BPE follows string semantics exactly).
  absl::flat_hash_map<std::string, int32_t> symbol_ids_;
  std::vector<std::string> extra_symbols_;
  absl::flat_hash_map<uint64_t, MergeInfo> merges_;  // key: left symbol << 32 | right symbol
  std::array<int32_t, 256> byte_symbol_{};           // symbol of each byte's mapped character
  std::vector<std::string> token_bytes_;             // decoded bytes of every token (by type rules)
  std::vector<SpecialToken> specials_;               // longest text first
  std::vector<bool> end_of_generation_;
};

// Turns a stream of token ids into text that is always complete, valid UTF-8: bytes of a
// character split across tokens are held back until the character is complete. Bytes that can
// never become valid are replaced by U+FFFD (one per byte). Holds a reference to the tokenizer.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(&tokenizer), render_special_(render_special) {}

  // Adds one token; returns the text that is now complete (possibly empty).
  std::string Push(int32_t id);
  // Ends the stream: returns what is held back, with an incomplete trailing sequence replaced by
  // one U+FFFD. The decoder is then empty and may be reused.
  std::string Flush();
  void Reset() { pending_.clear(); }
  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace tandem::text
