// The regex pre-tokenizer of Qwen-family byte-level BPE (spec §4.4): splits text into the pieces
// that BPE then merges independently. Uses PCRE2 (UTF + UCP, JIT when available) with the HF form
// of the patterns. Thread-safe after construction; it never sees invalid UTF-8 (callers sanitise).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::text {

enum class PreTokenizerKind {
  kQwen2,   // Qwen1.5 / 2 / 2.5 / 3
  kQwen35,  // Qwen3.5 / 3.6: combining marks join letter runs
};

const char* PreTokenizerKindName(PreTokenizerKind kind);

// The exact HF patterns (as they appear in tokenizer.json's Split pre-tokenizer).
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string_view PreTokenizerPattern(PreTokenizerKind kind);

// A piece is a byte range [begin, end) of the input.
struct PieceRange {
  size_t begin;
  size_t end;
  bool operator==(const PieceRange&) const = default;
};

class PreTokenizer {
 public:
  static absl::StatusOr<PreTokenizer> Create(PreTokenizerKind kind);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  PreTokenizerKind kind() const { return kind_; }
  bool jit() const;

  // Appends the pieces of `text` (valid UTF-8) to `pieces`. Every byte of `text` lands in exactly
  // one piece, in order (text the regex does not match becomes a piece of its own, as HF's
  // "Isolated" split behaviour does). Fails only when PCRE2 reports a matching error.
  absl::Status Split(std::string_view text, std::vector<PieceRange>* pieces) const;

  // Convenience for tests and tools: the pieces as strings.
  absl::StatusOr<std::vector<std::string>> SplitToStrings(std::string_view text) const;

 private:
  struct Compiled;
  explicit PreTokenizer(PreTokenizerKind kind, std::unique_ptr<Compiled> compiled);
  PreTokenizerKind kind_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace tandem::text
