// A small interpreter for the Jinja subset that chat templates (Qwen-style ChatML) use, with the
// environment Hugging Face renders chat templates in (trim_blocks, lstrip_blocks, no trailing
// newline). Anything outside the subset is rejected when the template is parsed, with an error
// that names the construct and its line; there is no silent fallback.
//
// Supported: text, {{ }}, {% %}, {# #} with -/+ whitespace control; if/elif/else, for (one loop
// variable, optional else, loop.index/index0/revindex/revindex0/first/last/length), set (a name,
// or namespace attribute); literals (strings with escapes, integers, floats, true/false/none,
// lists); and/or/not, == != < > <= >= in, not in, + - * / // % ~, `x if c else y`; .attr and
// [index] / [a:b:c] access; filters length count trim string lower upper first last join
// default tojson; tests defined undefined none string number integer boolean mapping sequence
// iterable true false; functions raise_exception(msg) and namespace(k=v, ...); string methods
// startswith endswith strip lstrip rstrip split upper lower replace; dict methods get items keys
// values.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::text::jinja {

class Template {
 public:
  // Parses `source`. Errors: syntax errors and constructs outside the subset, with line numbers.
  static absl::StatusOr<Template> Parse(std::string_view source);

  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // Renders with the top-level variables of `context` (a JSON object: strings, numbers, bools,
  // null, arrays and objects; ordered_json so that objects keep their key order, as Python dicts
  // do for tojson and printing). Errors: raise_exception(...) from the template, type errors (for
  // example adding a string and a number), use of an undefined value where Jinja fails.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  struct Program;
  explicit Template(std::unique_ptr<Program> program);
  std::unique_ptr<Program> program_;
};

}  // namespace tandem::text::jinja
