// Chat template selection and rendering. See chat.h.
#include "runtime/text/chat.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace tandem::text {

absl::StatusOr<ChatFormatter> ChatFormatter::FromTemplate(std::string_view source,
                                                          std::string bos_token,
                                                          std::string eos_token) {
  TANDEM_ASSIGN_OR_RETURN(jinja::Template tmpl, jinja::Template::Parse(source));
  return ChatFormatter(std::move(tmpl), /*builtin=*/false, std::move(bos_token),
                       std::move(eos_token));
}

ChatFormatter ChatFormatter::ChatMl() {
  absl::StatusOr<jinja::Template> tmpl = jinja::Template::Parse(kChatMlTemplate);
  if (!tmpl.ok()) {  // a broken invariant: the built-in text is fixed and tested
    std::fprintf(stderr, "built-in ChatML template: %s\n", tmpl.status().ToString().c_str());
    std::abort();
  }
  return ChatFormatter(std::move(*tmpl), /*builtin=*/true, "", "");
}

absl::StatusOr<ChatFormatter> ChatFormatter::Select(const std::optional<std::string>& file_template,
                                                    std::string_view choice, std::string bos_token,
                                                    std::string eos_token) {
  if (choice == "chatml") return ChatMl();
  if (!choice.empty() && choice != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown chat template '", std::string(choice), "'; choices: auto, chatml"));
  }
  if (!file_template.has_value() || file_template->empty()) return ChatMl();
  absl::StatusOr<ChatFormatter> formatter =
      FromTemplate(*file_template, std::move(bos_token), std::move(eos_token));
  if (!formatter.ok()) {
    return absl::Status(
        formatter.status().code(),
        absl::StrCat("the model's chat template cannot be used: ", formatter.status().message(),
                     "; choose the built-in one with --chat-template chatml"));
  }
  return formatter;
}

absl::StatusOr<std::string> ChatFormatter::Format(std::span<const ChatMessage> messages,
                                                  bool add_generation_prompt) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  const nlohmann::ordered_json context = {{"messages", list},
                                          {"add_generation_prompt", add_generation_prompt},
                                          {"bos_token", bos_token_},
                                          {"eos_token", eos_token_}};
  return template_.Render(context);
}

}  // namespace tandem::text
