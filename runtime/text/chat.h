// Chat formatting: a list of {role, content} messages becomes the prompt text, through the model's
// own Jinja chat template (interpreted by text/jinja.h) or the built-in ChatML one. A template the
// interpreter cannot run is an error naming the construct; the caller may then choose "chatml"
// explicitly. Nothing here tokenises.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/text/jinja.h"

namespace tandem::text {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// The built-in template: Qwen's ChatML, `<|im_start|>ROLE\nCONTENT<|im_end|>\n` per message, then
// `<|im_start|>assistant\n` when a generation prompt is asked for.
inline constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

class ChatFormatter {
 public:
  // Parses a Jinja chat template. `bos_token` / `eos_token` are the texts the template sees under
  // those names.
  static absl::StatusOr<ChatFormatter> FromTemplate(std::string_view source,
                                                    std::string bos_token = "",
                                                    std::string eos_token = "");
  static ChatFormatter ChatMl();

  // Chooses the template for `choice`: "" or "auto" = the file's template when it has one, else
  // ChatML; "chatml" = the built-in ChatML; anything else is an error listing the choices. A file
  // template outside the supported subset is an error that suggests "chatml".
  static absl::StatusOr<ChatFormatter> Select(const std::optional<std::string>& file_template,
                                              std::string_view choice, std::string bos_token = "",
                                              std::string eos_token = "");

  ChatFormatter(ChatFormatter&&) noexcept = default;
  ChatFormatter& operator=(ChatFormatter&&) noexcept = default;

  // The prompt text for `messages`; with `add_generation_prompt` the template's opening of an
  // assistant turn follows.
  absl::StatusOr<std::string> Format(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const;

  bool builtin() const { return builtin_; }

 private:
  ChatFormatter(jinja::Template tmpl, bool builtin, std::string bos, std::string eos)
      : template_(std::move(tmpl)),
        builtin_(builtin),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)) {}
  jinja::Template template_;
  bool builtin_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace tandem::text
