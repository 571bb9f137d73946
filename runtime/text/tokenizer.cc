// Byte-level BPE encode/decode. See tokenizer.h for the pipeline and its guarantees.
#include "runtime/text/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"
#include "runtime/text/utf8.h"

namespace tandem::text {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// "<0xAB>" -> 0xAB, else -1.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

}  // namespace

// Per-call working memory of BPE, reused across the pieces of one Encode call. Symbols form a
// doubly linked list over the piece's byte positions; a dead symbol has id -1.
struct Tokenizer::BpeScratch {
  struct Candidate {
    int32_t rank;
    int32_t left;   // position of the left symbol
    int32_t right;  // position of the right symbol
    int32_t left_symbol;
    int32_t right_symbol;
    int32_t result;  // symbol of the merged pair
  };
  // Heap order: the top is the lowest rank, then the leftmost position.
  static bool Later(const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
  std::vector<int32_t> symbol;
  std::vector<int32_t> prev;
  std::vector<int32_t> next;
  std::vector<Candidate> heap;
  std::vector<PieceRange> pieces;
};

Tokenizer::Tokenizer(Vocabulary vocab, PreTokenizer pre)
    : vocab_(std::move(vocab)), pre_(std::move(pre)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::Create(Vocabulary vocab) {
  TANDEM_RETURN_IF_ERROR(vocab.Validate());
  TANDEM_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(vocab.pre));
  Tokenizer tokenizer(std::move(vocab), std::move(pre));
  TANDEM_RETURN_IF_ERROR(tokenizer.BuildTables());
  return tokenizer;
}

int32_t Tokenizer::InternSymbol(std::string text) {
  auto [it, inserted] = symbol_ids_.try_emplace(
      std::move(text), vocab_.size() + static_cast<int32_t>(extra_symbols_.size()));
  if (inserted) extra_symbols_.push_back(it->first);
  return it->second;
}

absl::Status Tokenizer::BuildTables() {
  const int32_t n = vocab_.size();
  symbol_ids_.reserve(static_cast<size_t>(n) + vocab_.merges.size());
  int duplicates = 0;
  for (int32_t id = 0; id < n; ++id) {
    // The first id wins when a text repeats.
    if (!symbol_ids_.try_emplace(vocab_.tokens[id], id).second) ++duplicates;
  }
  if (duplicates > 0) {
    warnings_.push_back(absl::StrCat("tokenizer: ", duplicates,
                                     " token texts repeat; the lowest id is used when encoding"));
  }

  int missing_bytes = 0;
  for (int b = 0; b < 256; ++b) {
    byte_symbol_[b] = InternSymbol(std::string(ByteToUnicodeUtf8(static_cast<uint8_t>(b))));
    if (byte_symbol_[b] >= n) ++missing_bytes;
  }
  if (missing_bytes > 0) {
    warnings_.push_back(absl::StrCat(
        "tokenizer: ", missing_bytes, " byte values have no token; text containing them ",
        vocab_.unk_id >= 0 ? "encodes to the unknown token" : "cannot be encoded"));
  }

  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const auto& [left_text, right_text] = vocab_.merges[rank];
    const int32_t left = InternSymbol(left_text);
    const int32_t right = InternSymbol(right_text);
    const int32_t result = InternSymbol(left_text + right_text);
    // A repeated pair keeps its first (lowest) rank.
    merges_.try_emplace(PairKey(left, right), MergeInfo{static_cast<int32_t>(rank), result});
  }

  token_bytes_.resize(n);
  end_of_generation_.assign(n, false);
  int bad_byte_tokens = 0;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (vocab_.types[id]) {
      case TokenType::kNormal:
        token_bytes_[id] = ByteLevelToBytes(text);
        break;
      case TokenType::kByte: {
        const int byte = ParseByteToken(text);
        if (byte < 0) {
          ++bad_byte_tokens;
          token_bytes_[id] = text;
        } else {
          token_bytes_[id] = std::string(1, static_cast<char>(byte));
        }
        break;
      }
      case TokenType::kUnused:
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        token_bytes_[id] = text;
        if (!text.empty()) {
          specials_.push_back({text, id, vocab_.types[id] == TokenType::kUserDefined});
        }
        break;
    }
    end_of_generation_[id] =
        id == vocab_.eos_id || id == vocab_.eot_id ||
        (vocab_.types[id] == TokenType::kControl && IsEndOfGenerationText(text));
  }
  if (bad_byte_tokens > 0) {
    warnings_.push_back(
        absl::StrCat("tokenizer: ", bad_byte_tokens,
                     " BYTE tokens are not of the form <0xAB>; they decode as text"));
  }
  std::stable_sort(
      specials_.begin(), specials_.end(),
      [](const SpecialToken& a, const SpecialToken& b) { return a.text.size() > b.text.size(); });
  return absl::OkStatus();
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= size()) return {};
  return vocab_.tokens[id];
}

TokenType Tokenizer::TokenTypeOf(int32_t id) const {
  if (id < 0 || id >= size()) return TokenType::kUnused;
  return vocab_.types[id];
}

int32_t Tokenizer::FindToken(std::string_view text) const {
  auto it = symbol_ids_.find(absl::string_view(text.data(), text.size()));
  if (it == symbol_ids_.end() || it->second >= size()) return -1;
  return it->second;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < size() && end_of_generation_[id];
}

absl::Status Tokenizer::EncodePiece(std::string_view piece, BpeScratch* s,
                                    std::vector<int32_t>* out) const {
  const int32_t n_vocab = size();
  const auto m = static_cast<int32_t>(piece.size());
  s->symbol.resize(m);
  s->prev.resize(m);
  s->next.resize(m);
  s->heap.clear();
  for (int32_t i = 0; i < m; ++i) {
    s->symbol[i] = byte_symbol_[static_cast<uint8_t>(piece[i])];
    s->prev[i] = i - 1;
    s->next[i] = i + 1 < m ? i + 1 : -1;
  }
  auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(PairKey(s->symbol[left], s->symbol[right]));
    if (it == merges_.end()) return;
    s->heap.push_back(
        {it->second.rank, left, right, s->symbol[left], s->symbol[right], it->second.result});
    std::push_heap(s->heap.begin(), s->heap.end(), BpeScratch::Later);
  };
  for (int32_t i = 0; i + 1 < m; ++i) push_pair(i, i + 1);
  while (!s->heap.empty()) {
    std::pop_heap(s->heap.begin(), s->heap.end(), BpeScratch::Later);
    const BpeScratch::Candidate c = s->heap.back();
    s->heap.pop_back();
    // Stale when either side has changed since the pair was queued. A symbol's id only ever
    // grows into a longer string, so an unchanged id means an unchanged symbol.
    if (s->symbol[c.left] != c.left_symbol || s->next[c.left] != c.right ||
        s->symbol[c.right] != c.right_symbol) {
      continue;
    }
    s->symbol[c.left] = c.result;
    s->symbol[c.right] = -1;
    const int32_t after = s->next[c.right];
    s->next[c.left] = after;
    if (after >= 0) s->prev[after] = c.left;
    push_pair(s->prev[c.left], c.left);
    push_pair(c.left, after);
  }
  for (int32_t i = 0; i >= 0 && i < m; i = s->next[i]) {
    const int32_t symbol = s->symbol[i];
    if (symbol < n_vocab) {
      out->push_back(symbol);
      continue;
    }
    // Not a token: fall back to the tokens of its single bytes.
    const std::string bytes = ByteLevelToBytes(extra_symbols_[symbol - n_vocab]);
    for (char byte : bytes) {
      const int32_t byte_symbol = byte_symbol_[static_cast<uint8_t>(byte)];
      if (byte_symbol < n_vocab) {
        out->push_back(byte_symbol);
      } else if (vocab_.unk_id >= 0) {
        out->push_back(vocab_.unk_id);
      } else {
        return absl::InvalidArgumentError(
            absl::StrFormat("tokenizer: byte 0x%02X has no token and the vocabulary has no "
                            "unknown token",
                            static_cast<uint8_t>(byte)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view input, bool parse_special,
                                                       bool add_special) const {
  std::string sanitized;
  std::string_view text = input;
  if (!IsValidUtf8(input)) {
    sanitized = SanitizeUtf8(input);
    text = sanitized;
  }

  // 1. Special-token partition.
  struct Fragment {
    size_t begin;
    size_t end;
    int32_t token;  // >= 0: a special token; -1: raw text
  };
  std::vector<Fragment> fragments = {{0, text.size(), -1}};
  std::vector<Fragment> next_fragments;
  for (const SpecialToken& special : specials_) {
    if (!special.always && !parse_special) continue;
    if (text.find(special.text) == std::string_view::npos) continue;
    next_fragments.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next_fragments.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.begin, f.end - f.begin);
      size_t pos = 0;
      for (size_t found = raw.find(special.text); found != std::string_view::npos;
           found = raw.find(special.text, pos)) {
        if (found > pos) next_fragments.push_back({f.begin + pos, f.begin + found, -1});
        next_fragments.push_back(
            {f.begin + found, f.begin + found + special.text.size(), special.id});
        pos = found + special.text.size();
      }
      if (pos < raw.size()) next_fragments.push_back({f.begin + pos, f.end, -1});
    }
    fragments.swap(next_fragments);
  }

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  BpeScratch scratch;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      ids.push_back(f.token);
      continue;
    }
    if (f.end == f.begin) continue;
    // 2.–5. Pre-tokenise, then BPE each piece.
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    scratch.pieces.clear();
    TANDEM_RETURN_IF_ERROR(pre_.Split(raw, &scratch.pieces));
    for (const PieceRange& piece : scratch.pieces) {
      TANDEM_RETURN_IF_ERROR(
          EncodePiece(raw.substr(piece.begin, piece.end - piece.begin), &scratch, &ids));
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) ids.push_back(vocab_.eos_id);
  return ids;
}

void Tokenizer::AppendTokenBytes(int32_t id, bool render_special, std::string* out) const {
  if (id < 0 || id >= size()) return;
  const TokenType type = vocab_.types[id];
  if ((type == TokenType::kControl || type == TokenType::kUnknown) && !render_special) return;
  out->append(token_bytes_[id]);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) AppendTokenBytes(id, render_special, &out);
  return out;
}

std::string StreamingDecoder::Push(int32_t id) {
  tokenizer_->AppendTokenBytes(id, render_special_, &pending_);
  const size_t tail = IncompleteUtf8Tail(pending_);
  const std::string_view ready = std::string_view(pending_).substr(0, pending_.size() - tail);
  std::string out = IsValidUtf8(ready) ? std::string(ready) : SanitizeUtf8(ready);
  pending_.erase(0, pending_.size() - tail);
  return out;
}

std::string StreamingDecoder::Flush() {
  std::string out;
  if (!pending_.empty()) {
    // Only an incomplete sequence can be pending (Push emits everything else).
    out = std::string(kReplacementUtf8);
    pending_.clear();
  }
  return out;
}

}  // namespace tandem::text
