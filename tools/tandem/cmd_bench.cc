// `tandem bench experts --json FILE`: the expert pool against this host's own ceiling. In one run:
// streaming read bandwidth with all pool threads (claiming the buffer 1 MiB at a time, as the
// workers claim items), then one layer of routed experts (Flash-Next
// shape: hidden 2048, FFN 768, Q3_K and Q4_K, 1/2/10 experts at 1 row and 10 experts shared by
// 4 rows; the Qwen3-30B-A3B shape, 8 Q4_K experts), rotating over enough distinct experts that the
// working set is far beyond L3, and the empty job (dispatch + join). Reports ratios, not only
// times. The stream bandwidth is measured again right before every fifth of every case and each
// fifth's ratio is taken against that measurement (TimeLayer): on a shared host (the 16-core H200
// host moved between 55 and 102 GB/s within one run, 2026-11-30) a single figure from the start
// compared layers with another moment's machine. Each case also reports the share of the threads'
// time spent inside the expert kernels, their rate there, and where the rest of the threads' time
// went (ExpertPool::thread_times). Two more cases time the cpu backend's dense half on the same
// threads (one qwen3-30b-a3b attention layer's Q8_0 projections, q/k/v as one MatMul or three);
// they are not part of the summary.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "experts/packed_experts.h"
#include "experts/pool.h"
#include "experts/stream_read.h"
#include "experts/topology.h"
#include "nlohmann/json.hpp"
#include "runtime/base/stats.h"
#include "runtime/quant/codec.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"
#include "tools/tandem/stream_probe.h"

namespace tandem::cli {
namespace {

struct Options {
  std::string json;
  int threads = 0;
  std::string isa = "auto";
  bool numa = true;
  double seconds = 0.5;  // per case
  int n_expert = 0;      // distinct experts per type, rotated; 0: BankExperts
  int backup_us = experts::kDefaultBackupMicros;
  bool repack = true;
};

// Distinct experts of one type the bench rotates over: enough that the bank is four times the
// largest cache, and at least 128.
int BankExperts(int64_t expert_bytes) {
  return static_cast<int>(
      std::max<int64_t>(128, (experts::BeyondCachesBytes() + expert_bytes - 1) / expert_bytes));
}

struct ExpertBank {
  std::vector<uint8_t> gate, up, down;
  std::optional<experts::PackedExperts> packed;  // when the pool repacks this type (rows8.h)
  experts::ExpertWeights w;                      // what the layers run: packed's, else the above
};

ExpertBank MakeBank(quant::GgmlType type, int64_t hidden, int64_t n_ff, int n_expert) {
  ExpertBank b;
  const int64_t mat = quant::RowBytes(type, hidden) * n_ff;
  b.gate.resize(mat * n_expert);
  b.up.resize(mat * n_expert);
  b.down.resize(quant::RowBytes(type, n_ff) * hidden * n_expert);
  const int64_t blocks = hidden * n_ff * n_expert / quant::GetTypeInfo(type).block_elems;
  quant::RandomizeBlocks(type, 1, 0.05f, b.gate.data(), blocks);
  quant::RandomizeBlocks(type, 2, 0.05f, b.up.data(), blocks);
  quant::RandomizeBlocks(type, 3, 0.05f, b.down.data(), blocks);
  b.w = *experts::ExpertWeights::FromBuffers(type, type, hidden, n_ff, n_expert, b.gate.data(),
                                             b.up.data(), b.down.data());
  return b;
}

// Timed calls of one case, in kRounds rounds, each measuring the stream bandwidth (best of 2
// passes) and then calling `layer` for a fifth of `seconds`; each round's ratio (`bytes` per call)
// is taken against its own stream figure. On the shared 16-core host the stream figure drifts
// within a second (66-102 GB/s in one run), so a ceiling measured once per case can belong to
// another moment's machine than the layers it is compared with.
struct Rounds {
  std::vector<double> round_s, round_stream, round_ratio;
  // Every call's own time, so that a case whose rounds spread can be read: a few layers stalled
  // (a thread descheduled while it held an item) or every layer slow (memory contended).
  std::vector<double> layer_s;
  int64_t layers = 0;
  experts::ExpertPool::ThreadTimes times;  // the pool's thread times over the timed calls
};

Rounds TimeRounds(experts::ExpertPool& pool, StreamProbe& stream, double seconds, double bytes,
                  const std::function<void()>& layer) {
  constexpr int kRounds = 5;
  Rounds r;
  r.layer_s.reserve(1 << 16);
  const experts::ExpertPool::ThreadTimes before = pool.thread_times();
  for (int round = 0; round < kRounds; ++round) {
    r.round_stream.push_back(stream.Measure(2));
    int64_t round_layers = 0;
    const auto t0 = Clock::now();
    while (Seconds(Clock::now() - t0) < seconds / kRounds || round_layers < 4) {
      const auto l0 = Clock::now();
      layer();
      r.layer_s.push_back(Seconds(Clock::now() - l0));
      ++round_layers;
    }
    r.round_s.push_back(Seconds(Clock::now() - t0) / round_layers);
    r.round_ratio.push_back(bytes / r.round_s.back() / 1e9 / r.round_stream.back());
    r.layers += round_layers;
  }
  pool.WaitIdle();  // every worker has added its last stay in a job
  const experts::ExpertPool::ThreadTimes after = pool.thread_times();
  r.times = {.job_ns = after.job_ns - before.job_ns,
             .kernel_ns = after.kernel_ns - before.kernel_ns,
             .gate_up_wait_ns = after.gate_up_wait_ns - before.gate_up_wait_ns,
             .quantise_wait_ns = after.quantise_wait_ns - before.quantise_wait_ns,
             .down_wait_ns = after.down_wait_ns - before.down_wait_ns,
             .join_ns = after.join_ns - before.join_ns,
             .setup_ns = after.setup_ns - before.setup_ns};
  return r;
}

// The figures every case reports from its Rounds, into j; returns the printed summary.
std::string ReportRounds(const experts::ExpertPool& pool, const Rounds& r, double bytes,
                         nlohmann::json& j) {
  const double s = Median(r.round_s), stream_gbps = Median(r.round_stream);
  const double ratio = Median(r.round_ratio);
  const double p50 = Median(r.layer_s), p90 = Quantile(r.layer_s, 0.9);
  const double p99 = Quantile(r.layer_s, 0.99), slowest = Quantile(r.layer_s, 1.0);
  j["layers_timed"] = r.layers;
  j["us_per_layer"] = s * 1e6;  // the median round's
  j["stream_gbps"] = stream_gbps;
  j["expert_gbps"] = bytes / s / 1e9;
  j["bandwidth_ratio"] = ratio;  // median over rounds of (round's GB/s ÷ its stream GB/s)
  j["bandwidth_ratio_rounds"] = r.round_ratio;
  // Single layers (all rounds): the median layer against the median stream figure says what the
  // pool does when nothing stalls it; the mean above is what a decode step would see.
  j["layer_us_p50"] = p50 * 1e6;
  j["layer_us_p90"] = p90 * 1e6;
  j["layer_us_p99"] = p99 * 1e6;
  j["layer_us_max"] = slowest * 1e6;
  j["bandwidth_ratio_p50_layer"] = bytes / p50 / 1e9 / stream_gbps;
  // Of the threads' time in the timed layers (threads × the layers' wall time), the share spent
  // inside the kernel calls, and the rate the threads streamed weights at while inside them; then
  // where the rest went (ExpertPool::ThreadTimes): items waiting for the items they read, the rest
  // of the items (claims, quantising, SiLU, the weighted sums), the caller's join, and threads out
  // of the job (arriving late, or done with their claims before others were). A backup run that
  // lost goes on after its layer and counts in full, so with backups the shares can sum past 1
  // (and "out of the job" fall below 0) by that much.
  double layers_s = 0;
  for (double l : r.layer_s) layers_s += l;
  const double thread_s = pool.threads() * layers_s;
  const auto share = [thread_s](uint64_t ns) { return static_cast<double>(ns) * 1e-9 / thread_s; };
  const experts::ExpertPool::ThreadTimes& t = r.times;
  const double kernel_share = share(t.kernel_ns);
  const double kernel_gbps = bytes * static_cast<double>(r.layers) /
                             (static_cast<double>(t.kernel_ns) * 1e-9 / pool.threads()) / 1e9;
  const double waits[3] = {share(t.gate_up_wait_ns), share(t.quantise_wait_ns),
                           share(t.down_wait_ns)};
  const double in_items = share(t.job_ns) - kernel_share - waits[0] - waits[1] - waits[2];
  const double outside = 1.0 - share(t.job_ns) - share(t.join_ns);
  j["kernel_share"] = kernel_share;
  j["kernel_gbps"] = kernel_gbps;
  j["thread_time_shares"] = {{"kernels", kernel_share},
                             {"gate_up_waits", waits[0]},
                             {"quantise_waits", waits[1]},
                             {"down_waits", waits[2]},
                             {"rest_of_items", in_items},
                             {"caller_join", share(t.join_ns)},
                             {"outside_the_job", outside},
                             // of which: every thread while the caller set the job up
                             {"setup", share(t.setup_ns) * pool.threads()}};
  const auto [lo, hi] = std::minmax_element(r.round_ratio.begin(), r.round_ratio.end());
  char line[640];
  std::snprintf(line, sizeof(line),
                "%9.1f us/layer  %6.2f GB/s  %.2f of stream (%.1f GB/s; rounds %.2f-%.2f; layers "
                "p50 %.1f p90 %.1f p99 %.1f max %.1f us; %lld layers; kernels %.2f of thread "
                "time, %.1f GB/s inside; waits %.3f/%.3f/%.3f, rest of items %.3f, join %.3f, "
                "outside %.3f, setup %.3f)",
                s * 1e6, bytes / s / 1e9, ratio, stream_gbps, *lo, *hi, p50 * 1e6, p90 * 1e6,
                p99 * 1e6, slowest * 1e6, static_cast<long long>(r.layers), kernel_share,
                kernel_gbps, waits[0], waits[1], waits[2], in_items, share(t.join_ns), outside,
                share(t.setup_ns) * pool.threads());
  return line;
}

// One layer of `n_experts` experts, each chosen by all `rows` rows; experts rotate every layer.
nlohmann::json TimeLayer(experts::ExpertPool& pool, const ExpertBank& bank, const char* name,
                         int n_experts, int rows, double seconds, StreamProbe& stream) {
  const int64_t H = bank.w.hidden;
  std::vector<float> x(rows * H, 0.25f), out(rows * H, 0.0f);
  std::vector<experts::ExpertJob> jobs;
  const int n_bank = static_cast<int>(bank.w.n_expert);
  const double bytes = static_cast<double>(bank.w.ExpertBytes()) * n_experts;
  int next = 0;
  const uint64_t backups_before = pool.backups();
  const Rounds r = TimeRounds(pool, stream, seconds, bytes, [&] {
    jobs.clear();
    for (int e = 0; e < n_experts; ++e, next = (next + 1) % n_bank) {
      for (int row = 0; row < rows; ++row) jobs.push_back({row, next, 0.1f});
    }
    if (!pool.Run(bank.w, jobs, x.data(), rows, out.data()).ok()) std::abort();
  });
  nlohmann::json j;
  j["case"] = name;
  j["type"] = quant::GetTypeInfo(bank.w.gate.type).name;
  j["layout"] = experts::WeightLayoutName(bank.w.gate.layout);
  j["hidden"] = H;
  j["n_ff"] = bank.w.n_ff;
  j["experts"] = n_experts;
  j["rows"] = rows;
  const std::string line = ReportRounds(pool, r, bytes, j);
  // Items rerun because their first run was late (PoolOptions::backup_us).
  j["backups"] = pool.backups() - backups_before;
  const std::string type = j["type"].get<std::string>() + "/" + j["layout"].get<std::string>();
  std::printf("%-28s %-10s experts %2d rows %d: %s; %llu backups\n", name, type.c_str(), n_experts,
              rows, line.c_str(), static_cast<unsigned long long>(j["backups"].get<uint64_t>()));
  return j;
}

// The dense half's products of one qwen3-30b-a3b attention layer at one row (Q8_0: q 4096, k and v
// 512 rows of 2048; o 2048 rows of 4096), as the cpu backend runs them: q, k and v in one MatMul
// (`fused`) or one each, then o. Layers rotate over a bank beyond the caches.
nlohmann::json TimeDense(experts::ExpertPool& pool, bool fused, double seconds,
                         StreamProbe& stream) {
  constexpr quant::GgmlType kType = quant::GgmlType::kQ8_0;
  constexpr int64_t kHidden = 2048, kQ = 4096, kKv = 512;
  const int64_t in_bytes = quant::RowBytes(kType, kHidden), out_bytes = quant::RowBytes(kType, kQ);
  const int64_t layer_bytes = in_bytes * (kQ + 2 * kKv) + out_bytes * kHidden;
  const int n_layers = static_cast<int>(
      std::max<int64_t>(8, (experts::BeyondCachesBytes() + layer_bytes - 1) / layer_bytes));
  std::vector<uint8_t> bank(static_cast<size_t>(layer_bytes) * n_layers);
  quant::RandomizeBlocks(kType, 7, 0.05f, bank.data(),
                         static_cast<int64_t>(bank.size()) / quant::GetTypeInfo(kType).block_bytes);
  auto matrix = [&](const uint8_t* data, int64_t cols, int64_t rows) {
    return experts::WeightMatrix{data, kType, cols, rows, quant::RowBytes(kType, cols)};
  };
  std::vector<float> x(kQ, 0.25f), q(kQ), k(kKv), v(kKv), o(kHidden);
  int next = 0;
  const Rounds r = TimeRounds(pool, stream, seconds, static_cast<double>(layer_bytes), [&] {
    const uint8_t* base = bank.data() + static_cast<size_t>(layer_bytes) * next;
    next = (next + 1) % n_layers;
    const experts::MatrixProduct qkv[] = {
        {matrix(base, kHidden, kQ), q.data()},
        {matrix(base + in_bytes * kQ, kHidden, kKv), k.data()},
        {matrix(base + in_bytes * (kQ + kKv), kHidden, kKv), v.data()}};
    const experts::MatrixProduct out[] = {
        {matrix(base + in_bytes * (kQ + 2 * kKv), kQ, kHidden), o.data()}};
    bool ok = true;
    if (fused) {
      ok = pool.MatMul(qkv, x.data(), 1).ok();
    } else {
      for (const experts::MatrixProduct& p : qkv) ok = ok && pool.MatMul({&p, 1}, x.data(), 1).ok();
    }
    if (!ok || !pool.MatMul(out, x.data(), 1).ok()) std::abort();
  });
  nlohmann::json j;
  j["case"] = fused ? "dense q/k/v fused + o" : "dense q, k, v, o";
  j["type"] = quant::GetTypeInfo(kType).name;
  j["rows"] = 1;
  j["layer_bytes"] = layer_bytes;
  const std::string line = ReportRounds(pool, r, static_cast<double>(layer_bytes), j);
  std::printf("%-28s %-5s qwen3-30b-a3b attention, rows 1: %s\n",
              j["case"].get<std::string>().c_str(), j["type"].get<std::string>().c_str(),
              line.c_str());
  return j;
}

int BenchExperts(const Options& o) {
  experts::PoolOptions po;
  po.threads = o.threads;
  po.isa = o.isa;
  po.numa = o.numa;
  po.backup_us = o.backup_us;
  auto pool = experts::ExpertPool::Create(po);
  if (!pool.ok()) {
    std::fprintf(stderr, "tandem bench experts: %s\n", std::string(pool.status().message()).c_str());
    return 1;
  }
  experts::ExpertPool& p = **pool;
  nlohmann::json report;
  report["threads"] = p.threads();
  report["isa"] = experts::IsaName(p.isa());
  report["spin_us"] = p.spin_us();
  report["backup_us"] = p.backup_us();
  report["largest_cache_bytes"] = experts::LargestCacheBytes();
  nlohmann::json nodes = nlohmann::json::array();
  std::printf("pool: %d threads on %zu NUMA node(s):", p.threads(), p.nodes().size());
  for (const experts::PoolNode& n : p.nodes()) {
    nodes.push_back({{"os_index", n.os_index}, {"threads", n.threads()}});
    std::printf(" node %d x %d", n.os_index, n.threads());
  }
  std::printf("\n");
  report["numa_nodes"] = nodes;
  const size_t probe_bytes = StreamProbeBytes();
  StreamProbe stream(p.threads(), probe_bytes);
  const double stream_first = stream.Measure(5);
  std::printf("stream read, %d threads, %.2f GiB buffer (largest cache %.0f MiB): %.2f GB/s\n",
              p.threads(), probe_bytes / 1073741824.0, experts::LargestCacheBytes() / 1048576.0,
              stream_first);
  std::printf("(measured again in every round of every case)\n");
  report["stream_gbps_first"] = stream_first;

  nlohmann::json cases = nlohmann::json::array();
  double best_ratio = 0, rows1_us = 0, rows4_us = 0;
  for (quant::GgmlType type : {quant::GgmlType::kQ3_K, quant::GgmlType::kQ4_K}) {
    const int n_bank =
        o.n_expert > 0 ? o.n_expert : BankExperts(3 * quant::RowBytes(type, 2048) * 768);
    ExpertBank bank = MakeBank(type, 2048, 768, n_bank);
    std::printf("%s bank: %d experts, %.2f GB rotated\n", quant::GetTypeInfo(type).name, n_bank,
                static_cast<double>(bank.w.ExpertBytes()) * n_bank / 1e9);
    if (o.repack && experts::PackedExperts::WouldPack(bank.w, p.isa())) {
      const auto pack_start = Clock::now();
      absl::StatusOr<experts::PackedExperts> packed = experts::PackedExperts::Pack(bank.w, p);
      if (!packed.ok()) {
        std::fprintf(stderr, "tandem bench experts: %s\n",
                     std::string(packed.status().message()).c_str());
        return 1;
      }
      bank.packed.emplace(std::move(packed).value());
      bank.w = bank.packed->weights();
      const double pack_s = Seconds(Clock::now() - pack_start);
      std::printf(
          "  repacked %.2f GB into the rows8 layout in %.2f s (--no-cpu-repack: as stored)\n",
          bank.packed->packed_bytes() / 1e9, pack_s);
      report["repack_seconds_" + std::string(quant::GetTypeInfo(type).name)] = pack_s;
    }
    if (p.nodes().size() > 1) {
      // Each node's home experts on its own memory, as the engine binds a model's.
      absl::StatusOr<int64_t> bound = p.BindWeights(bank.w);
      if (!bound.ok()) {
        std::fprintf(stderr, "tandem bench experts: %s\n",
                     std::string(bound.status().message()).c_str());
        return 1;
      }
    }
    report["working_set_bytes_" + std::string(quant::GetTypeInfo(type).name)] =
        bank.w.ExpertBytes() * n_bank;
    report["distinct_experts_" + std::string(quant::GetTypeInfo(type).name)] = n_bank;
    for (int e : {1, 2, 10}) {
      nlohmann::json j = TimeLayer(p, bank, "flash-next", e, 1, o.seconds, stream);
      if (e >= 2) best_ratio = std::max(best_ratio, j["bandwidth_ratio"].get<double>());
      if (e == 10 && type == quant::GgmlType::kQ4_K) rows1_us = j["us_per_layer"];
      cases.push_back(j);
    }
    nlohmann::json j4 = TimeLayer(p, bank, "flash-next 4 rows shared", 10, 4, o.seconds, stream);
    if (type == quant::GgmlType::kQ4_K) rows4_us = j4["us_per_layer"];
    cases.push_back(j4);
    if (type == quant::GgmlType::kQ4_K) {
      cases.push_back(TimeLayer(p, bank, "qwen3-30b-a3b (top-8)", 8, 1, o.seconds, stream));
    }
    p.WaitIdle();  // a run that lost to its backup may still read this bank (ExpertPool::Run)
  }
  // The cpu backend's dense half on the same threads (not part of the summary's targets).
  for (bool fused : {false, true}) cases.push_back(TimeDense(p, fused, o.seconds, stream));
  report["cases"] = cases;
  std::vector<double> streams;
  for (const nlohmann::json& c : cases) streams.push_back(c["stream_gbps"].get<double>());
  const double stream_median = Median(streams);

  // Empty job: workers spinning (back to back), then after the spin window has expired.
  for (int i = 0; i < 1000; ++i) p.RunEmpty();
  const int n_empty = 200000;
  auto t0 = Clock::now();
  for (int i = 0; i < n_empty; ++i) p.RunEmpty();
  const double dispatch_us = Seconds(Clock::now() - t0) / n_empty * 1e6;
  double cold_total = 0;
  const int n_cold = 50;
  for (int i = 0; i < n_cold; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(p.spin_us() + 2000));
    t0 = Clock::now();
    p.RunEmpty();
    cold_total += Seconds(Clock::now() - t0);
  }
  const double cold_us = cold_total / n_cold * 1e6;
  std::printf("empty job: %.3f us (workers spinning), %.1f us (after the %d us spin window)\n",
              dispatch_us, cold_us, p.spin_us());
  report["dispatch_us"] = dispatch_us;
  report["dispatch_after_sleep_us"] = cold_us;
  const experts::ExpertPool::ClaimCounts claims = p.claim_counts();
  report["items_at_home"] = claims.home;
  report["items_away"] = claims.away;
  std::printf("expert work items run on their experts' home node: %.3f (%llu of %llu)\n",
              claims.home / std::max(1.0, double(claims.home + claims.away)),
              static_cast<unsigned long long>(claims.home),
              static_cast<unsigned long long>(claims.home + claims.away));

  nlohmann::json summary;
  summary["stream_gbps"] = stream_median;  // median of the per-case measurements
  summary["bandwidth_ratio_1row"] = best_ratio;
  summary["dispatch_us"] = dispatch_us;
  summary["rows4_over_rows1"] = rows1_us > 0 ? rows4_us / rows1_us : 0.0;
  return FinishBenchReport("bench experts", o.json, report, summary);
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks against this host's measured ceilings");
  bench->require_subcommand(1);
  auto options = std::make_shared<Options>();
  CLI::App* ex = bench->add_subcommand(
      "experts", "CPU expert pool: stream bandwidth, expert layers, dispatch (not a test)");
  ex->add_option("--json", options->json, "Write the report here");
  ex->add_option("--threads", options->threads,
                 "Pool threads including the caller (0: one per CPU the process may run on, e.g. "
                 "under taskset)");
  AddExpertPoolFlags(ex, &options->isa, &options->numa, &options->backup_us, &options->repack);
  ex->add_option("--seconds", options->seconds, "Time per case")->check(CLI::PositiveNumber);
  ex->add_option("--experts", options->n_expert,
                 "Distinct experts per type, rotated (working set; default: enough for four "
                 "times the largest CPU cache, at least 128)")
      ->check(CLI::Range(10, 4096));
  ex->callback([options, exit_code] { *exit_code = BenchExperts(*options); });
}

}  // namespace tandem::cli
