#include "runtime/base/sizes.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem {

absl::StatusOr<uint64_t> ParseBytes(std::string_view text) {
  const std::string input(text);  // Debian's abseil has its own string_view type
  std::string s(absl::StripAsciiWhitespace(input));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string number = s.substr(0, i);
  std::string suffix = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(i)));
  char* end = nullptr;
  double value = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", input, "': expected a number with an optional unit, e.g. 24GiB"));
  }
  double scale = 0;
  if (suffix.empty() || suffix == "b") scale = 1;
  else if (suffix == "kb" || suffix == "k") scale = 1e3;
  else if (suffix == "mb" || suffix == "m") scale = 1e6;
  else if (suffix == "gb" || suffix == "g") scale = 1e9;
  else if (suffix == "tb" || suffix == "t") scale = 1e12;
  else if (suffix == "kib") scale = 1024.0;
  else if (suffix == "mib") scale = 1024.0 * 1024;
  else if (suffix == "gib") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size '", input, "': unknown unit '", suffix, "' (use B, KB, MB, GB, KiB, MiB, GiB)"));
  }
  double bytes = value * scale;
  if (bytes >= 1.8e19) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", input, "': too large"));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", bytes);
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

}  // namespace tandem
