// Host entry points of the GPU kernels: raw device pointers in (the *Args structs), a stream, a
// cudaError_t out. Row counts are compiled for 1 (decode), 4 and 8 (verify, masked down to 2..8).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "megakernel/params.h"

namespace tandem::megakernel {

// How a layer half is launched. The three compute the same values (the runner test compares
// their logits bit for bit).
enum class KernelMode {
  kMegakernel,  // one persistent cooperative launch, grid barriers between phases
  kPerPhase,    // the megakernel's phases, one ordinary launch each: what the barriers cost
  kPerOp,       // one ordinary launch per operation (megakernel/ops.h): the baseline of issue #5
};
enum class Half { kMixer, kMoe, kHead };

// Grid and dynamic shared memory of one kernel variant.
struct LaunchShape {
  int grid = 0;
  int64_t smem = 0;
};

// Phases of a half (attention and DeltaNet mixers differ).
int PhaseCount(Half half, bool recurrent);

// Launches of a half, or of the head, in per-op mode.
int PerOpLaunches(const MixerArgs& args);
int PerOpLaunches(const MoeArgs& args);
int PerOpLaunches(const HeadArgs& args);

// The most dynamic shared memory a block of this kernel variant may use on the current device:
// the device's opt-in limit less the larger static shared memory of its two modes' kernels. Its
// attribute query also loads the kernel's module now; the runner calls it for every variant before
// PrepareHalf.
cudaError_t MaxDynamicSmem(Half half, int rows_variant, int64_t* bytes);

// Raises both modes' kernels' dynamic shared-memory limit to `smem` (at most MaxDynamicSmem) and
// sizes a persistent grid from the occupancy API (every block resident at once, as a cooperative
// launch requires), at most `max_blocks_per_sm` per multiprocessor. Per-op launches use the same
// grid, or one block.
cudaError_t PrepareHalf(Half half, int rows_variant, int64_t smem, int max_blocks_per_sm,
                        LaunchShape* shape);

cudaError_t LaunchMixer(const MixerArgs& args, int rows_variant, KernelMode mode,
                        const LaunchShape& shape, cudaStream_t stream);
cudaError_t LaunchMoe(const MoeArgs& args, int rows_variant, KernelMode mode,
                      const LaunchShape& shape, cudaStream_t stream);
cudaError_t LaunchHead(const HeadArgs& args, int rows_variant, KernelMode mode,
                       const LaunchShape& shape, cudaStream_t stream);
// The embedding gather (an ordinary kernel in both modes).
cudaError_t LaunchEmbed(const HeadArgs& args, cudaStream_t stream);

// out[r][row] = m[row] · x[r] for n_rows (1..8) rows of m.cols fp32 values, through the same
// activation quantisation and codecs as the layer kernels (tests and the kernel lab use it).
cudaError_t LaunchMatVec(const Matrix& m, const float* x, int n_rows, float* out,
                         cudaStream_t stream);

// A cooperative launch of `grid` blocks of kBlockThreads that runs n_syncs grid barriers and
// nothing else (megakernel/ceilings.h times it).
cudaError_t LaunchBarrierProbe(int grid, int n_syncs, cudaStream_t stream);

}  // namespace tandem::megakernel
