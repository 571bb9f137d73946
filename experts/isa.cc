// cpuid/xgetbv probing for the kernel dispatch (see isa.h).
#include "experts/isa.h"

#include <cpuid.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace tandem::experts {
namespace {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
  bool os_ymm = false, os_zmm = false;
};

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return static_cast<uint64_t>(edx) << 32 | eax;
}

CpuFeatures Probe() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (osxsave) {
    const uint64_t xcr0 = ReadXcr0();
    f.os_ymm = (xcr0 & 0x6) == 0x6;            // SSE and AVX state
    f.os_zmm = f.os_ymm && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
  }
  return f;
}

const CpuFeatures& Features() {
  static const CpuFeatures features = Probe();
  return features;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool CpuSupports(Isa isa) {
  const CpuFeatures& f = Features();
  const bool avx2 = f.os_ymm && f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512:
      return avx2 && f.os_zmm && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  }
  return false;
}

// AVX-512 first: with the fused kernels it measured at least as fast as AVX2 on the 2-core Zen 4
// VM (2026-11-29, `tandem bench experts`, Q4_K 10 experts 1 row: 20.3-21.5 GB/s vs 19.3; 4 rows
// 2170-2350 vs 2476 us/layer). The 16-core Xeon's AVX-512 deficit (docs/perf/experts.md) was
// measured with the old decode-to-L1 kernels and has not been re-measured.
Isa BestIsa() {
  if (CpuSupports(Isa::kAvx512)) return Isa::kAvx512;
  if (CpuSupports(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

absl::StatusOr<Isa> ResolveIsa(const std::string& name) {
  if (name.empty() || name == "auto") return BestIsa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name != IsaName(isa)) continue;
    if (!CpuSupports(isa)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--cpu-isa ", name, ": this CPU lacks it (best available: ", IsaName(BestIsa()), ")"));
    }
    return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--cpu-isa '", name, "' is not one of auto, avx512, avx2, scalar"));
}

}  // namespace tandem::experts
