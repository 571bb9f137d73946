// The synthetic models' tokenizer metadata (runtime/model/synth_vocab) through the text stack:
// GGUF keys -> Vocabulary -> Tokenizer round trips, and its chat template renders like ChatML.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/model/synth_vocab.h"
#include "runtime/text/chat.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/vocabulary.h"

namespace tandem::text {
namespace {

TEST(SynthVocabTest, LoadsEncodesAndRendersChat) {
  for (model::Arch arch : {model::Arch::kQwen3Moe, model::Arch::kQwen35Moe}) {
    format::Metadata md;
    const int n_vocab = model::TinyVocabSize() + 64;
    model::AddSynthTokenizerMetadata(n_vocab, arch, &md);
    absl::StatusOr<Vocabulary> vocab = Vocabulary::FromGgufMetadata(md);
    ASSERT_TRUE(vocab.ok()) << vocab.status();
    EXPECT_EQ(vocab->size(), n_vocab);
    EXPECT_EQ(vocab->pre, arch == model::Arch::kQwen35Moe ? PreTokenizerKind::kQwen35
                                                          : PreTokenizerKind::kQwen2);
    EXPECT_TRUE(vocab->warnings.empty());
    ASSERT_TRUE(vocab->chat_template.has_value());
    absl::StatusOr<Tokenizer> tok = Tokenizer::Create(*vocab);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_TRUE(tok->warnings().empty());

    const std::vector<ChatMessage> messages = {{"user", "What is 12 + 30?"}};
    absl::StatusOr<ChatFormatter> chat = ChatFormatter::Select(vocab->chat_template, "auto");
    ASSERT_TRUE(chat.ok()) << chat.status();
    EXPECT_FALSE(chat->builtin());
    absl::StatusOr<std::string> prompt = chat->Format(messages, true);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_EQ(*prompt, *ChatFormatter::ChatMl().Format(messages, true));
    EXPECT_EQ(*prompt, "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n");

    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(*prompt, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_GE(ids->size(), 3u);
    EXPECT_EQ(tok->TokenText(ids->front()), "<|im_start|>");
    EXPECT_EQ(tok->Decode(*ids, /*render_special=*/true), *prompt);
    EXPECT_TRUE(tok->IsEndOfGeneration(tok->FindToken("<|im_end|>")));
    const std::string text =
        "The quick brown fox, 12345 caf\u00e9 \u4f60\u597d \U0001F44D\n\n  done";
    ids = tok->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(tok->Decode(*ids), text);
    EXPECT_LT(ids->size(), text.size());  // the learned merges apply
  }
}

}  // namespace
}  // namespace tandem::text
