// Lab for the expert kernels: one kernel call (weight rows × 1..8, 64 or 512 activation rows) per
// ISA and format, over a weight set four times the largest cache (rotated per iteration) so the
// number is a streaming rate, next to the same call on one L2-resident matrix (the kernel's compute
// ceiling) and a one-thread streaming read (the memory ceiling one core sees). Reports weight
// bytes/s; `tandem bench experts` is the scenario benchmark with ratios against all cores'
// bandwidth.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "experts/kernels.h"
#include "experts/topology.h"
#include "runtime/quant/codec.h"

namespace tandem::experts {
namespace {

// hot: one matrix of ≤ 150 KiB (64 rows at k = 2048), reused every iteration, so it stays in L2.
// k = 2048: the gate/up shape (768 rows cold); k = 768: the down shape (2048 rows cold), whose
// three-block rows weigh the per-row costs (reduction, store) three times as much.
void BM_Dot(benchmark::State& state, quant::GgmlType type, Isa isa, bool hot, int64_t k) {
  if (!CpuSupports(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  const int n_act = static_cast<int>(state.range(0));
  const int64_t rows = hot ? 64 * 2048 / k : 768 * 2048 / k;
  const int64_t row_bytes = quant::RowBytes(type, k);
  const int64_t matrix_bytes = rows * row_bytes;
  // Cold: copies rotated over four times the largest cache (at least 256 MiB).
  const int64_t cold_bytes = std::max<int64_t>(256ll << 20, BeyondCachesBytes());
  const int copies = hot ? 1 : static_cast<int>(cold_bytes / matrix_bytes) + 1;
  std::vector<uint8_t> w(static_cast<size_t>(matrix_bytes * copies));
  quant::RandomizeBlocks(type, 1, 0.05f, w.data(),
                         copies * rows * k / quant::GetTypeInfo(type).block_elems);
  std::vector<float> x(static_cast<size_t>(k * n_act), 0.5f);
  const int64_t act_bytes = ActivationRowBytes(type, k);
  std::vector<uint8_t> xq(static_cast<size_t>(act_bytes * n_act));
  std::vector<const uint8_t*> act(n_act);
  for (int a = 0; a < n_act; ++a) {
    QuantizeActivations(type, &x[a * k], k, &xq[a * act_bytes]);
    act[a] = &xq[a * act_bytes];
  }
  std::vector<float> out(static_cast<size_t>(rows * n_act));
  const DotFn dot = GetDotKernel(isa, type);
  int copy = 0;
  for (auto _ : state) {
    dot(w.data() + copy * matrix_bytes, row_bytes, static_cast<int>(rows), k, act.data(), n_act,
        out.data(), rows);
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(state.iterations() * matrix_bytes);
}

// One thread summing max(1 GiB, 4 x the largest cache) with 64-bit loads: what one core streams
// from memory.
void BM_StreamRead(benchmark::State& state) {
  std::vector<uint64_t> buf(
      static_cast<size_t>(std::max<int64_t>(int64_t{1} << 30, BeyondCachesBytes())) / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  for (auto _ : state) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < buf.size(); i += 4) {
      a += buf[i];
      b += buf[i + 1];
      c += buf[i + 2];
      d += buf[i + 3];
    }
    benchmark::DoNotOptimize(a + b + c + d);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(buf.size() * 8));
}
BENCHMARK(BM_StreamRead)->Unit(benchmark::kMillisecond);

#define TANDEM_DOT_BENCH(type, isa)                                                          \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa, quant::GgmlType::k##type, Isa::k##isa, false, 2048) \
      ->Arg(1)                                                                               \
      ->Arg(2)                                                                               \
      ->Arg(4)                                                                               \
      ->Arg(8);                                                                              \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa##_hot, quant::GgmlType::k##type, Isa::k##isa, true, 2048) \
      ->Arg(1)                                                                               \
      ->Arg(2)                                                                               \
      ->Arg(4)                                                                               \
      ->Arg(8)                                                                               \
      ->Arg(64)                                                                              \
      ->Arg(512)
TANDEM_DOT_BENCH(Q4_K, Scalar);
TANDEM_DOT_BENCH(Q4_K, Avx2);
TANDEM_DOT_BENCH(Q4_K, Avx512);
TANDEM_DOT_BENCH(Q3_K, Avx2);
TANDEM_DOT_BENCH(Q3_K, Avx512);
TANDEM_DOT_BENCH(Q5_K, Avx2);
TANDEM_DOT_BENCH(Q5_K, Avx512);
TANDEM_DOT_BENCH(Q8_0, Avx2);
TANDEM_DOT_BENCH(Q8_0, Avx512);
TANDEM_DOT_BENCH(Q6_K, Avx2);
TANDEM_DOT_BENCH(Q6_K, Avx512);
TANDEM_DOT_BENCH(F16, Avx2);
TANDEM_DOT_BENCH(F16, Avx512);
TANDEM_DOT_BENCH(BF16, Avx2);
TANDEM_DOT_BENCH(BF16, Avx512);

// The down projection's shape (k = 768), 1 and 4 activation rows.
#define TANDEM_DOWN_BENCH(type, isa)                                                                 \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa##_down, quant::GgmlType::k##type, Isa::k##isa, false, 768)  \
      ->Arg(1)                                                                                       \
      ->Arg(4);                                                                                      \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa##_down_hot, quant::GgmlType::k##type, Isa::k##isa, true, 768) \
      ->Arg(1)                                                                                       \
      ->Arg(4)
TANDEM_DOWN_BENCH(Q4_K, Avx2);
TANDEM_DOWN_BENCH(Q4_K, Avx512);
TANDEM_DOWN_BENCH(Q3_K, Avx512);

}  // namespace
}  // namespace tandem::experts
