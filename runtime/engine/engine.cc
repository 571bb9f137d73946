#include "runtime/engine/engine.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "experts/packed_experts.h"
#include "experts/pool.h"
#include "runtime/base/status_macros.h"
#include "runtime/reference/matmul.h"
#if defined(TANDEM_WITH_CUDA)
#include "megakernel/runner.h"
#endif

namespace tandem::engine {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

uint64_t ModelFingerprint(const model::Model& model) {
  uint64_t h = 0xcbf29ce484222325ull;
  const std::string arch = model::ArchGgufName(model.hparams().arch);
  h = Fnv1a(h, arch.data(), arch.size());
  for (const format::TensorInfo& t : model.tensors()) {
    h = Fnv1a(h, t.name.data(), t.name.size());
    h = Fnv1a(h, t.dims.data(), t.dims.size() * sizeof(int64_t));
    h = Fnv1a(h, &t.type, sizeof(t.type));
  }
  return h;
}

namespace {

// The cpu backend's bridge from the reference forward pass to the expert pool. Each layer's
// expert tensors are validated once, on first use (an unsupported format fails the forward pass
// with the pool's message naming it).
class PoolExpertComputer : public reference::ExpertComputer {
 public:
  PoolExpertComputer(experts::ExpertPool* pool, int n_layer)
      : pool_(pool), layers_(n_layer), packed_(n_layer) {}
  // A late item's losing run may still read the repacked weights after its Run returned
  // (ExpertPool::Run); the pool outlives this object (Engine declares it first).
  ~PoolExpertComputer() override { pool_->WaitIdle(); }

  // Layer `layer`'s experts as repacked at load: the pool reads these (returned) instead of the
  // model's.
  const experts::ExpertWeights& SetPacked(int layer, experts::PackedExperts packed) {
    packed_[layer].emplace(std::move(packed));
    layers_[layer] = packed_[layer]->weights();
    return *layers_[layer];
  }

  absl::Status ComputeExperts(int layer, const format::TensorInfo& gate_exps,
                              const format::TensorInfo& up_exps,
                              const format::TensorInfo& down_exps,
                              std::span<const reference::ExpertJob> jobs, const float* x, int T,
                              float* out) override {
    std::optional<experts::ExpertWeights>& w = layers_[layer];
    if (!w) {
      TANDEM_ASSIGN_OR_RETURN(w, experts::ExpertWeights::FromTensors(gate_exps, up_exps, down_exps));
    }
    jobs_.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs_[i] = {jobs[i].row, jobs[i].expert, jobs[i].weight};
    }
    return pool_->Run(*w, jobs_, x, T, out);
  }

 private:
  experts::ExpertPool* pool_;
  std::vector<std::optional<experts::ExpertWeights>> layers_;
  std::vector<std::optional<experts::PackedExperts>> packed_;  // owns the repacked layers' bytes
  std::vector<experts::ExpertJob> jobs_;
};

}  // namespace

absl::Status AttendOnPool(experts::ExpertPool& pool, const reference::AttentionRows& rows,
                          experts::AttentionScratch& scratch) {
  const experts::AttentionProblem p{.q = rows.q,
                                    .q_row_stride = rows.q_row_stride,
                                    .q_head_stride = rows.q_head_stride,
                                    .k = rows.k_cache,
                                    .v = rows.v_cache,
                                    .kv_stride = rows.kv_stride,
                                    .n_head = rows.n_head,
                                    .n_head_kv = rows.n_head_kv,
                                    .head_dim = rows.head_dim,
                                    .n_past = rows.n_past,
                                    .n_rows = rows.n_rows,
                                    .scale = rows.scale,
                                    .out = rows.out};
  return experts::Attend(pool, pool.isa(), p, scratch);
}

namespace {

// The cpu backend's dense half on the expert pool's threads: its products, its attention
// (experts::Attend, a prefill in blocks of kMaxAttendRows rows), and its other per-head loops.
// A matrix in a format the pool has no kernel for (q4_1, q5_0, q5_1) runs in the reference's fp32
// MatMul instead, which Load reports in the engine's notes.
class PoolDenseComputer : public reference::DenseComputer {
 public:
  explicit PoolDenseComputer(experts::ExpertPool* pool) : pool_(pool) {}

  absl::Status MatMul(std::span<const reference::DenseProduct> products, const float* x,
                      int T) override {
    // One pool job per activation format among the products (one for a layer's q, k and v).
    done_.assign(products.size(), false);
    for (size_t i = 0; i < products.size(); ++i) {
      if (done_[i]) continue;
      const format::TensorInfo& w = *products[i].w;
      if (!experts::SupportsFormat(w.type)) {
        reference::MatMul(w, 0, products[i].n_rows, x, T, products[i].y);
        continue;
      }
      job_.clear();
      for (size_t j = i; j < products.size(); ++j) {
        const format::TensorInfo& wj = *products[j].w;
        if (done_[j] || !experts::SupportsFormat(wj.type) ||
            experts::ActivationType(wj.type) != experts::ActivationType(w.type)) {
          continue;
        }
        TANDEM_ASSIGN_OR_RETURN(const experts::WeightMatrix m,
                                experts::WeightMatrix::FromTensor(wj, products[j].n_rows));
        job_.push_back({m, products[j].y});
        done_[j] = true;
      }
      TANDEM_RETURN_IF_ERROR(pool_->MatMul(job_, x, T));
    }
    return absl::OkStatus();
  }

  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) override {
    // Four ranges per thread: the ranges of these loops are alike, so more only costs claims.
    pool_->ParallelFor(n, (n + 4 * pool_->threads() - 1) / (4 * pool_->threads()), body);
  }

  int MaxAttendRows() const override { return experts::kMaxAttendRows; }

  absl::Status Attend(const reference::AttentionRows& rows) override {
    return AttendOnPool(*pool_, rows, attention_scratch_);
  }

 private:
  experts::ExpertPool* pool_;
  experts::AttentionScratch attention_scratch_;
  std::vector<bool> done_;                   // per product of the current call
  std::vector<experts::MatrixProduct> job_;  // the products of one pool job
};

// The note for weight matrices the pool cannot run ("" when there are none): which types, and
// how many tensors of them.
std::string DenseFallbackNote(const model::Model& model) {
  std::map<std::string, int> count;
  for (const format::TensorInfo& t : model.tensors()) {
    // Matrices only: the embedding is looked up row by row, and the expert pool refuses expert
    // tensors it cannot run by name.
    if (t.dims.size() == 2 && t.name != "token_embd.weight" && !experts::SupportsFormat(t.type)) {
      ++count[quant::GetTypeInfo(t.type).name];
    }
  }
  if (count.empty()) return "";
  std::string types;
  for (const auto& [name, n] : count) {
    absl::StrAppend(&types, types.empty() ? "" : ", ", n, " ", name);
  }
  return absl::StrCat("cpu backend: no pool kernel for ", types,
                      " tensors; their products run in the reference's fp32 path (slower)");
}

// Layer il's routed experts as the pool sees them: the pool's refusal when it cannot run them, and
// std::nullopt when the layer has no expert tensors.
std::optional<absl::StatusOr<experts::ExpertWeights>> LayerExperts(const model::Model& model,
                                                                   int il) {
  const std::string p = absl::StrCat("blk.", il, ".");
  const format::TensorInfo* gate = model.Find(p + "ffn_gate_exps.weight");
  const format::TensorInfo* up = model.Find(p + "ffn_up_exps.weight");
  const format::TensorInfo* down = model.Find(p + "ffn_down_exps.weight");
  if (gate == nullptr || up == nullptr || down == nullptr) return std::nullopt;
  return experts::ExpertWeights::FromTensors(*gate, *up, *down);
}

// Why the cpu backend cannot run `model` ("" when it can): the pool's refusal of the first layer's
// expert tensors it has no kernels for.
std::string CpuBackendUnavailableReason(const model::Model& model) {
  for (int il = 0; il < model.hparams().n_layer; ++il) {
    const auto w = LayerExperts(model, il);
    if (w.has_value() && !w->ok()) return std::string(w->status().message());
  }
  return "";
}

// --backend auto without the cuda backend (`why`): cpu when the pool can run the model's experts,
// else reference; either way a note says which and why.
void FallBackToCpu(const model::Model& model, const std::string& why, std::string* backend,
                   std::vector<std::string>* notes) {
  const std::string cpu_unavailable = CpuBackendUnavailableReason(model);
  if (cpu_unavailable.empty()) {
    *backend = "cpu";
    notes->push_back(absl::StrCat("backend auto: ", why,
                                  "; using the cpu backend (--backend reference is the fp32 "
                                  "oracle)"));
  } else {
    *backend = "reference";
    notes->push_back(absl::StrCat("backend auto: ", why, ", and the cpu backend cannot run it (",
                                  cpu_unavailable, "); using the reference backend"));
  }
}

// Places the experts the pool will read (`layers`: repacked or the model's) on their home NUMA
// nodes (experts/topology.h) once, at load: this reads the whole expert set (progress reported),
// so the first tokens neither fault pages in nor read them across nodes. Placement only changes
// speed, so a failure is a note.
void BindExpertsToNodes(const std::vector<experts::ExpertWeights>& layers,
                        experts::ExpertPool& pool, const model::ProgressFn& progress,
                        std::vector<std::string>* notes) {
  uint64_t total = 0;
  for (const experts::ExpertWeights& w : layers) {
    total += static_cast<uint64_t>(w.ExpertBytes() * w.n_expert);
  }
  int64_t bound = 0;
  uint64_t done = 0;
  for (const experts::ExpertWeights& w : layers) {
    absl::StatusOr<int64_t> bytes = pool.BindWeights(w);
    done += static_cast<uint64_t>(w.ExpertBytes() * w.n_expert);
    if (progress) progress(done, total);
    if (!bytes.ok()) {
      notes->push_back(absl::StrCat("expert weights stay where the OS put them (",
                                    bytes.status().message(), ")"));
      return;
    }
    bound += *bytes;
  }
  notes->push_back(
      absl::StrFormat("expert pool: %d NUMA nodes, %.2f GiB of expert weights bound "
                      "to their nodes",
                      pool.nodes().size(), bound / double(1 << 30)));
}

// Repacks every layer's experts that the pool reads faster in another layout (PackedExperts), at
// load, with progress; returns what the pool will read per layer that it can run (layers whose
// experts it refuses are left to the forward pass, which reports them).
absl::StatusOr<std::vector<experts::ExpertWeights>> PrepareExperts(
    const model::Model& model, bool repack, experts::ExpertPool& pool, PoolExpertComputer& computer,
    const model::ProgressFn& progress, std::vector<std::string>* notes) {
  std::vector<experts::ExpertWeights> layers;
  std::vector<int> layer_of;  // the model layer of each entry of `layers`
  std::vector<bool> packs;    // whether that entry is repacked
  uint64_t pack_total = 0;
  for (int il = 0; il < model.hparams().n_layer; ++il) {
    const auto w = LayerExperts(model, il);
    if (!w.has_value() || !w->ok()) continue;
    layers.push_back(**w);
    layer_of.push_back(il);
    packs.push_back(repack && experts::PackedExperts::WouldPack(**w, pool.isa()));
    if (packs.back()) pack_total += static_cast<uint64_t>((*w)->ExpertBytes() * (*w)->n_expert);
  }
  if (pack_total == 0) return layers;
  // The copy must fit beside what is already resident, with room for the caches a session
  // allocates; else the experts are read in place (same sums, slower kernels), and a note says so.
  constexpr int64_t kHeadroom = int64_t{2} << 30;
  if (const int64_t available = experts::AvailableMemoryBytes();
      available > 0 && static_cast<int64_t>(pack_total) + kHeadroom > available) {
    notes->push_back(absl::StrFormat(
        "expert pool: not repacking %.2f GiB of experts for the %s kernels: %.2f GiB of memory "
        "available; reading them in place (the same results, slower)",
        pack_total / double(1 << 30), experts::IsaName(pool.isa()), available / double(1 << 30)));
    return layers;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0;
  int64_t packed_bytes = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!packs[i]) continue;
    done += static_cast<uint64_t>(layers[i].ExpertBytes() * layers[i].n_expert);
    TANDEM_ASSIGN_OR_RETURN(experts::PackedExperts packed,
                            experts::PackedExperts::Pack(layers[i], pool));
    packed_bytes += packed.packed_bytes();
    // What the pool reads from now on: the repacked layer in place of the model's.
    layers[i] = computer.SetPacked(layer_of[i], std::move(packed));
    if (progress) progress(done, pack_total);
  }
  notes->push_back(absl::StrFormat(
      "expert pool: %.2f GiB of experts repacked for the %s kernels in %.1f s (held in RAM; "
      "the model file's pages of them are no longer read; --no-cpu-repack reads them in place)",
      packed_bytes / double(1 << 30), experts::IsaName(pool.isa()), SecondsSince(t0)));
  return layers;
}

}  // namespace

std::string CudaBackendUnavailableReason() {
#if defined(TANDEM_WITH_CUDA)
  return megakernel::CudaUnavailableReason();
#else
  return "this build has no CUDA backend (it was configured without a CUDA toolkit)";
#endif
}

#if defined(TANDEM_WITH_CUDA)
void GpuRunnerDeleter::operator()(megakernel::GpuRunner* runner) const { delete runner; }
#else
void GpuRunnerDeleter::operator()(megakernel::GpuRunner*) const {}  // never created without CUDA
#endif

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = std::unique_ptr<Engine>(new Engine());
  if (options.backend != "auto" && options.backend != "reference" && options.backend != "cpu" &&
      options.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown backend '", options.backend, "' (choose auto, reference, cpu or cuda)"));
  }
  if (options.kernels != "auto" && options.kernels != "megakernel" &&
      options.kernels != "per-phase" && options.kernels != "per-op") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --kernels '", options.kernels,
                     "' (choose auto, megakernel, per-phase or per-op)"));
  }
  TANDEM_ASSIGN_OR_RETURN(const scheduler::KvCache kv_cache,
                          scheduler::ParseKvCache(options.cache_type));
  engine->f16_kv_cache_ = kv_cache == scheduler::KvCache::kF16;
  const std::string cuda_unavailable = CudaBackendUnavailableReason();
  if (options.backend == "cuda" && !cuda_unavailable.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--backend cuda: ", cuda_unavailable,
        "; use --backend cpu, or --backend reference (the fp32 CPU oracle)"));
  }
  // auto without a usable GPU: decided once the model is open (FallBackToCpu).
  engine->backend_name_ = options.backend != "auto"  ? options.backend
                          : cuda_unavailable.empty() ? "cuda"
                                                     : "";
  if (options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--threads ", options.threads, " is negative"));
  }
  if (options.threads > 0) {
    engine->thread_limit_ = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, options.threads);
  }

  model::OpenOptions open;
  open.progress = options.progress;
  TANDEM_ASSIGN_OR_RETURN(engine->model_, model::OpenModel(options.model, open));
  const model::HParams& hp = engine->model_->hparams();
  TANDEM_ASSIGN_OR_RETURN(engine->forward_, reference::ReferenceForward::Create(*engine->model_));
  // Tokenizer: an explicit tokenizer.json, else the GGUF's own keys, else tokenizer.json beside an
  // HF checkpoint. A model without one still serves token-id interfaces.
  std::optional<text::Vocabulary> vocab;
  const std::filesystem::path beside = std::filesystem::path(options.model) / "tokenizer.json";
  if (!options.tokenizer.empty()) {
    TANDEM_ASSIGN_OR_RETURN(vocab, text::Vocabulary::FromHfTokenizerJson(options.tokenizer, hp.n_vocab));
  } else if (engine->model_->metadata().Find("tokenizer.ggml.tokens") != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(vocab, text::Vocabulary::FromGgufMetadata(engine->model_->metadata()));
  } else if (std::filesystem::is_directory(options.model) && std::filesystem::exists(beside)) {
    TANDEM_ASSIGN_OR_RETURN(vocab, text::Vocabulary::FromHfTokenizerJson(beside.string(), hp.n_vocab));
  }
  if (vocab.has_value()) {
    if (vocab->size() > hp.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.model, ": tokenizer has ", vocab->size(), " tokens but the model's embedding has ",
          hp.n_vocab, " rows"));
    }
    for (const std::string& w : vocab->warnings) engine->notes_.push_back(w);
    TANDEM_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::Create(std::move(*vocab)));
    for (const std::string& w : tok.warnings()) engine->notes_.push_back(w);
    engine->tokenizer_.emplace(std::move(tok));
  } else {
    engine->notes_.push_back("the model carries no tokenizer: only token-id interfaces work");
  }

  const int train_ctx = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
  engine->n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min(train_ctx, 4096);
  if (engine->n_ctx_ > train_ctx) {
    engine->notes_.push_back(absl::StrCat("context ", engine->n_ctx_,
                                          " exceeds the model's training context ", train_ctx));
  }

#if defined(TANDEM_WITH_CUDA)
  if (engine->backend_name_ == "cuda") {
    megakernel::RunnerOptions ro;
    ro.n_ctx = engine->n_ctx_;
    ro.mode = options.kernels == "per-op"      ? megakernel::KernelMode::kPerOp
              : options.kernels == "per-phase" ? megakernel::KernelMode::kPerPhase
                                               : megakernel::KernelMode::kMegakernel;
    ro.graphs = options.cuda_graphs;
    ro.f16_kv_cache = engine->f16_kv_cache_;
    ro.vram_budget = options.vram_budget;
    ro.progress = options.progress;
    auto runner = megakernel::GpuRunner::Create(*engine->model_, ro);
    if (runner.ok()) {
      engine->gpu_.reset(std::move(runner).value().release());
      // Fewer rows a step than kMaxRows: the GPU's shared memory does not fit the larger kernels.
      if (!engine->gpu_->rows_limit().empty()) engine->notes_.push_back(engine->gpu_->rows_limit());
    } else if (options.backend == "auto") {
      FallBackToCpu(
          *engine->model_,
          absl::StrCat("the cuda backend cannot run this model (", runner.status().message(), ")"),
          &engine->backend_name_, &engine->notes_);
    } else {
      return runner.status();
    }
  }
#endif
  if (engine->backend_name_.empty()) {
    FallBackToCpu(*engine->model_, cuda_unavailable, &engine->backend_name_, &engine->notes_);
  }
  if (engine->f16_kv_cache_ && engine->backend_name_ != "cuda") {
    engine->notes_.push_back(absl::StrCat(
        "--cache-type f16 on the ", engine->backend_name_,
        " backend: keys and values are rounded to f16 as on the card, but held in f32 (the same "
        "results, no memory saved)"));
  }
  if (engine->backend_name_ == "cpu") {
    experts::PoolOptions pool_options;
    pool_options.threads = options.threads;
    pool_options.isa = options.cpu_isa;
    pool_options.numa = options.cpu_numa;
    pool_options.backup_us = options.cpu_backup_us;
    TANDEM_ASSIGN_OR_RETURN(engine->pool_, experts::ExpertPool::Create(pool_options));
    auto computer = std::make_unique<PoolExpertComputer>(engine->pool_.get(), hp.n_layer);
    TANDEM_ASSIGN_OR_RETURN(const std::vector<experts::ExpertWeights> layers,
                            PrepareExperts(*engine->model_, options.cpu_repack, *engine->pool_,
                                           *computer, options.progress, &engine->notes_));
    if (engine->pool_->nodes().size() > 1) {
      BindExpertsToNodes(layers, *engine->pool_, options.progress, &engine->notes_);
    }
    engine->expert_computer_ = std::move(computer);
    engine->dense_computer_ = std::make_unique<PoolDenseComputer>(engine->pool_.get());
    if (std::string note = DenseFallbackNote(*engine->model_); !note.empty()) {
      engine->notes_.push_back(std::move(note));
    }
  }

  if (!options.routing_log.empty()) {
    scheduler::RoutingLogHeader header;
    header.n_layer = hp.n_layer;
    header.n_expert = hp.n_expert;
    header.n_expert_used = hp.n_expert_used;
    header.model_fingerprint = ModelFingerprint(*engine->model_);
    header.model_name = engine->model_->source();
    TANDEM_ASSIGN_OR_RETURN(engine->routing_log_,
                            scheduler::RoutingLogWriter::Open(options.routing_log, header));
  }
  if (!options.placement.empty()) {
    scheduler::PlacementOptions po;
    po.source = options.placement;
    po.vram_budget = options.vram_budget;
    po.context = engine->n_ctx_;
    po.kv_cache = kv_cache;
    po.replan_every = options.replan_every;
    TANDEM_ASSIGN_OR_RETURN(engine->placement_,
                            scheduler::OnlinePlacement::Create(
                                *engine->model_, ModelFingerprint(*engine->model_), po));
  } else if (options.replan_every != 0) {
    return absl::InvalidArgumentError("--replan-every needs --placement auto or a plan.json");
  }
  engine->load_seconds_ = SecondsSince(t0);
  return engine;
}

std::unique_ptr<Session> Engine::NewSession() {
  return std::unique_ptr<Session>(new Session(this));
}

namespace {

// Host caches for the CPU backends; the cuda backend keeps its state on the card.
reference::SequenceState NewState(const Engine& engine) {
  if (engine.gpu() != nullptr) {
    reference::SequenceState s;
    s.n_ctx = engine.n_ctx();
    return s;
  }
  return reference::SequenceState::Create(engine.hparams(), engine.n_ctx(), engine.f16_kv_cache());
}

}  // namespace

Session::Session(Engine* engine)
    : engine_(engine), state_(NewState(*engine)), sequence_id_(engine->next_sequence_id_++) {}

void Session::Reset() {
  state_ = NewState(*engine_);
  sequence_id_ = engine_->next_sequence_id_++;
  stats_ = SessionStats();
}

absl::Status Session::Run(std::span<const int32_t> tokens, bool all_logits,
                          std::vector<float>* logits, std::vector<int32_t>* argmax) {
  const model::HParams& hp = engine_->hparams();
  const int T = static_cast<int>(tokens.size());
  reference::ForwardOptions options;
  options.all_logits = all_logits;
  options.experts = engine_->expert_computer_.get();
  options.dense = engine_->dense_computer_.get();
  scheduler::RoutingLogWriter* log = engine_->routing_log_.get();
  scheduler::OnlinePlacement* placement = engine_->placement_.get();
  const int k = hp.n_expert_used;
  if (log != nullptr || placement != nullptr) {
    route_ids_.assign(static_cast<size_t>(T) * hp.n_layer * k, 0);
    route_weights_.assign(route_ids_.size(), 0.0f);
    options.routing_hook = [&](int layer, int row, std::span<const int32_t> ids,
                               std::span<const float> weights) {
      const size_t base = (static_cast<size_t>(row) * hp.n_layer + layer) * k;
      std::copy(ids.begin(), ids.end(), route_ids_.begin() + base);
      std::copy(weights.begin(), weights.end(), route_weights_.begin() + base);
    };
  }
  const int first_pos = state_.n_past;
#if defined(TANDEM_WITH_CUDA)
  if (megakernel::GpuRunner* gpu = engine_->gpu_.get(); gpu != nullptr) {
    // The device state belongs to the runner: a new sequence (n_past 0) starts from zero state.
    if (first_pos == 0) TANDEM_RETURN_IF_ERROR(gpu->Reset());
    const bool routes = log != nullptr || placement != nullptr;
    TANDEM_RETURN_IF_ERROR(gpu->Forward(tokens, first_pos, all_logits, logits, argmax,
                                        routes ? &route_ids_ : nullptr,
                                        routes ? &route_weights_ : nullptr));
    state_.n_past += T;
  } else
#endif
  {
    TANDEM_RETURN_IF_ERROR(engine_->forward_->Forward(tokens, state_, options, logits));
    if (argmax != nullptr) {
      const int V = hp.n_vocab;
      const int rows = static_cast<int>(logits->size()) / V;
      argmax->resize(rows);
      for (int r = 0; r < rows; ++r) {
        const float* l = logits->data() + static_cast<size_t>(r) * V;
        (*argmax)[r] = static_cast<int32_t>(std::max_element(l, l + V) - l);
      }
    }
  }
  for (int t = 0; t < T && (log != nullptr || placement != nullptr); ++t) {
    for (int il = 0; il < hp.n_layer; ++il) {
      const size_t base = (static_cast<size_t>(t) * hp.n_layer + il) * k;
      const auto ids = std::span(route_ids_).subspan(base, k);
      const auto weights = std::span(route_weights_).subspan(base, k);
      if (log != nullptr) log->SetLayer(il, ids, weights);
      if (placement != nullptr) placement->Observe(il, ids, weights);
    }
    if (log != nullptr) {
      TANDEM_RETURN_IF_ERROR(log->WriteToken(sequence_id_, first_pos + t, tokens[t]));
    }
    if (placement != nullptr) TANDEM_RETURN_IF_ERROR(placement->EndToken());
  }
  return absl::OkStatus();
}

absl::Status Session::Prefill(std::span<const int32_t> tokens, bool all_logits,
                              std::vector<float>* logits) {
  const auto t0 = std::chrono::steady_clock::now();
  TANDEM_RETURN_IF_ERROR(Run(tokens, all_logits, logits));
  stats_.prompt_tokens += static_cast<int>(tokens.size());
  stats_.prompt_seconds += SecondsSince(t0);
  return absl::OkStatus();
}

absl::StatusOr<int32_t> Session::DecodeGreedy(int32_t token) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> argmax;
  std::vector<float> logits;
  TANDEM_RETURN_IF_ERROR(
      Run(std::span(&token, 1), false, engine_->gpu_ ? nullptr : &logits, &argmax));
  stats_.decode_steps += 1;
  stats_.decode_seconds += SecondsSince(t0);
  return argmax.at(0);
}

absl::Status Session::Decode(int32_t token, std::vector<float>* logits) {
  const auto t0 = std::chrono::steady_clock::now();
  TANDEM_RETURN_IF_ERROR(Run(std::span(&token, 1), false, logits));
  stats_.decode_steps += 1;
  stats_.decode_seconds += SecondsSince(t0);
  return absl::OkStatus();
}

}  // namespace tandem::engine
