// Lab for the expert kernels: one kernel call (weight rows × 1..8 activation rows) per ISA and
// format, over a weight set larger than L3 (rotated per iteration) so the number is a streaming
// rate. Reports weight bytes/s; `tandem bench experts` is the scenario benchmark with ratios.
#include <benchmark/benchmark.h>

#include <vector>

#include "experts/kernels.h"
#include "runtime/quant/codec.h"

namespace tandem::experts {
namespace {

void BM_Dot(benchmark::State& state, quant::GgmlType type, Isa isa) {
  if (!CpuSupports(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  const int n_act = static_cast<int>(state.range(0));
  const int64_t k = 2048, rows = 768;
  const int64_t row_bytes = quant::RowBytes(type, k);
  const int64_t matrix_bytes = rows * row_bytes;
  const int copies = static_cast<int>((256ll << 20) / matrix_bytes) + 1;  // 256 MiB > any L3 here
  std::vector<uint8_t> w(static_cast<size_t>(matrix_bytes * copies));
  quant::RandomizeBlocks(type, 1, 0.05f, w.data(),
                         copies * rows * k / quant::GetTypeInfo(type).block_elems);
  std::vector<float> x(static_cast<size_t>(k * n_act), 0.5f);
  const int64_t act_bytes = ActivationRowBytes(type, k);
  std::vector<uint8_t> xq(static_cast<size_t>(act_bytes * n_act));
  const uint8_t* act[kMaxKernelRows];
  for (int a = 0; a < n_act; ++a) {
    QuantizeActivations(type, &x[a * k], k, &xq[a * act_bytes]);
    act[a] = &xq[a * act_bytes];
  }
  std::vector<float> out(static_cast<size_t>(rows * n_act));
  const DotFn dot = GetDotKernel(isa, type);
  int copy = 0;
  for (auto _ : state) {
    dot(w.data() + copy * matrix_bytes, row_bytes, static_cast<int>(rows), k, act, n_act,
        out.data(), rows);
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(state.iterations() * matrix_bytes);
}

#define TANDEM_DOT_BENCH(type, isa)                                                     \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa, quant::GgmlType::k##type, Isa::k##isa)        \
      ->Arg(1)->Arg(4)->Arg(8)
TANDEM_DOT_BENCH(Q4_K, Scalar);
TANDEM_DOT_BENCH(Q4_K, Avx2);
TANDEM_DOT_BENCH(Q4_K, Avx512);
TANDEM_DOT_BENCH(Q3_K, Avx2);
TANDEM_DOT_BENCH(Q3_K, Avx512);
TANDEM_DOT_BENCH(Q8_0, Avx2);
TANDEM_DOT_BENCH(Q8_0, Avx512);

}  // namespace
}  // namespace tandem::experts
