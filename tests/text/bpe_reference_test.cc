// Diffs the heap-based BPE of Tokenizer::Encode against a plain quadratic reference (rescan for
// the lowest-rank, leftmost pair after every merge) on a vocabulary trained in the test, and
// measures encode throughput on a few megabytes (the target is >= 1 MB/s on one core).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "runtime/text/pretokenizer.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/utf8.h"

namespace tandem::text {
namespace {

// Deterministic text with a skewed word distribution, digits, punctuation, code, CJK and emoji.
std::string SyntheticText(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  static const char* kSyllables[] = {"the", "an", "in",  "ing", "er",  "re", "on", "at", "tion",
                                     "ex",  "qu", "st",  "pro", "com", "ma", "ti", "ly", "ous",
                                     "Al",  "Be", "ver", "un",  "der", "ca", "lo", "mi", "ne"};
  static const char* kPunct[] = {".",  ",", "!", "?",  ";",  ":",  "...",
                                 " -", "(", ")", "\"", "'s", "'ll"};
  static const char* kOther[] = {"\u4F60\u597D",
                                 "\u4E16\u754C",
                                 "\U0001F44D",
                                 "caf\u00E9",
                                 "e\u0301",
                                 "\u00A0",
                                 "for (int i = 0; i < n; ++i) {",
                                 "\t",
                                 "  ",
                                 "\r\n",
                                 "\n\n"};
  std::vector<std::string> words;
  for (int i = 0; i < 400; ++i) {
    std::string w;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) w += kSyllables[rng() % std::size(kSyllables)];
    words.push_back(w);
  }
  std::string out;
  while (out.size() < bytes) {
    const uint32_t r = rng() % 100;
    if (r < 75) {
      // Zipf-like: small indices are much more frequent.
      const double u = (rng() % 10000 + 1) / 10000.0;
      const size_t index = static_cast<size_t>(words.size() * u * u * u) % words.size();
      out += ' ';
      out += words[index];
    } else if (r < 85) {
      out += kPunct[rng() % std::size(kPunct)];
    } else if (r < 92) {
      out += ' ';
      out += std::to_string(rng() % 100000);
    } else {
      out += kOther[rng() % std::size(kOther)];
    }
  }
  return out;
}

// Learns `n_merges` merges from `corpus` by repeatedly merging the most frequent adjacent pair
// within pre-tokenised pieces. Token ids 0..255 are the byte tokens in byte order.
Vocabulary TrainVocabulary(const std::string& corpus, int n_merges) {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back(ByteToUnicodeUtf8(static_cast<uint8_t>(b)));
    v.types.push_back(TokenType::kNormal);
  }
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(PreTokenizerKind::kQwen2);
  std::vector<PieceRange> ranges;
  EXPECT_TRUE(pre->Split(corpus, &ranges).ok());
  std::map<std::string, int> counts;
  for (const PieceRange& r : ranges) ++counts[corpus.substr(r.begin, r.end - r.begin)];
  std::vector<std::pair<std::vector<int32_t>, int>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<int32_t> symbols;
    for (char c : piece) symbols.push_back(static_cast<uint8_t>(c));
    words.emplace_back(std::move(symbols), count);
  }
  for (int m = 0; m < n_merges; ++m) {
    absl::flat_hash_map<uint64_t, int64_t> pairs;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        pairs[(uint64_t(symbols[i]) << 32) | uint32_t(symbols[i + 1])] += count;
      }
    }
    if (pairs.empty()) break;
    // Most frequent pair; ties go to the smallest key so that training is deterministic.
    std::pair<int64_t, uint64_t> best = {0, 0};
    for (const auto& [key, count] : pairs) {
      if (count > best.first || (count == best.first && key < best.second)) best = {count, key};
    }
    const auto left = static_cast<int32_t>(best.second >> 32);
    const auto right = static_cast<int32_t>(best.second & 0xFFFFFFFFu);
    const int32_t merged = v.size();
    v.tokens.push_back(v.tokens[left] + v.tokens[right]);
    v.types.push_back(TokenType::kNormal);
    v.merges.emplace_back(v.tokens[left], v.tokens[right]);
    for (auto& [symbols, count] : words) {
      std::vector<int32_t> next;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(symbols[i]);
        }
      }
      symbols.swap(next);
    }
  }
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(TokenType::kControl);
  v.eos_id = v.size() - 1;
  return v;
}

// The reference: strings, a full rescan per merge.
std::vector<int32_t> ReferenceEncode(const Vocabulary& v, const PreTokenizer& pre,
                                     std::string_view text) {
  std::map<std::pair<std::string, std::string>, size_t> ranks;
  for (size_t i = 0; i < v.merges.size(); ++i) ranks.emplace(v.merges[i], i);
  std::map<std::string, int32_t> ids;
  for (int32_t i = 0; i < v.size(); ++i) ids.emplace(v.tokens[i], i);
  std::vector<PieceRange> pieces;
  EXPECT_TRUE(pre.Split(text, &pieces).ok());
  std::vector<int32_t> out;
  for (const PieceRange& p : pieces) {
    std::vector<std::string> symbols;
    for (char c : text.substr(p.begin, p.end - p.begin)) {
      symbols.emplace_back(ByteToUnicodeUtf8(static_cast<uint8_t>(c)));
    }
    while (true) {
      size_t best_rank = SIZE_MAX, best_pos = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = ranks.find({symbols[i], symbols[i + 1]});
        if (it != ranks.end() && it->second < best_rank) {
          best_rank = it->second;
          best_pos = i;
        }
      }
      if (best_rank == SIZE_MAX) break;
      symbols[best_pos] += symbols[best_pos + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
    }
    for (const std::string& s : symbols) out.push_back(ids.at(s));
  }
  return out;
}

class TrainedVocabTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    vocab_ = new Vocabulary(TrainVocabulary(SyntheticText(60000, 1), 1200));
    absl::StatusOr<Tokenizer> tok = Tokenizer::Create(*vocab_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = new Tokenizer(std::move(*tok));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete vocab_;
  }
  static Vocabulary* vocab_;
  static Tokenizer* tok_;
};
Vocabulary* TrainedVocabTest::vocab_ = nullptr;
Tokenizer* TrainedVocabTest::tok_ = nullptr;

TEST_F(TrainedVocabTest, MatchesReferenceBpe) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(PreTokenizerKind::kQwen2);
  ASSERT_TRUE(pre.ok());
  // Fresh text (another seed) so that pieces unseen in training are covered too.
  for (uint32_t seed = 100; seed < 110; ++seed) {
    const std::string text = SyntheticText(3000, seed);
    absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, ReferenceEncode(*vocab_, *pre, text)) << "seed " << seed;
  }
  // Adversarial repetition: long runs of one letter stress tie-breaking.
  for (const std::string& text : {std::string(257, 'e'), std::string(100, ' ') + "the",
                                  std::string("thethethethethe"), std::string(64, '0')}) {
    absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, ReferenceEncode(*vocab_, *pre, text)) << text;
  }
}

TEST_F(TrainedVocabTest, EncodeThroughput) {
  const std::string text = SyntheticText(4 << 20, 42);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode(text, /*parse_special=*/true);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(ids.ok());
  const double mb_per_s = text.size() / 1e6 / seconds;
  std::printf("encode: %.2f MB in %.3f s = %.2f MB/s, %.2f bytes/token (%d merges)\n",
              text.size() / 1e6, seconds, mb_per_s, static_cast<double>(text.size()) / ids->size(),
              static_cast<int>(vocab_->merges.size()));
  EXPECT_EQ(tok_->Decode(*ids), text);
  EXPECT_LT(ids->size(), text.size() / 2);  // the merges compress
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_GE(mb_per_s, 1.0);
#endif
}

}  // namespace
}  // namespace tandem::text
