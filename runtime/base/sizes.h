// Byte sizes as users type and read them: "24GiB", "512MiB", "1.5GB", "1000000".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

// Accepts an optional decimal fraction and the suffixes B, KB/MB/GB/TB (powers of 1000) and
// KiB/MiB/GiB/TiB (powers of 1024), case-insensitive; a bare number is bytes.
absl::StatusOr<uint64_t> ParseBytes(std::string_view text);
// "1.50 GiB", "768.0 KiB", "12 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace tandem
