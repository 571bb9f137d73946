// libFuzzer target for the GGUF reader: any input must parse or fail with a status, never crash or
// read outside the buffer. Accepted inputs are also re-written and re-read: the writer must accept
// what the reader accepts, and writing is idempotent (write(parse(write(parse(x))))) ==
// write(parse(x))).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/format/gguf.h"

namespace {

using tandem::format::GgufFile;
using tandem::format::GgufWriter;

// Rewrites a parsed file with the writer (tight layout, same metadata and tensor bytes).
std::vector<uint8_t> Rewrite(const GgufFile& file) {
  GgufWriter writer(file.metadata());
  for (const tandem::format::TensorInfo& t : file.tensors()) {
    if (!writer.AddTensor(t.name, t.dims, t.type, std::span<const uint8_t>(t.data, t.nbytes))
             .ok()) {
      std::abort();  // the reader accepted a tensor the writer rejects
    }
  }
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.WriteToBuffer();
  if (!bytes.ok()) std::abort();  // the reader accepted metadata the writer rejects
  return *std::move(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  // Touch both ends of every tensor so that ASan checks the ranges the reader handed out.
  volatile uint8_t sink = 0;
  for (const tandem::format::TensorInfo& t : (*file)->tensors()) {
    sink = sink + t.data[0] + t.data[t.nbytes - 1];
  }
  for (const auto& [key, value] : (*file)->metadata().entries())
    sink = sink + value.ToString().size();

  std::vector<uint8_t> once = Rewrite(**file);
  auto reparsed = GgufFile::Parse(once, "rewritten.gguf");
  if (!reparsed.ok()) std::abort();  // the reader rejects what the writer wrote
  std::vector<uint8_t> twice = Rewrite(**reparsed);
  if (once != twice) std::abort();
  return 0;
}
