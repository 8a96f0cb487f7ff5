// train(): the model's parameters in host buckets (the only copy of the model), a plan for the device budget,
// and the Executor running every step, and every evaluation, on the device. Checkpoints read the host buckets, and
// the device tier (whose state the device alone keeps) through the executor's staging.
#include "engine/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "cpu_optim/adamw.h"
#include "cpu_optim/lr_schedule.h"
#include "dataset/data_source.h"
#include "engine/batches.h"
#include "engine/device/make_device.h"
#include "engine/host_memory.h"
#include "engine/device/stop.h"
#include "engine/device/trace.h"
#include "engine/executor.h"
#include "engine/loss_scaler.h"
#include "engine/progress.h"
#include "engine/slow_stage.h"
#include "engine/step_planning.h"
#include "foundation/atomic_file.h"
#include "foundation/precision.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_dir.h"
#include "formats/export.h"
#include "formats/weights.h"
#include "memory/convert.h"
#include "memory/device_allocations.h"
#include "memory/host_buckets.h"
#include "memory/host_buffer.h"
#include "memory/pinned_pool.h"
#include "kernels/cpu/matmul.h"
#include "models/registry.h"
#include "models/vocab.h"
#include "models/weight_init.h"
#include "offload/policies.h"

namespace ferry::engine {
namespace {

using Clock = std::chrono::steady_clock;
using Region = memory::HostBuckets::Region;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The working copies (what the device computes with, in the precision) rounded from fp32 weights per bucket
// (`source`: the masters, or the compact state's start-up scratch), as AdamW's fused copy-out writes them. In
// chunks over every core: a 1.5B model's masters are 6 GB, and each element is rounded on its own, so the
// bytes do not depend on the split.
void round_into_working_copies(memory::HostBuckets& host, const std::function<std::span<float>(int)>& source) {
  constexpr size_t kChunk = size_t{1} << 20;  // elements
  tbb::parallel_for(size_t{0}, host.layout().buckets().size(), [&](size_t b) {
    if (host.on_device(static_cast<int>(b))) return;  // its working copy is the device's (Executor::write_device_tier)
    const auto master = source(static_cast<int>(b));
    const memory::TensorView working = host.region(static_cast<int>(b), Region::Working);
    const size_t element_bytes = static_cast<size_t>(dtype_bytes(working.dtype));
    tbb::parallel_for(size_t{0}, (master.size() + kChunk - 1) / kChunk, [&](size_t c) {
      const size_t begin = c * kChunk, n = std::min(kChunk, master.size() - begin);
      memory::narrow(static_cast<std::byte*>(working.data) + begin * element_bytes, working.dtype, master.data() + begin,
                     static_cast<int64_t>(n));
    });
  });
}

// The working copies from the masters; the compact state's working copy is the weight itself.
void refresh_working_copies(memory::HostBuckets& host) {
  if (!host.compact()) round_into_working_copies(host, [&](int b) { return host.master(b); });
}

// Per parameter, the fp32 weights that initialisation fills: slices of the masters, or of the compact state's
// start-up scratch (initialised_weights rounds it into the working copies); empty for a bucket the device alone
// keeps (initialize_device_tier).
std::vector<std::span<float>> weights_to_initialise(const memory::HostBuckets& host, int params) {
  std::vector<std::span<float>> views;
  for (int p = 0; p < params; ++p) {
    const auto& slot = host.layout().slot(p);
    views.push_back(host.on_device(slot.bucket) ? std::span<float>()
                    : host.compact()
                        ? host.compact_scratch(slot.bucket)
                              .subspan(static_cast<size_t>(slot.offset), static_cast<size_t>(slot.numel))
                        : std::span<float>(host.view(p, Region::Master).as<float>(), static_cast<size_t>(slot.numel)));
  }
  return views;
}

// The initialised weights made the training state: the working copies rounded from them, and the compact
// state's scratch (its m and v regions) zeroed again.
void initialised_weights(memory::HostBuckets& host) {
  if (!host.compact()) return refresh_working_copies(host);
  round_into_working_copies(host, [&](int b) { return host.compact_scratch(b); });
  tbb::parallel_for(size_t{0}, host.layout().buckets().size(), [&](size_t b) {
    const std::span<float> scratch = host.compact_scratch(static_cast<int>(b));
    std::fill(scratch.begin(), scratch.end(), 0.0f);
  });
}

// The weights, m and v per parameter as the host buckets keep them (fp32 masters and moments, or the compact
// state's bf16 working copy and moments): checkpoints are written from, and read into, these views. A bucket the
// device alone keeps has views without data, read and written one tensor at a time through the executor.
formats::ParameterViews bucket_state(const memory::HostBuckets& host, Executor& executor, int params) {
  formats::ParameterViews views;
  const Region weights = host.compact() ? Region::Working : Region::Master;
  for (const auto& [to, r] : {std::pair{&views.weights, weights}, {&views.m, Region::M}, {&views.v, Region::V}})
    for (int p = 0; p < params; ++p) {
      const auto& slot = host.layout().slot(p);
      to->push_back(host.on_device(slot.bucket) ? memory::TensorView{nullptr, {slot.numel}, DType::F32}
                                                : host.view(p, r));
    }
  using Part = formats::ParameterViews::Part;
  const auto region = [](Part part) {
    return part == Part::Weights ? Region::Master : part == Part::M ? Region::M : Region::V;
  };
  views.fetch = [&executor, region](Part part, int p, std::span<float> out) {
    executor.read_device_tier(p, region(part), out);
  };
  views.store = [&executor, region](Part part, int p, std::span<const float> in) {
    executor.write_device_tier(p, region(part), in);
  };
  return views;
}

// The initial weights of the buckets the device alone keeps, each element the value a whole-model initialisation
// gives it, put on the device a staging's worth at a time (a whole parameter would be a transient copy as large as
// an embedding table: 2.1 GB for Llama-3.1-8B's), with zero moments.
void initialize_device_tier(const Config& cfg, const models::ModelSpec& spec, const memory::HostBuckets& host,
                            Executor& executor) {
  // Over the real elements: a padded vocabulary's rows draw nothing and are zero (models/vocab.h).
  const std::vector<int64_t> real = models::real_numels(spec);
  const models::InitialValues initial(models::init_rules(cfg.model, spec), real, cfg.train.seed);
  constexpr int64_t kChunk = Executor::kTierStagingBytes / 4;  // fp32 elements
  std::vector<float> chunk;
  for (int p = 0; p < static_cast<int>(spec.params.size()); ++p) {
    const auto& slot = host.layout().slot(p);
    if (!host.on_device(slot.bucket)) continue;
    for (int64_t begin = 0; begin < slot.numel; begin += kChunk) {
      chunk.resize(static_cast<size_t>(std::min(kChunk, slot.numel - begin)));
      models::fill_real_range(initial, real, p, begin, chunk);
      executor.write_device_tier(p, Region::Master, chunk, begin);
    }
    executor.zero_device_tier_moments(p);
  }
}

// Which device the run trains on (device::resolve_device: `auto` takes a visible GPU), said at once: measuring it
// comes next and takes seconds. Refuses device: cuda without a GPU before anything is measured.
device::ResolvedDevice chosen_device(const Config& cfg, Progress& progress) {
  device::ResolvedDevice chosen = device::resolve_device(cfg.device);
  progress.message("device: " + chosen.note);
  return chosen;
}

// What a run of `cfg` reads (run_inputs): the data, its shard's sidecar or the text's cached tokens, the
// tokenizer's files, model.init_from and offload.cost_model.
std::vector<PathUse> inputs_of(const Config& cfg) {
  const DataConfig& d = cfg.data;
  std::vector<PathUse> in{
      {"data.path", d.path}, {"model.init_from", cfg.model.init_from}, {"offload.cost_model", cfg.offload.cost_model}};
  const dataset::DataRequest request = data_request(cfg);
  const bool shard = dataset::reads_as_token_shard(d.path, request.format);
  if (shard) in.push_back({"data.path's sidecar", dataset::shard_info_path(d.path)});
  if (d.tokenizer == "byte") return in;
  in.push_back({"data.vocab", d.vocab}), in.push_back({"data.merges", d.merges});
  if (shard) return in;
  try {  // the text's tokens as the token cache keeps them (a missing text or vocabulary: the run's own error follows)
    const std::filesystem::path cached = dataset::token_cache_path(
        d.path, d.cache_dir.empty() ? dataset::default_token_cache_dir() : d.cache_dir, request.tokenizer,
        dataset::token_cache_key(d.path, request.tokenizer, request.format));
    in.push_back({"the token cache", cached}),
        in.push_back({"the token cache's sidecar", dataset::shard_info_path(cached)});
  } catch (const std::runtime_error&) {}
  return in;
}

// The files the run's tokens come from, each with its size and CRC32C, as checkpoints record them: data.path,
// the token cache's shard of a text, and the tokenizer's files.
std::vector<formats::TrainState::DataFile> data_files(const Config& cfg, const dataset::DataSource& source) {
  std::vector<std::pair<std::string, std::filesystem::path>> files{{"data.path", cfg.data.path}};
  if (source.path != cfg.data.path) files.emplace_back("the token cache", source.path);
  if (cfg.data.tokenizer != "byte")
    for (const auto& [role, path] : {std::pair{"data.vocab", cfg.data.vocab}, {"data.merges", cfg.data.merges}})
      if (!path.empty()) files.emplace_back(role, path);
  std::vector<formats::TrainState::DataFile> out;
  for (const auto& [role, path] : files)
    out.push_back({role, std::filesystem::absolute(path).lexically_normal(), checksum_file(path)});
  return out;
}

// Where the model and the tokenizer came from, for `ferry export` (model.init_from, the vocabulary's files).
formats::TrainState::Origin origin_of_run(const Config& cfg, const dataset::DataSource& data) {
  formats::TrainState::Origin o;
  if (!cfg.model.init_from.empty()) o.init_from = std::filesystem::absolute(cfg.model.init_from).lexically_normal();
  if (data.known) o.vocab = data.info.tokenizer.vocab, o.merges = data.info.tokenizer.merges, o.lowercase = data.info.tokenizer.lowercase;
  if (data.known && data.info.tokenizer.kind == "hf" && data.vocabulary) {
    const dataset::Tokenizer& t = *data.vocabulary;
    o.bos_token = t.token_of(t.bos_id()), o.eos_token = t.token_of(t.eos_id());  // "" for -1: none
  }
  return o;
}

// What a checkpoint must match to be resumed by this config.
formats::ResumeCheck resume_check(const Config& cfg) { return {config_hash(cfg), config_identity(cfg), cfg.train.steps}; }

using ResumePoint = std::pair<formats::TrainState, std::filesystem::path>;  // a checkpoint's state and its folder

// --resume's checkpoint state, read and checked against the config at start-up (its files are checked
// when they are loaded).
std::optional<ResumePoint> read_resume_point(const Config& cfg, const TrainOptions& opt) {
  if (opt.resume.empty()) return std::nullopt;
  ResumePoint point;
  try {
    point = formats::read_checkpoint_state(opt.resume);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--resume: ") + e.what());
  }
  formats::check_resumable(point.first, point.second, resume_check(cfg));
  return point;
}

// Every path the run writes against every path it reads, and each other, before anything is written.
// `dir`: the checkpoint dir when it is known (empty: none, or a new run folder, which no path can be yet).
void check_run_paths(const Config& cfg, const TrainOptions& opt, const std::optional<ResumePoint>& from,
                     const std::filesystem::path& dir) {
  using Kind = PathUse::Kind;
  std::vector<PathUse> uses = inputs_of(cfg);
  uses.push_back({"--config", opt.config_file});
  if (from) uses.push_back({"the checkpoint resumed (--resume)", from->second});
  if (!dir.empty()) {
    const std::string name = cfg.train.checkpoint_dir.empty() ? "the run folder" : "train.checkpoint_dir";
    uses.push_back({name, dir, Kind::OutputFolder});
    uses.push_back(
        {"the run's manifest (" + std::string(formats::kRunManifest) + ")", dir / formats::kRunManifest, Kind::Output});
    if (opt.metrics.empty() && cfg.train.checkpoint_dir.empty())
      uses.push_back({"the run's metrics", dir / "metrics.jsonl", Kind::Output});
  }
  for (const auto& [name, path] :
       {std::pair{"--metrics", &opt.metrics}, {"--trace", &opt.trace}, {"--save-cost-model", &opt.save_cost_model}})
    uses.push_back({name, *path, Kind::Output});
  refuse_outputs_over_inputs(uses);
}

// Where the checkpoints go, locked and checked (writable; not another run's) before anything is trained:
// train.checkpoint_dir; else, with opt.experiment, the run folder of the checkpoint resumed (the run goes on
// where it was) or a new run folder; else nowhere. The run's paths are checked first (check_run_paths).
std::optional<formats::CheckpointDir> open_checkpoint_dir(const Config& cfg, const TrainOptions& opt,
                                                          const std::optional<ResumePoint>& from) {
  std::optional<formats::CheckpointDir::Resumed> resumed;
  if (from) resumed = formats::CheckpointDir::Resumed{from->first.run_id, from->second, from->first.step};
  const std::filesystem::path& given = cfg.train.checkpoint_dir;
  const std::filesystem::path run = from ? from->second.parent_path() : std::filesystem::path();
  const std::filesystem::path root = !given.empty() ? given
                                     : from && !opt.experiment.empty()
                                         ? (run.empty() ? "." : run)
                                         : std::filesystem::path();  // none, or a new run folder
  check_run_paths(cfg, opt, from, root);
  if (given.empty() && opt.experiment.empty()) {
    if (cfg.train.checkpoint_every > 0)
      throw std::runtime_error(fmt::format("train.checkpoint_every: {} needs train.checkpoint_dir (where to write them)",
                                           cfg.train.checkpoint_every));
    return std::nullopt;
  }
  if (given.empty() && !from) return formats::CheckpointDir::new_run(opt.experiment, config_hash(cfg));
  return std::optional<formats::CheckpointDir>(std::in_place, root, config_hash(cfg), resumed,
                                               opt.overwrite_checkpoints);
}

cpu_optim::AdamWOptions adamw_options(const Config& cfg) {
  const auto& o = cfg.optim;
  return {{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, o.isa, o.cpu_threads, cpu_optim::Rounding::NearestEven, cfg.train.seed};
}

// One call of train(): everything a run holds, set up in the constructor, then the step loop.
class Run {
 public:
  // eval: `ferry eval`'s options (no checkpoint dir, no metrics; weights from eval->checkpoint if given).
  Run(const Config& cfg, const TrainOptions& opt, const EvalOptions* eval = nullptr);
  TrainSummary train();
  EvalSummary evaluate_only();

 private:
  offload::CostModel measure_cost();
  void announce();
  void start_or_resume();
  void check_resumed_data();
  void open_metrics();
  std::filesystem::path last_good_checkpoint() const;
  void load_weights_of(const std::filesystem::path& checkpoint);
  std::vector<memory::TensorView> pending_gradients() const;
  std::vector<std::string> updated_in_step() const;
  int param_count() const { return static_cast<int>(spec_.params.size()); }
  bool on_cuda() const { return device_choice_.kind == device::DeviceChoice::Kind::Cuda; }
  bool in_run_folder() const { return checkpoints_ && cfg_.train.checkpoint_dir.empty(); }
  float evaluate();
  void evaluate_start();
  device::Interrupted cut_short(int step, const std::exception& e) const;
  void checkpoint(int step);
  void log(int step, const StepResult& r, double step_s, double lr, double loss_scale, std::optional<float> val);
  StepResult execute_step(int step, double* step_s);
  std::string non_finite_loss(int step, float loss);
  bool run_step(int step, int first_step);  // false: stop here
  void summarise();
  TrainSummary report_already_complete();

  const Config& cfg_;
  const TrainOptions& opt_;
  const EvalOptions* eval_;
  std::string weights_from_;  // where the weights came from (for ferry eval's report)
  Progress progress_;
  const std::optional<ResumePoint> resume_from_;
  std::optional<formats::CheckpointDir> checkpoints_;
  const int threads_;
  tbb::global_control tbb_threads_;
  const int64_t allocations_at_entry_ = memory::DeviceAllocations::count();
  const models::ModelSpec spec_;  // with the parameters optim.groups freezes marked
  const std::vector<ParamSettings> param_settings_;  // per parameter, its group's settings; empty without optim.groups
  const cpu_optim::CpuAdamW adamw_;
  const Batches batches_;
  const std::vector<formats::TrainState::DataFile> data_files_;  // what checkpoints record of the data (none for eval)
  const device::ResolvedDevice device_choice_;
  std::string cost_cache_;
  offload::CostModel cost_;
  const DeviceBudget budget_;  // read after the cost model's profiling: its device is gone by then
  offload::StepPlan plan_;
  offload::SimResult predicted_;
  const HostMemoryEstimate host_memory_;  // on the host device: its arena is host memory too
  std::unique_ptr<device::Trace> trace_;
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<memory::PinnedHostPool> pool_;  // the device's pinned host memory: host buckets and staging
  memory::HostBuckets host_;
  Executor executor_;
  LossScaler scaler_;
  const cpu_optim::LrSchedule schedule_;
  const std::string hash_;
  formats::TrainState resumed_;
  std::optional<AppendFile> metrics_;  // checked appends: a full disk is an error naming the file
  TrainSummary sum_;
  double train_s_ = 0;
  std::vector<double> step_times_;
  int64_t optimizer_steps_ = 0;  // updates applied: Adam's bias correction counts these
  Clock::time_point t_start_;
  int64_t allocations_after_set_up_ = 0;
};

// The host memory the run will hold, once the machine is known to have it (the pinned pool, the host device's
// arena and its ops' scratch): a run that cannot is refused before the device or the pool is allocated.
HostMemoryEstimate checked_host_memory(HostMemoryEstimate needs) {
  if (std::string shortfall = host_memory_shortfall(needs, needs.total(), available_host_memory()); !shortfall.empty())
    throw std::runtime_error(shortfall);
  return needs;
}

// The initial weights, into the host buckets' masters (the moments start at zero, as the pool does), and the
// working copies rounded from them; the device tier's straight to the device. Parameters model.init_from lacks
// (allowed by model.init_missing) keep the architecture's initialisation, and the start-up says which.
void initialize_weights(const Config& cfg, const models::ModelSpec& spec, memory::HostBuckets& host, Executor& executor,
                        Progress& progress) {
  const std::vector<std::span<float>> masters = weights_to_initialise(host, static_cast<int>(spec.params.size()));
  models::init_model(cfg.model, spec, masters, cfg.train.seed);
  initialize_device_tier(cfg, spec, host, executor);
  if (!cfg.model.init_from.empty()) {
    const auto to_device = [&executor](int p, std::span<const float> values) {
      executor.write_device_tier(p, Region::Master, values);
    };
    const std::vector<std::string> initialised =
        formats::load_weights(cfg.model.init_from, spec, masters, {cfg.model.init_missing, to_device});
    if (!initialised.empty())
      progress.message(fmt::format("model.init_from: initialised {} tensors the checkpoint lacks: {}", initialised.size(),
                                   fmt::join(initialised, ", ")));
  }
  initialised_weights(host);
}

Run::Run(const Config& cfg, const TrainOptions& opt, const EvalOptions* eval)
    : cfg_(cfg), opt_(opt), eval_(eval), progress_(opt.progress), resume_from_(read_resume_point(cfg, opt)),
      checkpoints_(eval ? std::nullopt : open_checkpoint_dir(cfg, opt, resume_from_)), threads_(cfg.threads()),
      tbb_threads_(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads_)),
      spec_(training_spec(cfg)),
      param_settings_(cfg.optim.groups.empty() ? std::vector<ParamSettings>()
                                               : resolve_param_groups(cfg.optim.groups, spec_, cfg.optim.weight_decay)),
      adamw_(adamw_options(cfg)), batches_(cfg, progress_),
      data_files_(eval ? std::vector<formats::TrainState::DataFile>() : data_files(cfg, batches_.source())),
      device_choice_(chosen_device(cfg, progress_)),
      cost_(during(progress_,
                   on_cuda() ? "measuring the CUDA device (op times, links, AdamW)" : "measuring the host device",
                   [this] { return measure_cost(); })),
      budget_(gpu_budget(cfg.offload.gpu_budget, device_choice_.kind)),
      plan_(during(progress_, "planning (offload.policy: " + cfg.offload.policy + ")",
                   [&] { return plan_for_config(cfg, spec_, cost_, budget_.bytes, "", opt.red_zone_bytes); })),
      predicted_(offload::simulate(plan_.problem, plan_.schedule, plan_.memory)),
      host_memory_(checked_host_memory(estimate_host_memory(spec_, plan_, !on_cuda()))),
      trace_(opt.trace.empty() ? nullptr : std::make_unique<device::Trace>()),
      device_(device::make_device({.kind = device_choice_.kind,
                                   .arena_bytes = plan_.memory.layout.peak,
                                   .trace = trace_.get(),
                                   .compute_threads = threads_,
                                   .link_gbps = cfg.host_device.link_gbps,
                                   .d2h_link_gbps = opt.d2h_link_gbps})),
      pool_(during(progress_, "pinning " + memory::format_bytes(host_memory_.host_buckets) + " of host memory",
                   [this] { return device_->make_host_pool(host_memory_.host_buckets); })),
      host_(plan_.problem.layout, *pool_, plan_.problem.precision, plan_.problem.precision, plan_.problem.compact_state,
            Executor::gradient_landing(plan_), Executor::device_only_buckets(plan_)),
      executor_(during(progress_, "the executor's warm-up (every op once)",
                       [&] {
                         return Executor(spec_, plan_, host_, *pool_, *device_, adamw_,
                                         ExecutorOptions{static_cast<float>(cfg.optim.grad_clip), param_settings_}, trace_.get());
                       })),
      scaler_(cfg.train.precision == "fp16" ? cfg.train.loss_scale_init : 1.0, cfg.train.loss_scale_growth_interval),
      schedule_{cfg.optim.schedule == "constant" ? cpu_optim::LrSchedule::Kind::Constant
                                                 : cpu_optim::LrSchedule::Kind::Cosine,
                static_cast<float>(cfg.optim.lr), static_cast<float>(cfg.optim.min_lr), cfg.optim.warmup_steps,
                cfg.train.steps},
      hash_(config_hash(cfg)) {
  during(progress_, "initialising the weights", [&] { initialize_weights(cfg, spec_, host_, executor_, progress_); });
  if (checkpoints_)
    checkpoints_->on_warning([this](const std::string& warning) { progress_.message("ferry: warning: " + warning); });
  announce();
  start_or_resume();
  allocations_after_set_up_ = memory::DeviceAllocations::count();
  sum_.device_allocations_at_start_up = allocations_after_set_up_ - allocations_at_entry_;
  if (checkpoints_) sum_.checkpoint_dir = checkpoints_->root(), sum_.run_folder = in_run_folder();
  sum_.metrics = !opt.metrics.empty() ? opt.metrics : in_run_folder() ? checkpoints_->root() / "metrics.jsonl" : std::filesystem::path();
  if (!sum_.metrics.empty()) open_metrics();
  if (!opt.save_cost_model.empty()) {
    save_cost_model(opt.save_cost_model, cost_, cfg);
    progress_.message("cost model written to " + opt.save_cost_model.string());
  }
}

// The cost model: this model's ops profiled on a device of its own, with the rates of a file, or measured (the host
// device's, cached; a GPU's links and AdamW, at every start-up).
offload::CostModel Run::measure_cost() {
  kernels::cpu::set_matmul_threads(threads_);
  if (on_cuda()) return cuda_device_cost_model(cfg_, spec_, batches_.train(0));
  return host_device_cost_model(cfg_, spec_, batches_.train(0), &cost_cache_);
}

void Run::announce() {
  const auto& m = cfg_.model;
  const auto& p = plan_.problem;
  const int64_t budget = p.budget_bytes;
  progress_.message(fmt::format(
      "ferry: {} ({} layers, {} heads, n_embd {}), {:.2f}M parameters, device {} ({} threads), batch {}x{} x{} accum, "
      "{} train / {} val tokens, AdamW on the CPU: {} x{}{}",
      spec_.kind, m.n_layer, m.n_head, m.n_embd, spec_.param_count() / 1e6, on_cuda() ? "cuda" : "cpu", threads_,
      cfg_.train.batch_size, cfg_.sequence(), cfg_.train.grad_accum, batches_.data().train_tokens(),
      batches_.data().val_tokens(), cpu_optim::to_string(adamw_.isa()), adamw_.threads(),
      cfg_.optim.compact() ? " on the compact state (bf16 weights, m and v)" : ""));
  const bool delayed = plan_.schedule.delayed_update;
  const std::string overlap = plan_.overlap_note.empty() ? cfg_.offload.overlap : plan_.overlap_note;
  progress_.message(fmt::format(
      "offload: policy {}, {}; budget {}{}, device arena {} (planned; lower bound {}); {} bucket(s) of up to {:.1f} MiB, "
      "{} resident / {} travelling; {} of {} block(s) checkpointed; overlap {}{}; predicted step {:.3f} s (cost model: {}{})",
      plan_.schedule.label(), device_->name(), memory::format_bytes(budget), budget_.note.empty() ? "" : " (" + budget_.note + ")",
      memory::format_bytes(plan_.memory.layout.peak), memory::format_bytes(plan_.memory.layout.lower_bound), p.n_buckets,
      p.layout.target_bytes() / double(1 << 20), memory::format_bytes(predicted_.resident_bytes),
      memory::format_bytes(predicted_.offloaded_bytes), p.checkpointed_layers, m.n_layer, overlap,
      delayed                          ? fmt::format(" (synchronous for the first {} steps)", cfg_.offload.sync_steps)
      : plan_.schedule.pipelined_update ? " (the CPU's AdamW runs on into the next step's forward, which waits per bucket for its new weights)"
                                        : "",
      predicted_.step_s * cfg_.train.grad_accum, cost_.name, cost_cache_.empty() ? "" : ", cached in " + cost_cache_));
  const offload::TierTotals tiers = offload::tier_totals(p, plan_.schedule);
  progress_.message(fmt::format("tiers (parameters): device {:.2f}M, weights resident {:.2f}M, streamed {:.2f}M", tiers.params[0] / 1e6,
                                tiers.params[1] / 1e6, tiers.params[2] / 1e6));
  progress_.message("host memory: " + host_memory_.describe());
  if (in_run_folder())
    progress_.message(fmt::format("run folder: {} ({}checkpoints{})", checkpoints_->root().string(), resume_from_ ? "continued; " : "",
                                  opt_.metrics.empty() ? ", metrics.jsonl" : ""));
  else if (checkpoints_)
    progress_.message("checkpoints: " + checkpoints_->root().string() + " (train.checkpoint_dir)");
  if (!cfg_.optim.groups.empty()) progress_.message(describe_param_groups(cfg_.optim.groups, param_settings_, spec_));
}

// ferry eval --checkpoint: the weights (and moments) of a checkpoint of this model's shape, whatever the rest
// of the config it was trained with.
void Run::load_weights_of(const std::filesystem::path& checkpoint) {
  const auto [state, dir] = formats::read_checkpoint_state(checkpoint);
  const models::ModelConfig &a = state.model, &b = cfg_.model;
  if (a.kind != b.kind || a.n_layer != b.n_layer || a.n_head != b.n_head || a.n_embd != b.n_embd || a.vocab_size != b.vocab_size ||
      a.seq_len != b.seq_len || models::choices_of(a) != models::choices_of(b))
    throw std::runtime_error(fmt::format(
        "--checkpoint: '{}' holds a {} with {} layers, {} heads, n_embd {}, vocab_size {}, seq_len {}, {}; the config's model is a {} with {} "
        "layers, {} heads, n_embd {}, vocab_size {}, seq_len {}, {}: evaluate it with the config it was trained with",
        dir.string(), a.kind, a.n_layer, a.n_head, a.n_embd, a.vocab_size, a.seq_len, models::choices_of(a), b.kind, b.n_layer, b.n_head,
        b.n_embd, b.vocab_size, b.seq_len, models::choices_of(b)));
  formats::read_checkpoint_into(dir, state, spec_, bucket_state(host_, executor_, param_count()));
  refresh_working_copies(host_);
  weights_from_ = fmt::format("{} (step {})", dir.string(), state.step);
}

// The metrics lines of steps up to `step`, kept: the file as it was, or rewritten atomically without the later
// ones (logged by a run that stopped, or was killed, after its last checkpoint: they are trained again). A
// torn last line (killed while writing it) goes too; any other line that is not ferry's metrics is an error,
// as the file would not be the run's. Returns the number of lines removed.
int keep_metrics_through(const std::filesystem::path& path, int64_t step, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return 0;  // none yet, or a device (/dev/null)
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string kept, line;
  int removed = 0, number = 0;
  for (size_t at = 0; at < text.size(); at += line.size() + 1) {
    line = text.substr(at, text.find('\n', at) - at);
    ++number;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const bool metrics = j.is_object() && j.contains("step") && j["step"].is_number_integer();
    const bool torn = at + line.size() >= text.size();  // no newline after it
    if (!metrics && !torn)
      throw std::runtime_error(
          fmt::format("{}: '{}' line {} is not a metrics line of ferry train ('{}'); a resumed run cuts its metrics "
                      "back to the checkpoint's step, and this file is not the run's: name the run's own, or a new "
                      "file",
                      what, path.string(), number, line.substr(0, 60)));
    if (metrics && j["step"].get<int64_t>() <= step) kept += line + "\n";
    else ++removed;
  }
  if (removed > 0) write_file_atomically(path, kept, what);
  return removed;
}

// The metrics file: a fresh run's starts empty; a resumed run's is cut back to the checkpoint's step, then
// appended to, so that each step is logged once.
void Run::open_metrics() {
  const std::string what = opt_.metrics.empty() ? "metrics" : "--metrics";
  if (resume_from_)
    if (const int removed = keep_metrics_through(sum_.metrics, resumed_.step, what))
      progress_.message(
          fmt::format("{}: {} line(s) after step {} removed from '{}': logged before the run stopped, those steps are "
                      "trained, and logged, again",
                      what, removed, resumed_.step, sum_.metrics.string()));
  metrics_.emplace(sum_.metrics, !resume_from_, what);
}

// A resumed run's data against those its checkpoint recorded: other data are an error (with
// resume_with_changed_data, a warning), since the run would train on them and compare its losses with a
// start measured on the earlier ones. (A checkpoint of an earlier build records none.)
void Run::check_resumed_data() {
  const auto& [state, dir] = *resume_from_;
  const std::vector<std::string> changed = formats::changed_data(state.data, data_files_);
  if (changed.empty() || state.step == cfg_.train.steps) return;  // a finished run trains nothing
  const std::string which = fmt::format("{}", fmt::join(changed, "; "));
  if (!opt_.resume_with_changed_data)
    throw std::runtime_error(
        fmt::format("--resume: the data are not those '{}' was trained on: {}. Resumed, the run would train on other "
                    "data and compare its losses "
                    "with a start measured on the earlier ones: restore the data, or pass --resume-with-changed-data "
                    "to go on with these",
                    dir.string(), which));
  progress_.message(fmt::format(
      "ferry: warning: --resume-with-changed-data: {}; training goes on with these data (the validation loss "
      "at step 0 was measured on the earlier ones)",
      which));
}

// The newest complete checkpoint on disk to resume from: this run's, else the one it resumed from; empty: none.
std::filesystem::path Run::last_good_checkpoint() const {
  if (checkpoints_) try {
      return formats::find_checkpoint(checkpoints_->root());
    } catch (const std::runtime_error&) {}
  if (resume_from_ && std::filesystem::is_regular_file(resume_from_->second / "state.json"))
    return resume_from_->second;
  return {};
}

void Run::start_or_resume() {
  if (eval_) {
    weights_from_ = !cfg_.model.init_from.empty() ? "model.init_from " + cfg_.model.init_from.string()
                                                  : fmt::format("the initialisation of train.seed {}", cfg_.train.seed);
    if (!eval_->checkpoint.empty()) load_weights_of(eval_->checkpoint);
    executor_.upload_state();
    return;
  }
  if (resume_from_) {
    check_resumed_data();
    // Straight into the host buckets (the pending update's gradients once the executor holds one). The
    // checkpoint was checked against the config when it was found (read_resume_point).
    const auto& [state, dir] = *resume_from_;
    formats::read_checkpoint_into(dir, state, spec_, bucket_state(host_, executor_, param_count()));
    refresh_working_copies(host_);
    resumed_ = state;
    progress_.message(fmt::format("resumed from {} at step {}{}", dir.string(), resumed_.step,
                                  resumed_.files.empty() ? " (written before checkpoints recorded checksums: not verified)"
                                                         : ", checksums verified"));
  }
  executor_.upload_state();
  optimizer_steps_ = resumed_.optimizer_steps;
  if (cfg_.train.precision == "fp16" && resume_from_) scaler_.restore(resumed_.loss_scale, resumed_.loss_scale_good_steps);
  if (!resumed_.pending) return;
  if (!plan_.schedule.delayed_update)
    throw std::runtime_error("--resume: the checkpoint holds a delayed update; resume with offload.overlap: delayed");
  const auto& u = *resumed_.pending;
  if (const std::vector<std::string> here = updated_in_step(); u.updated_in_step != here)
    throw std::runtime_error(fmt::format(
        "--resume: the checkpoint's pending delayed update leaves out the {} parameters its run updated on the device in the step "
        "(the device tier); this run's plan updates {} there, so the update would reach the wrong ones. Resume with the settings that "
        "wrote it (offload.gpu_budget, offload.bucket_mb, and a fixed offload.cost_model: one measured at start-up can change the plan)",
        u.updated_in_step.size(), here.size()));
  executor_.set_pending_update({u.adam_step, u.lr, {{u.grad_norm, u.skipped}, u.grad_scale}});
  formats::StateToRead pending;
  pending.pending = pending_gradients();
  formats::read_checkpoint_into(resume_from_->second, resumed_, spec_, pending);
}

// The trained parameters the plan's device tier updates in the step: what a pending delayed update leaves out.
std::vector<std::string> Run::updated_in_step() const {
  std::vector<std::string> names;
  for (int p = 0; p < param_count(); ++p) {
    const int b = plan_.problem.layout.slot(p).bucket;
    if (plan_.schedule.device_optimizer[b] && plan_.problem.first_grad_op[b] >= 0 && !spec_.params[p].frozen) names.push_back(spec_.params[p].name);
  }
  return names;
}

// Per parameter, its slice of the pending delayed update's gradients (the executor holds one); without data for a
// bucket the device alone keeps (none: the step updated it).
std::vector<memory::TensorView> Run::pending_gradients() const {
  std::vector<memory::TensorView> views;
  for (int p = 0; p < param_count(); ++p) {
    const auto& slot = plan_.problem.layout.slot(p);
    const memory::TensorView bucket = executor_.pending_gradients(slot.bucket);
    std::byte* data =
        bucket.data ? static_cast<std::byte*>(bucket.data) + slot.offset * dtype_bytes(bucket.dtype) : nullptr;
    views.push_back({data, {slot.numel}, bucket.dtype});
  }
  return views;
}

float Run::evaluate() {
  double sum = 0;
  for (int i = 0; i < cfg_.train.eval_batches; ++i) sum += executor_.evaluate(batches_.val(i));
  return static_cast<float>(sum / cfg_.train.eval_batches);
}

void Run::checkpoint(int step) {
  if (!checkpoints_) return;
  executor_.download_state();
  formats::StateToWrite from = bucket_state(host_, executor_, param_count());  // written as they are, no copy
  formats::TrainState state{step, optimizer_steps_, sum_.val_loss_start, scaler_.value(), scaler_.good_steps(), hash_, cfg_.model,
                            batches_.source().tokenizer_name(), {}};
  state.origin = origin_of_run(cfg_, batches_.source());
  state.val_loss = sum_.val_loss;  // the last evaluated: what a resumed, already complete run reports
  state.config = config_identity(cfg_);
  state.data = data_files_;
  if (const auto u = executor_.pending_update()) {  // delayed: the last step's update travels with the checkpoint
    state.pending = formats::TrainState::PendingUpdate{u->adam_step, u->lr, u->decision.report.grad_norm, u->decision.grad_scale,
                                                       u->decision.report.skipped, updated_in_step()};
    for (const auto& g : pending_gradients()) from.pending.push_back(g);
  }
  try {
    sum_.last_checkpoint = checkpoints_->save(spec_, from, state, cfg_.train.keep_checkpoints);
  } catch (const std::exception& e) {
    if (opt_.stop && opt_.stop->load()) throw;  // cut_short says what is saved
    const std::filesystem::path last = last_good_checkpoint();
    throw std::runtime_error(fmt::format(
        "the checkpoint of step {} failed: {}; {}", step, e.what(),
        last.empty()
            ? std::string(
                  "no checkpoint of this run is on disk to resume from: fix the cause (a full disk?) and train again")
            : fmt::format("the last good checkpoint is '{}': fix the cause (a full disk?), then continue from it with "
                          "--resume {}",
                          last.string(), last.string())));
  }
}

void Run::log(int step, const StepResult& r, double step_s, double lr, double loss_scale, std::optional<float> val) {
  const double elapsed = seconds_since(t_start_);
  const int64_t tokens_per_step = int64_t(cfg_.train.batch_size) * cfg_.sequence() * cfg_.train.grad_accum;
  const bool last = step == cfg_.train.steps;
  if (step % cfg_.train.log_every == 0 || last || step == 1)
    progress_.update(step, cfg_.train.steps, r.loss, tokens_per_step / step_s, elapsed,
                     format_step_figures({predicted_.offloaded_bytes > 0, r.h2d_bytes, r.d2h_bytes, r.stall_s, step_s,
                                          sum_.predicted_step_s}));
  if (val) progress_.message(fmt::format("step {}: val_loss {:.4f}", step, *val));
  if (!metrics_) return;
  nlohmann::json j{{"step", step}, {"loss", r.loss}, {"lr", lr}, {"grad_norm", r.grad_norm},
                   {"tokens_per_s", tokens_per_step / step_s}, {"elapsed_s", elapsed},
                   {"step_s", step_s}, {"predicted_step_s", sum_.predicted_step_s}, {"stall_s", r.stall_s},
                   {"h2d_bytes", r.h2d_bytes}, {"d2h_bytes", r.d2h_bytes}, {"arena_bytes", sum_.arena_bytes},
                   {"peak_device_bytes", device_->measured_peak_bytes()}};
  if (cfg_.train.precision == "fp16") j["loss_scale"] = loss_scale;
  if (r.skipped) j["skipped"] = true;
  if (val) j["val_loss"] = *val;
  metrics_->append_line(j.dump());
}

// One step's micro-batches through the executor, and what the step changed: the optimizer step count
// (an overflowed step applies nothing), the loss scale, the timings.
StepResult Run::execute_step(int step, double* step_s) {
  const auto t0 = Clock::now();
  std::vector<dataset::Batch> micro(cfg_.train.grad_accum);
  for (int i = 0; i < cfg_.train.grad_accum; ++i) micro[i] = batches_.train(int64_t(step - 1) * cfg_.train.grad_accum + i);
  const double loss_scale = scaler_.value();
  const StepResult r = executor_.step(micro, optimizer_steps_ + 1, schedule_.at(step - 1), scaler_.scale());
  const bool fp16 = cfg_.train.precision == "fp16";
  if (fp16) scaler_.update(!r.skipped);
  // Synchronous steps: the first ones, and the last (its update belongs to the result).
  if (plan_.schedule.delayed_update && (step <= cfg_.offload.sync_steps || step == cfg_.train.steps)) executor_.apply_pending_update();
  if (!r.skipped) ++optimizer_steps_;
  if (r.skipped) ++sum_.skipped_steps;
  if (r.skipped)
    progress_.message(fp16 ? fmt::format("step {}: the gradients overflowed at loss scale {:g}; the update was skipped and the scale "
                                         "is now {:g}", step, loss_scale, scaler_.value())
                           : fmt::format("step {}: an inf/nan gradient; the update was skipped", step));
  *step_s = seconds_since(t0);
  train_s_ += *step_s;
  step_times_.push_back(*step_s);
  sum_.h2d_bytes = r.h2d_bytes, sum_.d2h_bytes = r.d2h_bytes;
  sum_.stall_s += r.stall_s;
  sum_.losses.push_back(r.loss);
  if (!std::isfinite(r.loss)) throw std::runtime_error(non_finite_loss(step, r.loss));
  return r;
}

// nan without the sign fmt gives it (a NaN's sign bit means nothing), inf and -inf as they are.
std::string non_finite_text(float x) { return std::isnan(x) ? "nan" : fmt::format("{}", x); }

// The first weight (master, or the compact state's bf16 weight) that is not finite, as "tensor NAME holds VALUE";
// empty when all are.
std::string first_non_finite(const models::ModelSpec& spec, const memory::HostBuckets& host, Executor& executor) {
  const formats::ParameterViews state = bucket_state(host, executor, static_cast<int>(spec.params.size()));
  std::vector<float> fetched;  // a device-tier tensor's
  for (size_t p = 0; p < state.weights.size(); ++p) {
    memory::TensorView w = state.weights[p];
    if (!w.data) {
      fetched.resize(static_cast<size_t>(w.numel()));
      state.fetch(formats::ParameterViews::Part::Weights, static_cast<int>(p), fetched);
      w.data = fetched.data();
    }
    for (int64_t i = 0; i < w.numel(); ++i) {
      const float x = w.dtype == DType::F32 ? w.as<float>()[i] : bf16_to_float(w.as<uint16_t>()[i]);
      if (!std::isfinite(x)) return fmt::format("tensor {} holds {}", spec.params[p].name, non_finite_text(x));
    }
  }
  return {};
}

// What a loss that is not finite means, and what to do. Weights already not finite at the first step came
// so from where the run started (a damaged or diverged file), which no learning rate fixes; later, the run
// diverged. (A step whose gradients are not finite is skipped, so the weights are those that gave the loss.)
std::string Run::non_finite_loss(int step, float loss) {
  executor_.download_state();
  const std::string bad = first_non_finite(spec_, host_, executor_);
  const bool first = step == static_cast<int>(resumed_.step) + 1;
  const std::string source = resume_from_                      ? "the checkpoint resumed, '" + resume_from_->second.string() + "'"
                             : !cfg_.model.init_from.empty()  ? "model.init_from, '" + cfg_.model.init_from.string() + "'"
                                                              : "the initialisation";
  if (first && !bad.empty())
    return fmt::format("step {}: the loss is {} because the weights were not finite before training began ({}); they come from "
                       "{}, which is damaged or was saved from a run that diverged: lowering optim.lr will not help; start from "
                       "other weights", step, non_finite_text(loss), bad, source);
  if (first)
    return fmt::format("step {}: the loss is {} at the first step of this run, before its first update, with finite weights "
                       "from {}: lowering optim.lr will not help; look for extreme values in those weights", step, non_finite_text(loss), source);
  return fmt::format("step {}: the loss is {}{}: the run diverged; lower optim.lr or raise optim.warmup_steps{}", step, non_finite_text(loss),
                     bad.empty() ? "" : " and the weights are no longer finite (" + bad + ")",
                     cfg_.optim.grad_clip > 0 ? "" : ", or clip gradients (optim.grad_clip: 1.0)");
}

// One step, then its evaluation, log line and checkpoint. Returns false when the run stops here.
bool Run::run_step(int step, int first_step) {
  if (trace_) trace_->enable(step < first_step + opt_.trace_steps);
  if (!opt_.inject_fault.empty() && step == opt_.inject_fault_step) executor_.inject_fault(opt_.inject_fault);
  const double loss_scale = scaler_.value(), lr = schedule_.at(step - 1);
  double step_s = 0;
  const StepResult r = execute_step(step, &step_s);
  const bool last = step == cfg_.train.steps;
  std::optional<float> val;
  if (batches_.data().val_tokens() > 0 && (last || (cfg_.train.eval_every > 0 && step % cfg_.train.eval_every == 0)))
    sum_.val_loss = *(val = evaluate());
  log(step, r, step_s, lr, loss_scale, val);
  const bool stopping = (opt_.stop && opt_.stop->load()) || (opt_.stop_after > 0 && step - first_step + 1 >= opt_.stop_after);
  if ((cfg_.train.checkpoint_every > 0 && step % cfg_.train.checkpoint_every == 0 && !last) || (stopping && !last)) {
    checkpoint(step);
    if (!sum_.last_checkpoint.empty()) progress_.message(fmt::format("step {}: checkpoint {}", step, sum_.last_checkpoint.string()));
  }
  if (!stopping || last) return true;
  sum_.interrupted = true;
  sum_.steps = step;
  return false;
}

void Run::summarise() {
  sum_.device_allocations_after_start_up = memory::DeviceAllocations::count() - allocations_after_set_up_;
  sum_.measured_peak_device_bytes = device_->measured_peak_bytes();
  sum_.device_bytes_held = memory::DeviceAllocations::bytes_held();
  if (!sum_.interrupted) sum_.steps = cfg_.train.steps;
  sum_.wall_s = seconds_since(t_start_);
  const size_t ran = sum_.losses.size();  // steps run by this call (fewer when resumed or stopped)
  const int64_t tokens_per_step = int64_t(cfg_.train.batch_size) * cfg_.sequence() * cfg_.train.grad_accum;
  sum_.tokens_per_s = ran ? static_cast<double>(tokens_per_step) * double(ran) / train_s_ : 0.0;
  if (!step_times_.empty()) {
    std::sort(step_times_.begin(), step_times_.end());
    sum_.median_step_s = step_times_[step_times_.size() / 2];
  }
  const size_t tail = std::min<size_t>(10, ran);
  double tail_sum = 0;
  for (size_t i = ran - tail; i < ran; ++i) tail_sum += sum_.losses[i];
  sum_.train_loss = tail ? static_cast<float>(tail_sum / static_cast<double>(tail)) : std::numeric_limits<float>::quiet_NaN();
}

// Resumed from the run's final checkpoint: its losses as recorded, nothing trained or rewritten (the caller
// says so: once).
TrainSummary Run::report_already_complete() {
  sum_.already_complete = true;
  sum_.steps = cfg_.train.steps;
  sum_.val_loss_start = static_cast<float>(resumed_.val_loss_start);
  sum_.val_loss = static_cast<float>(resumed_.val_loss);  // NaN for a checkpoint of an earlier build (not recorded)
  sum_.train_loss = std::numeric_limits<float>::quiet_NaN();
  sum_.last_checkpoint = resume_from_->second;
  return sum_;
}

// The validation loss before training; a fresh run's metrics start with it (a resumed run's already hold it).
void Run::evaluate_start() {
  const bool has_val = batches_.data().val_tokens() > 0;
  if (resume_from_) {
    sum_.val_loss = sum_.val_loss_start = static_cast<float>(resumed_.val_loss_start);
    return;
  }
  sum_.val_loss = sum_.val_loss_start = has_val ? evaluate() : std::numeric_limits<float>::quiet_NaN();
  if (!has_val) return;
  progress_.message(fmt::format("step 0: val_loss {:.4f}", sum_.val_loss_start));
  if (metrics_)
    metrics_->append_line(nlohmann::json{{"step", 0}, {"val_loss", sum_.val_loss_start}, {"elapsed_s", seconds_since(t_start_)}}.dump());
}

// A stop that cut a step or its checkpoint short (a copy that could not finish in time): what was lost and
// where to resume from.
device::Interrupted Run::cut_short(int step, const std::exception& e) const {
  const std::filesystem::path last = last_good_checkpoint();
  const std::string resume =
      last.empty() ? std::string("no checkpoint was written") : "resume with --resume " + last.string();
  return device::Interrupted(fmt::format("stopped before step {} and its checkpoint were complete ({}); {}", step, e.what(), resume));
}

TrainSummary Run::train() {
  if (resume_from_ && resumed_.step == cfg_.train.steps) return report_already_complete();
  const device::StopFinishesWork training;  // from here a stop finishes the step and checkpoints
  sum_.policy = plan_.schedule.policy;
  sum_.plan = plan_.schedule.label();
  const offload::TierTotals tiers = offload::tier_totals(plan_.problem, plan_.schedule);
  std::copy(std::begin(tiers.params), std::end(tiers.params), sum_.tier_params);
  std::copy(std::begin(tiers.bytes), std::end(tiers.bytes), sum_.tier_bytes);
  sum_.checkpointed_blocks = plan_.problem.checkpointed_layers;
  sum_.arena_bytes = plan_.memory.layout.peak;
  sum_.params = spec_.param_count();
  sum_.host_bucket_bytes = memory::HostBuckets::bytes_needed(
      plan_.problem.layout, plan_.problem.precision, plan_.problem.precision, plan_.problem.compact_state,
      Executor::gradient_landing(plan_), Executor::device_only_buckets(plan_));
  sum_.budget_bytes = plan_.problem.budget_bytes;
  sum_.predicted_step_s = predicted_.step_s * cfg_.train.grad_accum;
  t_start_ = Clock::now();
  const int first_step = static_cast<int>(resumed_.step) + 1;
  int step = first_step;
  try {
    evaluate_start();
    for (; step <= cfg_.train.steps; ++step)
      if (!run_step(step, first_step)) break;
    if (!sum_.interrupted) checkpoint(step = cfg_.train.steps);
  } catch (const std::exception& e) {
    if (!opt_.stop || !opt_.stop->load()) throw;
    throw cut_short(step, e);
  }
  if (metrics_) metrics_->close();
  progress_.finish();
  if (trace_) {
    trace_->write(opt_.trace);
    progress_.message(fmt::format("trace: {} ({} slices); open it in ui.perfetto.dev", opt_.trace.string(), trace_->slices()));
  }
  summarise();
  return sum_;
}

EvalSummary Run::evaluate_only() {
  if (batches_.data().val_tokens() == 0)
    throw std::runtime_error("data.val_fraction: 0 leaves no validation text to evaluate; set it above 0");
  EvalSummary e;
  e.val_loss = evaluate();
  e.batches = cfg_.train.eval_batches;
  e.tokens = int64_t(e.batches) * cfg_.train.batch_size * cfg_.sequence();
  e.weights = weights_from_;
  return e;
}

}  // namespace

TrainSummary train(const Config& config, const TrainOptions& options) {
  Run run(config, options);
  return run.train();
}

EvalSummary evaluate(const Config& config, const EvalOptions& options) {
  TrainOptions quiet;
  quiet.progress = options.progress;
  Run run(config, quiet, &options);
  return run.evaluate_only();
}

std::vector<PathUse> run_inputs(const Config& config) { return inputs_of(config); }

void initialize_weights(const Config& config, const models::ModelSpec& spec, memory::HostBuckets& host,
                        Executor& executor, std::FILE* progress) {
  Progress lines(progress);
  initialize_weights(config, spec, host, executor, lines);  // as a Run does, with its own progress lines
}

formats::StartingPoint starting_point(const Config& config) {
  const dataset::DataRequest request = data_request(config);
  dataset::DataSource data;
  if (dataset::reads_as_token_shard(request.path, request.format)) data = dataset::open_data_source(request);
  else data.known = true, data.info.tokenizer = request.tokenizer;  // what the run's tokenisation records
  if (data.info.tokenizer.kind == "hf" && !data.vocabulary && std::filesystem::exists(data.info.tokenizer.vocab))
    data.vocabulary = dataset::load_tokenizer(data.info.tokenizer);  // its BOS and EOS, for tokenizer_config.json
  return {config.model, config.train.seed, data.tokenizer_name(), origin_of_run(config, data)};
}

}  // namespace ferry::engine
