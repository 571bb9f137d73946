// Where the committed fixtures are, from whatever directory a test binary runs: the project root is
// compiled in (TANDEM_SOURCE_DIR, set by tandem_test in cmake/TandemTargets.cmake). A binary run on
// another machine than the one that built it (the GPU machine runs binaries carried to it) finds no
// such directory there and looks under the working directory instead, which is then the project's
// root. Header-only.
#pragma once

#include <filesystem>
#include <string>

namespace tandem::testing_support {

// tests/fixtures/<relative> under the project root.
inline std::filesystem::path FixturePath(const std::string& relative) {
  const std::filesystem::path built =
      std::filesystem::path(TANDEM_SOURCE_DIR) / "tests" / "fixtures";
  const std::filesystem::path root =
      std::filesystem::is_directory(built) ? built : std::filesystem::path("tests") / "fixtures";
  return root / relative;
}

}  // namespace tandem::testing_support
