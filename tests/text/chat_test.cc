// Chat formatting: ChatML exact strings, the Jinja subset (expected outputs were produced with
// jinja2 in Hugging Face's environment: trim_blocks, lstrip_blocks), and errors for constructs
// outside the subset.
#include "runtime/text/chat.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/text/jinja.h"

namespace tandem::text {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "<think>\nplan\n</think>\n\nHello!"},
    {"user", "Bye"},
};

const char kExpectedChatMl[] =
    "<|im_start|>system\nBe brief.<|im_end|>\n"
    "<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nplan\n</think>\n\nHello!<|im_end|>\n"
    "<|im_start|>user\nBye<|im_end|>\n";

std::string Render(const ChatFormatter& f, bool add_generation_prompt,
                   const std::vector<ChatMessage>& messages = kConversation) {
  absl::StatusOr<std::string> out = f.Format(messages, add_generation_prompt);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::string();
}

TEST(ChatTest, BuiltinChatMlExact) {
  const ChatFormatter f = ChatFormatter::ChatMl();
  EXPECT_TRUE(f.builtin());
  EXPECT_EQ(Render(f, false), kExpectedChatMl);
  EXPECT_EQ(Render(f, true), std::string(kExpectedChatMl) + "<|im_start|>assistant\n");
  EXPECT_EQ(Render(f, true, {}), "<|im_start|>assistant\n");
}

TEST(ChatTest, SyntheticModelTemplateRendersExactly) {
  // The template the synthetic models carry, as text in the file.
  const std::string source =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\\n' }}{% endif %}";
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTemplate(source);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->builtin());
  EXPECT_EQ(Render(*f, true), std::string(kExpectedChatMl) + "<|im_start|>assistant\n");
  EXPECT_EQ(Render(*f, false), kExpectedChatMl);
}

TEST(ChatTest, WhitespaceControlledTemplate) {
  // Indented, multi-line, in the style of Qwen templates: {%- -%}, elif, in [...], loop.first.
  const std::string source = R"({%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nDefault.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
    {%- elif message.role in ['user', 'assistant'] %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- else %}
        {{- raise_exception('unexpected role ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)";
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTemplate(source);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Render(*f, true), std::string(kExpectedChatMl) + "<|im_start|>assistant\n");
  EXPECT_EQ(Render(*f, false), kExpectedChatMl);
  // raise_exception stops rendering with the template's message.
  absl::StatusOr<std::string> bad = f->Format(std::vector<ChatMessage>{{"tool", "x"}}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unexpected role tool"), std::string::npos) << bad.status();
}

TEST(ChatTest, NamespaceSlicesMethodsAndTrimBlocks) {
  // A plain (non "-") block tag followed by a newline: trim_blocks removes that newline;
  // lstrip_blocks removes the indentation before block tags.
  const std::string source = R"({%- set ns = namespace(last_user=-1) %}
{%- for m in messages[::-1] %}
  {%- if ns.last_user < 0 and m.role == 'user' %}{% set ns.last_user = (messages|length - 1) - loop.index0 %}{% endif %}
{%- endfor %}
{%- for m in messages %}
  {%- set content = m.content %}
  {%- if '</think>' in content %}
    {%- set content = content.split('</think>')[-1].lstrip('\n') %}
  {%- endif %}
<{{ loop.index }}:{{ m.role | upper }}{{ '*' if loop.index0 == ns.last_user else '' }}> {{ content }}
{% endfor %}
done
)";
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTemplate(source);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Render(*f, true),
            "<1:SYSTEM> Be brief.\n<2:USER> Hi\n<3:ASSISTANT> Hello!\n<4:USER*> Bye\ndone");
}

TEST(ChatTest, BosAndEosTokensAreVariables) {
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTemplate(
      "{{ bos_token }}{% for m in messages %}{{ m.content + eos_token }}{% endfor %}", "<s>",
      "</s>");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Render(*f, false, {{"user", "a"}, {"assistant", "b"}}), "<s>a</s>b</s>");
}

TEST(ChatTest, UnsupportedConstructsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% macro m() %}x{% endmacro %}", "{% macro %}"},
      {"{{ {'a': 1} }}", "dict literal"},
      {"{{ messages | map(attribute='role') }}", "filter '|map'"},
      {"{{ 'x'.format(1) }}", "method call '.format()'"},
      {"{% for m in messages if m.role %}{% endfor %}", "loop filter"},
      {"{% for k, v in x %}{% endfor %}", "several loop variables"},
      {"{{ strftime_now('%Y') }}", "function call 'strftime_now()'"},
      {"{% if x is divisibleby 3 %}{% endif %}", "test 'is divisibleby'"},
      {"{% generation %}x{% endgeneration %}", "{% generation %}"},
      {"{% set x %}a{% endset %}", "block assignment"},
  };
  for (const auto& [source, construct] : cases) {
    absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << source << ": " << t.status();
    EXPECT_NE(t.status().message().find(construct), std::string::npos)
        << source << ": " << t.status();
    EXPECT_NE(t.status().message().find("line 1"), std::string::npos) << t.status();
  }
}

TEST(ChatTest, SyntaxErrorsHaveLines) {
  for (const std::string source :
       {"a\n{% if x %}", "{{ 'open", "{% endfor %}", "{{ 1 + }}", "\n\n{{ x ]"}) {
    absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_NE(t.status().message().find("line "), std::string::npos) << t.status();
  }
}

TEST(ChatTest, SelectChoosesTemplates) {
  absl::StatusOr<ChatFormatter> f = ChatFormatter::Select(std::nullopt, "");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->builtin());
  f = ChatFormatter::Select(std::string("{{ 'file' }}"), "auto");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->builtin());
  EXPECT_EQ(Render(*f, true), "file");
  f = ChatFormatter::Select(std::string("{{ 'file' }}"), "chatml");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->builtin());
  f = ChatFormatter::Select(std::nullopt, "vicuna");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("chatml"), std::string::npos);
  // A file template outside the subset: an error that points at the built-in template, no fallback.
  f = ChatFormatter::Select(std::string("{% macro m() %}{% endmacro %}"), "");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("{% macro %}"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("--chat-template chatml"), std::string::npos) << f.status();
}

TEST(JinjaTest, ExpressionsMatchJinja) {
  // Each expected output was produced by jinja2 with the same context.
  const nlohmann::ordered_json context = {
      {"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "tool"}, {"content", "r"}}}},
      {"n", 7}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ n // 2 }} {{ -n // 2 }} {{ n % 3 }} {{ -n % 3 }} {{ n / 2 }} {{ 2 * 3 + 1 }} {{ 1.5 + 1 "
       "}}",
       "3 -4 1 2 3.5 7 2.5"},
      {"{{ 'ab' ~ 3 ~ none ~ true }} {{ [1, 'a', none, true, 2.5] }} {{ messages[0] }}",
       "ab3NoneTrue [1, 'a', None, True, 2.5] {'role': 'user', 'content': 'q'}"},
      {"{{ 'a' in 'cat' }} {{ 'z' not in ['a'] }} {{ 'role' in messages[0] }} {{ 1 == 1.0 }}",
       "True True True True"},
      {"{{ messages | length }} {{ 'h\u00e9llo' | length }} {{ ' x ' | trim }} {{ [3,4] | last }}",
       "2 5 x 4"},
      {"{{ nothing | default('d') }} {{ nothing is defined }} {{ none is none }} {{ n is number }}",
       "d False True True"},
      {"{{ messages | tojson }}",
       R"([{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}])"},
      {"{{ 'q\"\\\\\\n\\t\\u0001 \u00e9' | tojson }}", R"("q\"\\\n\t\u0001 é")"},
      {"{{ 'hello'[1] }} {{ 'hello'[-1] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ "
       "[1,2,3,4,5][::2] }}",
       "e o el olleh [1, 3, 5]"},
      {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'xxhixx'.strip('x') }}",
       "['a', 'b', '', 'c'] ['a', 'b'] hi"},
      {"{% for m in messages %}[{{ loop.index }}/{{ loop.length }} {{ loop.revindex0 }} {{ "
       "loop.first }} "
       "{{ loop.last }}]{% set inner = 1 %}{% endfor %}{{ inner is defined }}",
       "[1/2 1 True False][2/2 0 False True]False"},
      {"{% for x in [] %}no{% else %}empty{% endfor %}", "empty"},
      {"{{ messages[0].get('nope', 'fb') }} {{ false or 'alt' }} {{ 1 if false }}|{{ 'A' 'B' }}",
       "fb alt |AB"},
  };
  for (const auto& [source, expected] : cases) {
    absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
    ASSERT_TRUE(t.ok()) << source << ": " << t.status();
    absl::StatusOr<std::string> out = t->Render(context);
    ASSERT_TRUE(out.ok()) << source << ": " << out.status();
    EXPECT_EQ(*out, expected) << source;
  }
}

TEST(JinjaTest, WhitespaceRules) {
  const nlohmann::ordered_json context = nlohmann::ordered_json::object();
  const std::vector<std::pair<std::string, std::string>> cases = {
      // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it goes.
      {"a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc"},
      // {%+ keeps the indentation, +%} keeps the newline.
      {"x\n  {%+ if true %}y{% endif +%}\nz", "x\n  y\nz"},
      // - strips all whitespace on that side, newlines included.
      {"a  \n\n {{- 'b' -}} \n\n c", "abc"},
      // Variable tags are not lstripped.
      {"  {{ 'v' }}\n", "  v"},
      // Comments trim like blocks; \r\n becomes \n; one trailing newline is dropped.
      {"p\r\n  {# note #}\r\nq\r\n", "p\nq"},
  };
  for (const auto& [source, expected] : cases) {
    absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<std::string> out = t->Render(context);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, expected) << source;
  }
}

TEST(JinjaTest, RuntimeErrors) {
  const nlohmann::ordered_json context = {{"s", "text"}};
  for (const std::string source : {"{{ s + 1 }}", "{{ missing.attr }}", "{{ missing + 'x' }}",
                                   "{% for c in 5 %}{% endfor %}", "{{ 1 // 0 }}"}) {
    absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
    ASSERT_TRUE(t.ok()) << source << ": " << t.status();
    absl::StatusOr<std::string> out = t->Render(context);
    EXPECT_FALSE(out.ok()) << source << " rendered " << *out;
  }
}

}  // namespace
}  // namespace tandem::text
