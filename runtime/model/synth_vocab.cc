// Builds the synthetic models' vocabulary: byte tokens, BPE merges learned by a plain greedy pass
// over kTrainingText (most frequent adjacent pair first, ties broken by the pair's text, so the
// result never changes), special tokens and padding. The splitter used for training approximates
// the qwen2 pre-tokenizer; the merges only need to be deterministic, not optimal.
#include "runtime/model/synth_vocab.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/text/utf8.h"
#include "runtime/text/vocabulary.h"

namespace tandem::model {
namespace {

// Merges learned from the training text (fewer when pairs run out of repeats).
constexpr int kMaxMerges = 400;

// Written for this project: a little English prose and a little code, so that common words,
// spaces+words, indentation and punctuation runs all get merges.
constexpr char kTrainingText[] =
    R"TXT(The quick brown fox jumps over the lazy dog. The dog did not mind; it was asleep in the sun.
A model is only as good as the data it reads, and the tests that check what it writes.
When the weights do not fit on the card, the experts that are used the least stay in host memory,
and the processor computes them while the graphics card works on the rest of the layer.
Every token chooses a few experts. The router gives each expert a score, the top scores win, and
their weights are renormalised so that they add up to one. Then each chosen expert runs its own
small feed-forward network, and the results are summed with those weights.
She said that the results were better than expected, but that they would need to run the test again
tomorrow morning, with a different seed and a longer prompt, before anyone could trust the numbers.
It's not what you think: we'll see, they're here, I'm sure, you've been there, he'd know.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 65536. Dates like 2026-11-29 and times like 12:30.
Questions? Answers! Lists (one, two, three) and quotes "like this" or 'like that'.
Café, naïve, résumé, jalapeño: a few words with accents, so that two-byte characters get merges too.
The weather was cold in the morning and warm in the afternoon, so we walked along the river and
talked about the things we wanted to build: a faster kernel, a better planner, a cleaner interface.
In the evening the team looked at the measurements again. The new version was faster on every
prompt they tried, and the answers were the same as before, token for token, which is what matters.
Please write a short summary of the meeting, list the open questions, and send it to everyone who
was there. If something is not clear, ask before you start; it is easier to change a plan than code.
What is the capital of France? Paris is the capital of France, and it is also its largest city.
How many experts does each token use? In this model each token uses ten of the five hundred and
twelve experts in every layer, plus one shared expert that every token always uses.

// Returns the index of the largest value, or -1 for an empty list.
int ArgMax(const std::vector<float>& values) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(values.size()); ++i) {
    if (best < 0 || values[i] > values[best]) {
      best = i;
    }
  }
  return best;
}

struct Expert {
  int layer = 0;
  int index = 0;
  bool on_device = false;
};

def load_experts(path, layers, experts_per_layer):
    table = {}
    for layer in range(layers):
        for index in range(experts_per_layer):
            table[(layer, index)] = read_weights(path, layer, index)
    return table

if __name__ == "__main__":
    import sys
    experts = load_experts(sys.argv[1], layers=48, experts_per_layer=512)
    print(len(experts), "experts loaded")

def softmax(values):
    largest = max(values)
    exps = [math.exp(v - largest) for v in values]
    total = sum(exps)
    return [e / total for e in exps]

def top_k(scores, k):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return order[:k]

class Router:
    def __init__(self, weight, k):
        self.weight = weight
        self.k = k

    def __call__(self, x):
        scores = softmax([dot(row, x) for row in self.weight])
        chosen = top_k(scores, self.k)
        total = sum(scores[i] for i in chosen)
        return [(i, scores[i] / total) for i in chosen]

int main(int argc, char** argv) {
  std::vector<float> input(argc, 0.0f);
  for (int i = 0; i < argc; ++i) {
    input[i] = static_cast<float>(std::strlen(argv[i]));
  }
  if (input.empty()) {
    return 1;
  }
  std::printf("%d inputs\n", static_cast<int>(input.size()));
  return 0;
}

for (const auto& layer : model.layers()) {
  if (layer.is_recurrent()) {
    state = layer.Forward(state, input);
  } else {
    cache.Append(layer.Keys(input), layer.Values(input));
  }
}
)TXT";

constexpr const char* kSpecialTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                                          "</think>"};

bool IsAsciiLetter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
// Bytes of multi-byte UTF-8 sequences count as letters (the text has only accented letters).
bool IsLetter(unsigned char c) { return IsAsciiLetter(c) || c >= 0x80; }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsSpace(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsNewline(unsigned char c) { return c == '\n' || c == '\r'; }

// Splits ASCII-ish text roughly as the qwen2 pre-tokenizer does (gguf-and-quants spec §4.4).
std::vector<std::string> SplitPieces(std::string_view text) {
  std::vector<std::string> pieces;
  const size_t n = text.size();
  auto at = [&](size_t i) -> unsigned char {
    return i < n ? static_cast<unsigned char>(text[i]) : 0;
  };
  size_t i = 0;
  while (i < n) {
    const unsigned char c = at(i);
    size_t j = i;
    // 1. Contractions.
    if (c == '\'') {
      for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        size_t len = std::char_traits<char>::length(suffix);
        bool match = i + 1 + len <= n;
        for (size_t k = 0; match && k < len; ++k) {
          match = (at(i + 1 + k) | 0x20) == static_cast<unsigned char>(suffix[k]);
        }
        if (match && !IsLetter(at(i + 1 + len))) {
          j = i + 1 + len;
          break;
        }
      }
      if (j > i) {
        pieces.emplace_back(text.substr(i, j - i));
        i = j;
        continue;
      }
    }
    // 2. Optional lead character, then letters.
    if (IsLetter(c) || (!IsNewline(c) && !IsDigit(c) && !IsLetter(c) && IsLetter(at(i + 1)))) {
      j = IsLetter(c) ? i : i + 1;
      while (j < n && IsLetter(at(j))) ++j;
      pieces.emplace_back(text.substr(i, j - i));
      i = j;
      continue;
    }
    // 3. One digit.
    if (IsDigit(c)) {
      pieces.emplace_back(text.substr(i, 1));
      ++i;
      continue;
    }
    // 4. Optional space, punctuation run, trailing newlines.
    const size_t p = (c == ' ') ? i + 1 : i;
    if (p < n && !IsSpace(at(p)) && !IsLetter(at(p)) && !IsDigit(at(p))) {
      j = p;
      while (j < n && !IsSpace(at(j)) && !IsLetter(at(j)) && !IsDigit(at(j))) ++j;
      while (j < n && IsNewline(at(j))) ++j;
      pieces.emplace_back(text.substr(i, j - i));
      i = j;
      continue;
    }
    // 5-7. Whitespace: up to the last newline of the run, else all but the last space before text.
    j = i;
    while (j < n && IsSpace(at(j))) ++j;
    size_t last_newline = std::string_view::npos;
    for (size_t k = i; k < j; ++k) {
      if (IsNewline(at(k))) last_newline = k;
    }
    if (last_newline != std::string_view::npos) {
      j = last_newline + 1;
    } else if (j < n && j - i >= 2) {
      j -= 1;  // the last space joins the next piece
    }
    pieces.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return pieces;
}


// Bytes in GPT-2 id order: the printable bytes first, then the remapped ones.
std::vector<uint8_t> BytesInTokenOrder() {
  std::vector<uint8_t> order;
  for (int b = 0; b < 256; ++b) {
    if (text::ByteToUnicode(static_cast<uint8_t>(b)) == static_cast<char32_t>(b))
      order.push_back(static_cast<uint8_t>(b));
  }
  for (int b = 0; b < 256; ++b) {
    if (text::ByteToUnicode(static_cast<uint8_t>(b)) != static_cast<char32_t>(b))
      order.push_back(static_cast<uint8_t>(b));
  }
  return order;
}

SynthVocab BuildBaseVocab() {
  SynthVocab v;
  std::set<std::string> known;
  for (uint8_t b : BytesInTokenOrder()) {
    v.tokens.push_back(std::string(text::ByteToUnicodeUtf8(b)));
    v.token_types.push_back(kTokenNormal);
    known.insert(v.tokens.back());
  }

  // Words as symbol sequences with their counts (std::map: deterministic order).
  std::map<std::vector<std::string>, int> words;
  for (const std::string& piece : SplitPieces(kTrainingText)) {
    std::vector<std::string> symbols;
    for (unsigned char c : piece) symbols.push_back(std::string(text::ByteToUnicodeUtf8(c)));
    ++words[symbols];
  }
  for (int m = 0; m < kMaxMerges; ++m) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [symbols, count] : words) {
      for (size_t k = 0; k + 1 < symbols.size(); ++k) pairs[{symbols[k], symbols[k + 1]}] += count;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 1;  // a pair must repeat to be worth a merge
    for (const auto& [pair, count] : pairs) {
      if (count > best_count) {  // strict: the first (smallest) pair wins ties
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) break;
    const std::string left = best->first, right = best->second, joined = left + right;
    v.merges.push_back(absl::StrCat(left, " ", right));
    if (known.insert(joined).second) {
      v.tokens.push_back(joined);
      v.token_types.push_back(kTokenNormal);
    }
    std::map<std::vector<std::string>, int> merged;
    for (const auto& [symbols, count] : words) {
      std::vector<std::string> out;
      for (size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == left && symbols[k + 1] == right) {
          out.push_back(joined);
          ++k;
        } else {
          out.push_back(symbols[k]);
        }
      }
      merged[out] += count;
    }
    words = std::move(merged);
  }

  for (const char* special : kSpecialTokens) {
    const std::string text = special;
    const bool control = text.starts_with("<|") && text.ends_with("|>");
    if (text == "<|endoftext|>") v.bos_id = v.pad_id = static_cast<int32_t>(v.tokens.size());
    if (text == "<|im_end|>") v.eos_id = static_cast<int32_t>(v.tokens.size());
    v.tokens.push_back(text);
    v.token_types.push_back(control ? kTokenControl : kTokenUserDefined);
  }
  return v;
}

}  // namespace

const char kSynthChatTemplate[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}"
    "{% endif %}";

const SynthVocab& BaseSynthVocab() {
  static const SynthVocab* vocab = new SynthVocab(BuildBaseVocab());
  return *vocab;
}

int TinyVocabSize() {
  const int n = static_cast<int>(BaseSynthVocab().tokens.size());
  return (n + 31) / 32 * 32;
}

void AddSynthTokenizerMetadata(int n_vocab, Arch arch, format::Metadata* md) {
  const SynthVocab& base = BaseSynthVocab();
  text::Vocabulary v;
  v.tokens = base.tokens;
  for (int32_t t : base.token_types) v.types.push_back(static_cast<text::TokenType>(t));
  for (int i = static_cast<int>(v.tokens.size()); i < n_vocab; ++i) {
    v.tokens.push_back(absl::StrCat("[PAD", i, "]"));
    v.types.push_back(text::TokenType::kUnused);
  }
  for (const std::string& m : base.merges) {
    const size_t space = m.find(' ', 1);
    v.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  v.bos_id = base.bos_id;
  v.eos_id = base.eos_id;
  v.pad_id = base.pad_id;
  v.pre = arch == Arch::kQwen35Moe ? text::PreTokenizerKind::kQwen35 : text::PreTokenizerKind::kQwen2;
  v.chat_template = kSynthChatTemplate;
  v.AppendToGgufMetadata(md);
}

}  // namespace tandem::model
