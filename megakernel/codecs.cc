#include "megakernel/codecs.h"

#include "absl/strings/str_join.h"

namespace tandem::megakernel {

std::string DeviceCodecNames() {
  std::vector<std::string> names;
  for (const quant::TypeInfo& info : quant::kTypeInfos) {
    if (SliceElems(static_cast<int>(info.type)) > 0) names.push_back(info.name);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace tandem::megakernel
