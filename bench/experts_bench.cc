// Lab for the expert kernels: one kernel call (weight rows × 1..8, 64 or 512 activation rows) per
// ISA and format, over a weight set four times the largest cache (rotated per iteration) so the
// number is a streaming rate, next to the same call on one L2-resident matrix (the kernel's compute
// ceiling) and a one-thread streaming read (the memory ceiling one core sees); and the same cold
// calls on every core at once against all-core streaming reads (the bench's own, by claims, and one
// of equal slices, which waits for the slowest thread), plus the activation quantisers. Reports
// weight bytes/s; `tandem bench experts` is the scenario benchmark with ratios against all cores'
// bandwidth.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "experts/kernels.h"
#include "experts/stream_read.h"
#include "experts/topology.h"
#include "runtime/quant/codec.h"
#include "runtime/quant/q8_0.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {
namespace {

// The weights of one case. hot: one matrix of ≤ 150 KiB (64 rows at k = 2048), reused every
// iteration, so it stays in L2. Cold: copies of a 768-row (k = 2048) or 2048-row (k = 768) matrix
// rotated over four times the largest cache (at least 256 MiB), so every call streams from memory.
// k = 2048: the gate/up shape; k = 768: the down shape, whose three-block rows weigh the per-row
// costs (reduction, store) three times as much.
struct Weights {
  std::vector<uint8_t> bytes;
  int64_t rows = 0, row_bytes = 0, matrix_bytes = 0;
  int copies = 0;
  const uint8_t* Copy(int i) const { return bytes.data() + i * matrix_bytes; }
};

Weights MakeWeights(quant::GgmlType type, bool hot, int64_t k) {
  Weights w;
  w.rows = hot ? 64 * 2048 / k : 768 * 2048 / k;
  w.row_bytes = quant::RowBytes(type, k);
  w.matrix_bytes = w.rows * w.row_bytes;
  const int64_t cold_bytes = std::max<int64_t>(256ll << 20, BeyondCachesBytes());
  w.copies = hot ? 1 : static_cast<int>(cold_bytes / w.matrix_bytes) + 1;
  w.bytes.resize(static_cast<size_t>(w.matrix_bytes * w.copies));
  quant::RandomizeBlocks(type, 1, 0.05f, w.bytes.data(),
                         w.copies * w.rows * k / quant::GetTypeInfo(type).block_elems);
  return w;
}

// n_act activation rows of k elements, converted for weights of `type`.
struct Activations {
  std::vector<uint8_t> bytes;
  std::vector<const uint8_t*> rows;
};

Activations MakeActivations(quant::GgmlType type, int64_t k, int n_act) {
  Activations a;
  const std::vector<float> x(static_cast<size_t>(k), 0.5f);
  const int64_t row_bytes = ActivationRowBytes(type, k);
  a.bytes.resize(static_cast<size_t>(row_bytes * n_act));
  for (int i = 0; i < n_act; ++i) {
    QuantizeActivations(type, x.data(), k, &a.bytes[i * row_bytes]);
    a.rows.push_back(&a.bytes[i * row_bytes]);
  }
  return a;
}

void BM_Dot(benchmark::State& state, quant::GgmlType type, Isa isa, bool hot, int64_t k) {
  if (!CpuSupports(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  const int n_act = static_cast<int>(state.range(0));
  const Weights w = MakeWeights(type, hot, k);
  const Activations act = MakeActivations(type, k, n_act);
  std::vector<float> out(static_cast<size_t>(w.rows * n_act));
  const DotFn dot = GetDotKernel(isa, type);
  int copy = 0;
  for (auto _ : state) {
    dot(w.Copy(copy), w.row_bytes, static_cast<int>(w.rows), k, act.rows.data(), n_act, out.data(),
        w.rows);
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % w.copies;
  }
  state.SetBytesProcessed(state.iterations() * w.matrix_bytes);
}

// One cold weight set per (type, k) for the all-core cases, made by the first thread that asks
// and kept for the process (the threads of a case share it; later cases reuse it).
const Weights& SharedColdWeights(quant::GgmlType type, int64_t k) {
  static std::mutex mu;
  static std::map<std::pair<quant::GgmlType, int64_t>, std::unique_ptr<Weights>> sets;
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Weights>& w = sets[{type, k}];
  if (!w) w = std::make_unique<Weights>(MakeWeights(type, /*hot=*/false, k));
  return *w;
}

// Every core at once, as the pool runs a layer: one benchmark thread per hardware thread, each
// calling the kernel on its own cold copies in turn (thread t starts at copy t·copies/threads).
// Loaded memory latency is far above one core's, so a kernel can stream well alone and poorly
// here: the multi-row prefetch distance was tuned in this regime (docs/perf/experts.md, session
// 15). Read it against BM_StreamReadAllCores/prefetching. hot: each thread calls the kernel on its
// own L2-resident matrix instead, the compute ceiling of all cores at once.
void BM_DotAllCores(benchmark::State& state, quant::GgmlType type, Isa isa, int64_t k, bool hot) {
  if (!CpuSupports(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  const int n_act = static_cast<int>(state.range(0));
  const Weights own_hot = hot ? MakeWeights(type, /*hot=*/true, k) : Weights{};
  const Weights& w = hot ? own_hot : SharedColdWeights(type, k);
  const Activations act = MakeActivations(type, k, n_act);
  std::vector<float> out(static_cast<size_t>(w.rows * n_act));
  const DotFn dot = GetDotKernel(isa, type);
  int copy = static_cast<int>(int64_t{state.thread_index()} * w.copies / state.threads());
  for (auto _ : state) {
    dot(w.Copy(copy), w.row_bytes, static_cast<int>(w.rows), k, act.rows.data(), n_act, out.data(),
        w.rows);
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % w.copies;
  }
  state.SetBytesProcessed(state.iterations() * w.matrix_bytes);
}

// max(1 GiB, 4 x the largest cache) in whole claims of StreamReadClaimed (so also a multiple of
// the 16 words SumWordsPrefetching reads at a time), filled once.
const LineAlignedWords& SharedStreamBuffer() {
  static const LineAlignedWords buf = [] {
    LineAlignedWords b(
        static_cast<size_t>(std::max<int64_t>(int64_t{1} << 30, BeyondCachesBytes())) / 8 /
        kStreamChunkWords * kStreamChunkWords);
    for (size_t i = 0; i < b.size(); ++i) b.data()[i] = i;
    return b;
  }();
  return buf;
}

// One thread summing the stream buffer with plain 64-bit loads: what one core streams from memory.
void BM_StreamRead(benchmark::State& state) {
  const LineAlignedWords& buf = SharedStreamBuffer();
  for (auto _ : state) benchmark::DoNotOptimize(SumWordsPlain(buf.data(), buf.size()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(buf.size() * 8));
}

// Every hardware thread reading its own slice of the stream buffer with one of
// experts/stream_read.h's readers: the ceilings of BM_DotAllCores.
void BM_StreamReadAllCores(benchmark::State& state, bool prefetching) {
  const LineAlignedWords& buf = SharedStreamBuffer();
  const size_t slice = buf.size() / state.threads() / 16 * 16;
  const uint64_t* p = buf.data() + slice * state.thread_index();
  for (auto _ : state) {
    benchmark::DoNotOptimize(prefetching ? SumWordsPrefetching(p, slice) : SumWordsPlain(p, slice));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(slice * 8));
}

// All hardware threads started per pass, as `tandem bench experts` reads: `claimed`, its probe
// (StreamReadClaimed: 1 MiB claims); `slices`, one equal slice per thread, the pass waiting for the
// slowest thread, with the slowest and fastest thread's own rate over all passes. On the 16-core
// H200 host the slices read 96-127 GB/s and the claims 131-144, the slowest thread at half the
// fastest's rate (docs/perf/experts.md, session 16).
void BM_StreamPass(benchmark::State& state, bool claimed) {
  const LineAlignedWords& buf = SharedStreamBuffer();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (claimed) {
    for (auto _ : state) {
      const double gbps = StreamReadClaimed(buf, threads, /*prefetching=*/true).gbps;
      state.SetIterationTime(static_cast<double>(buf.size() * 8) / gbps / 1e9);
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(buf.size() * 8));
    return;
  }
  const size_t slice = buf.size() / threads / 16 * 16;
  std::vector<double> seconds(threads);
  double slowest = 0, fastest = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> readers;
    for (int t = 0; t < threads; ++t) {
      readers.emplace_back([&, t] {
        const auto s0 = std::chrono::steady_clock::now();
        benchmark::DoNotOptimize(SumWordsPrefetching(buf.data() + slice * t, slice));
        seconds[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      });
    }
    for (std::thread& r : readers) r.join();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    slowest = std::max(slowest, *std::max_element(seconds.begin(), seconds.end()));
    fastest = std::min(fastest, *std::min_element(seconds.begin(), seconds.end()));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(slice * threads * 8));
  state.counters["slowest_thread_gbps"] = static_cast<double>(slice * 8) / slowest / 1e9;
  state.counters["fastest_thread_gbps"] = static_cast<double>(slice * 8) / fastest / 1e9;
}
BENCHMARK_CAPTURE(BM_StreamPass, slices, false)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamPass, claimed, true)->UseManualTime()->Unit(benchmark::kMillisecond);

// One 2048-element activation row converted for K-quant (Q8_K) or 32-element (Q8_0) weights, by
// QuantizeActivations (AVX2 where the CPU has it) or by the scalar quantiser it must match: the
// pool's X item, which every gate/up item of a layer waits for.
void BM_QuantizeRow(benchmark::State& state, quant::GgmlType weights, bool scalar) {
  constexpr int64_t kHidden = 2048;
  std::vector<float> x(kHidden);
  for (int64_t i = 0; i < kHidden; ++i) x[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  std::vector<uint8_t> row(static_cast<size_t>(ActivationRowBytes(weights, kHidden)));
  const bool k_blocks = ActivationType(weights) == quant::GgmlType::kQ8_K;
  for (auto _ : state) {
    if (!scalar) {
      QuantizeActivations(weights, x.data(), kHidden, row.data());
    } else if (k_blocks) {
      quant::QuantizeBlocks(x.data(), reinterpret_cast<quant::BlockQ8K*>(row.data()),
                            kHidden / quant::kQK_K);
    } else {
      quant::QuantizeBlocks(x.data(), reinterpret_cast<quant::BlockQ8_0*>(row.data()),
                            kHidden / quant::kQK);
    }
    benchmark::DoNotOptimize(row.data());
  }
}
BENCHMARK_CAPTURE(BM_QuantizeRow, q8_k, quant::GgmlType::kQ4_K, false);
BENCHMARK_CAPTURE(BM_QuantizeRow, q8_k_scalar, quant::GgmlType::kQ4_K, true);
BENCHMARK_CAPTURE(BM_QuantizeRow, q8_0, quant::GgmlType::kQ8_0, false);
BENCHMARK_CAPTURE(BM_QuantizeRow, q8_0_scalar, quant::GgmlType::kQ8_0, true);

const int kAllThreads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

BENCHMARK(BM_StreamRead)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamReadAllCores, plain, false)
    ->Threads(kAllThreads)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamReadAllCores, prefetching, true)
    ->Threads(kAllThreads)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#define TANDEM_DOT_BENCH(type, isa)                                                                \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa, quant::GgmlType::k##type, Isa::k##isa, false, 2048)      \
      ->Arg(1)                                                                                     \
      ->Arg(2)                                                                                     \
      ->Arg(4)                                                                                     \
      ->Arg(8);                                                                                    \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa##_hot, quant::GgmlType::k##type, Isa::k##isa, true, 2048) \
      ->Arg(1)                                                                                     \
      ->Arg(2)                                                                                     \
      ->Arg(4)                                                                                     \
      ->Arg(8)                                                                                     \
      ->Arg(64)                                                                                    \
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
#define TANDEM_DOWN_BENCH(type, isa)                                                              \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa##_down, quant::GgmlType::k##type, Isa::k##isa, false,    \
                    768)                                                                          \
      ->Arg(1)                                                                                    \
      ->Arg(4);                                                                                   \
  BENCHMARK_CAPTURE(BM_Dot, type##_##isa##_down_hot, quant::GgmlType::k##type, Isa::k##isa, true, \
                    768)                                                                          \
      ->Arg(1)                                                                                    \
      ->Arg(4)
TANDEM_DOWN_BENCH(Q4_K, Avx2);
TANDEM_DOWN_BENCH(Q4_K, Avx512);
TANDEM_DOWN_BENCH(Q3_K, Avx512);

// All cores: the pool's Flash-Next expert formats, both shapes, 1, 2 and 4 activation rows.
#define TANDEM_ALL_CORES_BENCH(type, isa, cols)                                                    \
  BENCHMARK_CAPTURE(BM_DotAllCores, type##_##isa##_k##cols, quant::GgmlType::k##type, Isa::k##isa, \
                    cols, false)                                                                   \
      ->Arg(1)                                                                                     \
      ->Arg(2)                                                                                     \
      ->Arg(4)                                                                                     \
      ->Threads(kAllThreads)                                                                       \
      ->UseRealTime()
TANDEM_ALL_CORES_BENCH(Q4_K, Avx512, 2048);
TANDEM_ALL_CORES_BENCH(Q4_K, Avx512, 768);
TANDEM_ALL_CORES_BENCH(Q3_K, Avx512, 2048);
TANDEM_ALL_CORES_BENCH(Q3_K, Avx512, 768);
// The same calls on each thread's own L2-resident matrix: the compute ceiling of all cores at once,
// against BM_Dot's hot cases (one core).
BENCHMARK_CAPTURE(BM_DotAllCores, Q4_K_Avx512_k2048_hot, quant::GgmlType::kQ4_K, Isa::kAvx512, 2048,
                  true)
    ->Arg(1)
    ->Arg(4)
    ->Threads(kAllThreads)
    ->UseRealTime();

}  // namespace
}  // namespace tandem::experts
