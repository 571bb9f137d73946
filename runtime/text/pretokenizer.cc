// PCRE2-backed pre-tokenizer. See pretokenizer.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/text/pretokenizer.h"

#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace tandem::text {
namespace {

std::string Pcre2ErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return absl::StrCat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

const char* PreTokenizerKindName(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kQwen2:
      return "qwen2";
    case PreTokenizerKind::kQwen35:
      return "qwen35";
  }
  return "?";
}

std::string_view PreTokenizerPattern(PreTokenizerKind kind) {
  return kind == PreTokenizerKind::kQwen35 ? kQwen35Pattern : kQwen2Pattern;
}

PreTokenizer::PreTokenizer(PreTokenizerKind kind, std::unique_ptr<Compiled> compiled)
    : kind_(kind), compiled_(std::move(compiled)) {}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

bool PreTokenizer::jit() const { return compiled_->jit; }

absl::StatusOr<PreTokenizer> PreTokenizer::Create(PreTokenizerKind kind) {
  const std::string_view pattern = PreTokenizerPattern(kind);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto compiled = std::make_unique<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled->code == nullptr) {
    return absl::InternalError(absl::StrCat("pre-tokenizer ", PreTokenizerKindName(kind),
                                            ": PCRE2 cannot compile the pattern at offset ",
                                            error_offset, ": ", Pcre2ErrorText(error_code)));
  }
  // JIT is an optimisation only: without it (or where the library lacks it) the interpreter runs.
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  return PreTokenizer(kind, std::move(compiled));
}

absl::Status PreTokenizer::Split(std::string_view text, std::vector<PieceRange>* pieces) const {
  if (text.empty()) return absl::OkStatus();
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr));
  if (md == nullptr) return absl::ResourceExhaustedError("PCRE2: cannot allocate match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md.get());
  size_t offset = 0;
  while (offset < text.size()) {
    // The caller guarantees valid UTF-8; skipping the check keeps matching linear in the input.
    int rc = pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                         md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(compiled_->code, subject, text.size(), offset,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces->push_back({offset, text.size()});
      break;
    }
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("pre-tokenizer ", PreTokenizerKindName(kind_),
                                              ": PCRE2 matching failed at byte ", offset, ": ",
                                              Pcre2ErrorText(rc)));
    }
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin > offset) pieces->push_back({offset, begin});
    if (end > begin) {
      pieces->push_back({begin, end});
      offset = end;
    } else {
      // None of the alternatives can match empty; guard against looping all the same by making
      // the next code point a piece of its own.
      size_t next = begin + 1;
      while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80) ++next;
      pieces->push_back({begin, next});
      offset = next;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PreTokenizer::SplitToStrings(std::string_view text) const {
  std::vector<PieceRange> ranges;
  absl::Status status = Split(text, &ranges);
  if (!status.ok()) return status;
  std::vector<std::string> out;
  out.reserve(ranges.size());
  for (const PieceRange& r : ranges) out.emplace_back(text.substr(r.begin, r.end - r.begin));
  return out;
}

}  // namespace tandem::text
