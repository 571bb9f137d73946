// Printing helpers for TensorInfo; the struct itself is header-only.
#include "runtime/format/tensor_info.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::format {

std::string DimsToString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace tandem::format
