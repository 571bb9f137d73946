// Which SIMD instruction set the expert kernels use: detected once from cpuid, or forced by the user
// (`--cpu-isa avx2|avx512|scalar`). Forcing a path the CPU lacks is an error, never a silent
// downgrade, so a test or benchmark that asks for a path measures that path.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tandem::experts {

enum class Isa {
  kScalar,  // portable integer code, the fallback and the oracle for the SIMD paths
  kAvx2,    // AVX2 + FMA + F16C: maddubs/madd integer dot products
  kAvx512,  // AVX-512 F/BW/VL + VNNI: vpdpbusd integer dot products
};

const char* IsaName(Isa isa);

// True when this CPU (and OS, via XGETBV) can run `isa`.
bool CpuSupports(Isa isa);

// The best path this CPU runs.
Isa BestIsa();

// "auto" (BestIsa), "avx512", "avx2" or "scalar"; an ISA the CPU lacks is an error naming it.
absl::StatusOr<Isa> ResolveIsa(const std::string& name);

}  // namespace tandem::experts
