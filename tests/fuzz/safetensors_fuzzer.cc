// libFuzzer target for the safetensors reader: any input must parse or fail with a status, never
// crash, throw, or hand out a span outside the buffer.
#include <cstdint>

#include "runtime/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tandem::format::SafetensorsFile::Parse(std::span<const uint8_t>(data, size),
                                                     "fuzz.safetensors");
  if (!file.ok()) return 0;
  // Touch both ends of every tensor so that ASan checks the ranges the reader handed out.
  volatile uint8_t sink = 0;
  for (const tandem::format::SafetensorsTensor& t : (*file)->tensors()) {
    if (!t.data.empty()) sink = sink + t.data.front() + t.data.back();
  }
  for (const auto& [key, value] : (*file)->user_metadata()) sink = sink + key.size() + value.size();
  return 0;
}
