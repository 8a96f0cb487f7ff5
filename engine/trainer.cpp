// train(): the model's parameters in host buckets, a plan for the device budget, and the Executor running
// every step on the device. Evaluation and checkpoints read the host's master weights.
#include "engine/trainer.h"

#include <fmt/format.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "cpu_optim/adamw.h"
#include "engine/executor.h"
#include "engine/device/host_cost_model.h"
#include "engine/device/host_device.h"
#include "engine/loss_scaler.h"
#include "models/registry.h"
#include "engine/device/trace.h"
#include "cpu_optim/lr_schedule.h"
#include "formats/checkpoint.h"
#include "engine/device/cuda_devices.h"
#include "dataset/dataset.h"
#include "engine/progress.h"
#include "formats/weights.h"
#include "memory/bucket_layout.h"
#include "memory/host_buckets.h"
#include "memory/host_buffer.h"
#include "memory/pinned_pool.h"
#include "offload/policies.h"
#include "models/cpu_runner.h"
#include "models/gpt2.h"
#include "models/ops/matmul.h"

namespace ferry::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class ValBatch>
float evaluate(models::CpuRunner& runner, int batches, ValBatch&& val_batch) {
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    const dataset::Batch b = val_batch(i);
    runner.set_batch(b.tokens, b.targets, b.attention_mask);
    sum += runner.forward();
  }
  return static_cast<float>(sum / batches);
}

using Region = memory::HostBuckets::Region;

// The ParameterStore (flat, per parameter) and flat moment buffers (allocated only while a checkpoint is
// read or written), to and from the host buckets: checkpoints, initial weights and evaluation use the
// former, training the latter.
size_t flat_offset(const models::ParameterStore& params, int p) {
  return static_cast<size_t>(params.value(p).data() - params.values().data());
}
void scatter_weights(const models::ParameterStore& params, memory::HostBuckets& host) {
  for (int p = 0; p < params.count(); ++p)
    std::memcpy(host.view(p, Region::Master).data, params.value(p).data(), params.value(p).size_bytes());
  for (size_t b = 0; b < host.layout().buckets().size(); ++b) {
    const auto master = host.master(static_cast<int>(b));
    std::memcpy(host.region(static_cast<int>(b), Region::Working).data, master.data(), master.size_bytes());  // fp32
  }
}
void scatter_moments(const models::ParameterStore& params, std::span<const float> m, std::span<const float> v,
                     memory::HostBuckets& host) {
  for (int p = 0; p < params.count(); ++p) {
    const size_t n = params.value(p).size(), at = flat_offset(params, p);
    std::memcpy(host.view(p, Region::M).data, m.data() + at, n * 4);
    std::memcpy(host.view(p, Region::V).data, v.data() + at, n * 4);
  }
}
void gather_weights(const memory::HostBuckets& host, models::ParameterStore& params) {
  for (int p = 0; p < params.count(); ++p)
    std::memcpy(params.value(p).data(), host.view(p, Region::Master).data, params.value(p).size_bytes());
}
void gather_moments(const memory::HostBuckets& host, const models::ParameterStore& params, std::span<float> m, std::span<float> v) {
  for (int p = 0; p < params.count(); ++p) {
    const size_t n = params.value(p).size(), at = flat_offset(params, p);
    std::memcpy(m.data() + at, host.view(p, Region::M).data, n * 4);
    std::memcpy(v.data() + at, host.view(p, Region::V).data, n * 4);
  }
}

// The host device's cost model: rates measured once and cached (or offload.cost_model), fp32 sizes, op
// times profiled on this model and batch, and the link as device.host sets it.
offload::CostModel host_device_cost_model(const Config& cfg, int threads, models::CpuRunner& profiler, const dataset::Batch& sample,
                                          std::string* cache) {
  offload::CostModel cost = cfg.offload.cost_model.empty() ? device::host_cost_model(threads, cache) : offload::CostModel::load(cfg.offload.cost_model);
  cost.weight_bytes = cost.activation_bytes = 4;  // the host device computes in fp32
  cost.fused_attention = false;
  if (cfg.offload.cost_model.empty()) {
    // The fastest of 3 to 10 passes, 1 s at least: single passes on a shared machine are noisy.
    profiler.set_batch(sample.tokens, sample.targets, sample.attention_mask);
    cost.profiled_op_s = profiler.profile_ops(3, 1.0, 10);
    cost.name += "; op times profiled on this model";
  }
  if (cfg.host_device.link_gbps > 0) cost.h2d.gbps = cost.d2h.gbps = cfg.host_device.link_gbps;
  return cost;
}

// The step's plan for the config: the budget (unset: what resident needs), the policy's schedule with
// activation checkpointing and the overlap as configured (offload decides which overlap a policy allows).
offload::StepPlan plan_run(const Config& cfg, const models::ModelSpec& spec, const offload::CostModel& cost,
                                          int64_t* budget, std::string* overlap_note) {
  offload::PlanRequest request;
  if (cfg.offload.bucket_bytes > 0) request.bucket_bytes = cfg.offload.bucket_bytes;
  request.policy = offload::parse_policy(cfg.offload.policy);
  request.checkpointing = offload::parse_checkpointing(cfg.train.activation_checkpointing);
  request.grad_accum = cfg.train.grad_accum;
  *budget = cfg.offload.gpu_budget;
  if (*budget <= 0) {
    offload::PlanRequest everything = request;
    everything.budget_bytes = int64_t(1) << 62;
    everything.policy = offload::Policy::Resident;
    *budget = offload::plan_step(spec, cost, everything).memory.layout.peak;
  }
  request.budget_bytes = *budget;
  request.overlap = offload::parse_overlap(cfg.offload.overlap);
  offload::StepPlan plan = offload::plan_step(spec, cost, request);  // a BudgetError says what to change
  *overlap_note = plan.overlap_note.empty() ? cfg.offload.overlap : plan.overlap_note;
  return plan;
}

}  // namespace

TrainSummary train(const Config& cfg, const TrainOptions& opt) {
  Progress progress(opt.progress);

  // The CUDA device's compute (issue 7) is not built yet: every run is on the host device.
  const int gpus = device::cuda_device_count();
  if (cfg.device == "cuda")
    throw std::runtime_error(fmt::format("device: cuda is not available yet ({}; Ferry's CUDA kernels are a later "
                                         "milestone); use device: cpu or auto",
                                         gpus > 0 ? fmt::format("{} CUDA device(s) visible", gpus) : "no CUDA device visible"));
  const std::string device_note =
      cfg.device == "cpu" ? "cpu"
      : gpus > 0          ? fmt::format("auto -> cpu ({} CUDA device(s) found; the CUDA backend is not built yet)", gpus)
                          : "auto -> cpu (no CUDA device)";
  const int threads = cfg.train.threads > 0 ? cfg.train.threads : static_cast<int>(std::thread::hardware_concurrency());
  tbb::global_control tbb_threads(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  models::ops::set_matmul_threads(threads);

  const int64_t B = cfg.train.batch_size, T = cfg.model.seq_len;
  const models::ModelSpec spec = models::build_model(cfg.model, B, T);
  models::ParameterStore params(spec.params);
  models::init_model(cfg.model, spec, params, cfg.train.seed);
  const bool mlm = cfg.model.kind == "bert";  // masked-LM batches
  // [MASK]: data.mask_token_id (a WordPiece vocabulary's), else the last id, which the data then must not use.
  const bool mask_is_last = cfg.data.mask_token_id < 0;
  const int32_t mask_id = mask_is_last ? cfg.model.vocab_size - 1 : cfg.data.mask_token_id;
  const int32_t random_below = mask_is_last ? mask_id : cfg.model.vocab_size;
  if (!cfg.model.init_from.empty()) formats::load_weights(cfg.model.init_from, spec, params);
  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{{cfg.optim.lr, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay},
                                   cfg.optim.isa, cfg.optim.cpu_threads, cpu_optim::Rounding::NearestEven,
                                                           cfg.train.seed});
  const dataset::TextDataset data(cfg.data.path, cfg.data.val_fraction, T);
  if (data.max_token() >= (mlm && mask_is_last ? mask_id : cfg.model.vocab_size))
    throw std::runtime_error("data.path: '" + cfg.data.path.string() + "' holds token id " + std::to_string(data.max_token()) +
                             (mlm && mask_is_last ? ", which BERT needs below model.vocab_size - 1 (the last id is [MASK]); raise model.vocab_size or set data.mask_token_id"
                                  : ", beyond model.vocab_size " + std::to_string(cfg.model.vocab_size)));
  // A step's micro-batch and a validation batch, as the model takes them.
  auto train_batch = [&](int64_t index) {
    dataset::Batch b = data.train_batch(cfg.train.seed, index, B);
    return mlm ? dataset::masked_lm(b, cfg.train.seed, index, mask_id, random_below) : b;
  };
  auto val_batch = [&](int i) {
    dataset::Batch b = data.val_batch(i, cfg.train.eval_batches, B);
    return mlm ? dataset::masked_lm(b, cfg.train.seed ^ 0x5EEDull, i, mask_id, random_below) : b;
  };

  models::CpuRunner evaluator(spec, params);  // evaluation: the resident CPU path on the gathered master weights
  std::string cost_cache;
  const offload::CostModel cost = host_device_cost_model(cfg, threads, evaluator, train_batch(0), &cost_cache);
  params.zero_grads();  // the profile ran backward
  std::string overlap_note;
  int64_t budget = 0;
  const offload::StepPlan plan = plan_run(cfg, spec, cost, &budget, &overlap_note);
  const bool delayed = plan.schedule.delayed_update;
  const offload::SimResult predicted = offload::simulate(plan.problem, plan.schedule, plan.memory);
  const memory::ArenaLayout& device_memory = plan.memory.layout;

  // Host side: every bucket's master weights, moments, working copy and gradient landing region.
  const memory::BucketLayout& layout = plan.problem.layout;
  memory::PinnedHostPool pool(memory::HostBuckets::bytes_needed(layout, DType::F32, DType::F32), {});
  memory::HostBuckets host(layout, pool, DType::F32, DType::F32);
  scatter_weights(params, host);  // the moments start at zero, as the pool does

  std::unique_ptr<device::Trace> trace;
  if (!opt.trace.empty()) trace = std::make_unique<device::Trace>();
  device::HostDevice device({device_memory.peak, cfg.host_device.link_gbps, threads, trace.get()});
  Executor executor(spec, plan, host, device, adamw, {static_cast<float>(cfg.optim.grad_clip)}, trace.get());

  progress.message(fmt::format(
      "ferry: {} ({} layers, {} heads, n_embd {}), {:.2f}M parameters, device {} ({} threads), batch {}x{} x{} accum, "
      "{} train / {} val tokens, AdamW on the CPU: {} x{}",
      spec.kind, cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, spec.param_count() / 1e6, device_note,
      threads, B, T, cfg.train.grad_accum, data.train_tokens(), data.val_tokens(), cpu_optim::to_string(adamw.isa()),
      adamw.threads()));
  progress.message(fmt::format(
      "offload: policy {}, {}; budget {}{}, device arena {} (planned; lower bound {}); {} bucket(s) of up to {:.1f} MiB, "
      "{} resident / {} travelling; {} of {} block(s) checkpointed; overlap {}{}; predicted step {:.3f} s (cost model: {}{})",
      plan.schedule.policy, device.name(), memory::format_bytes(budget), cfg.offload.gpu_budget > 0 ? "" : " (unset: what resident needs)",
      memory::format_bytes(device_memory.peak), memory::format_bytes(device_memory.lower_bound), plan.problem.n_buckets,
      plan.problem.layout.target_bytes() / double(1 << 20), memory::format_bytes(predicted.resident_bytes), memory::format_bytes(predicted.offloaded_bytes),
      plan.problem.checkpointed_layers, cfg.model.n_layer, overlap_note,
      delayed ? fmt::format(" (synchronous for the first {} steps)", cfg.offload.sync_steps) : "", predicted.step_s * cfg.train.grad_accum, cost.name,
      cost_cache.empty() ? "" : ", cached in " + cost_cache));

  formats::TrainState resumed;
  const std::string hash = config_hash(cfg);
  if (!opt.resume.empty()) {
    memory::HostBuffer m(params.values().size_bytes()), v(params.values().size_bytes());
    resumed = formats::load_checkpoint(opt.resume, spec, params, m.as<float>(), v.as<float>(), hash);
    scatter_weights(params, host);
    scatter_moments(params, m.as<float>(), v.as<float>(), host);
    progress.message(fmt::format("resumed from {} at step {}", opt.resume.string(), resumed.step));
  }
  executor.upload_state();
  if (resumed.pending) {
    if (!delayed) throw std::runtime_error("--resume: the checkpoint holds a delayed update; resume with offload.overlap: delayed");
    const auto& u = *resumed.pending;
    executor.set_pending_update({u.adam_step, u.lr, {{u.grad_norm, u.skipped}, u.grad_scale}});
    for (int p = 0; p < params.count(); ++p) {
      const auto& slot = layout.slot(p);
      std::copy_n(params.grad(p).data(), slot.numel, executor.pending_gradients(slot.bucket).data() + slot.offset);
    }
  }
  const bool fp16 = cfg.train.precision == "fp16";
  LossScaler scaler(fp16 ? cfg.train.loss_scale_init : 1.0, cfg.train.loss_scale_growth_interval);
  if (fp16 && !opt.resume.empty()) scaler.restore(resumed.loss_scale, resumed.loss_scale_good_steps);

  std::ofstream metrics;
  if (!opt.metrics.empty()) {
    metrics.open(opt.metrics, opt.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) throw std::runtime_error("--metrics: cannot write '" + opt.metrics.string() + "'");
  }

  const cpu_optim::LrSchedule schedule{
      cfg.optim.schedule == "constant" ? cpu_optim::LrSchedule::Kind::Constant : cpu_optim::LrSchedule::Kind::Cosine,
      static_cast<float>(cfg.optim.lr), static_cast<float>(cfg.optim.min_lr), cfg.optim.warmup_steps, cfg.train.steps};

  TrainSummary sum;
  sum.policy = plan.schedule.policy;
  sum.checkpointed_blocks = plan.problem.checkpointed_layers;
  sum.peak_device_bytes = device.arena().size();
  sum.budget_bytes = budget;
  sum.predicted_step_s = predicted.step_s * cfg.train.grad_accum;
  const bool has_val = data.val_tokens() > 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto evaluate_now = [&] {
    executor.download_state();
    gather_weights(host, params);
    return evaluate(evaluator, cfg.train.eval_batches, val_batch);
  };
  const auto t_start = Clock::now();
  if (opt.resume.empty()) {
    sum.val_loss_start = has_val ? evaluate_now() : nan;
    if (has_val) progress.message(fmt::format("step 0: val_loss {:.4f}", sum.val_loss_start));
  } else {
    sum.val_loss_start = static_cast<float>(resumed.val_loss_start);
  }
  sum.val_loss = sum.val_loss_start;

  double train_s = 0;
  std::vector<double> step_times;
  int64_t optimizer_steps = resumed.optimizer_steps;  // updates applied: Adam's bias correction counts these
  const int64_t tokens_per_step = B * T * cfg.train.grad_accum;
  auto checkpoint = [&](int step) {
    if (cfg.train.checkpoint_dir.empty()) return;
    executor.download_state();
    gather_weights(host, params);
    memory::HostBuffer m(params.values().size_bytes()), v(params.values().size_bytes());
    gather_moments(host, params, m.as<float>(), v.as<float>());
    formats::TrainState state{step, optimizer_steps, sum.val_loss_start, scaler.value(), scaler.good_steps(), hash, cfg.model, cfg.data.tokenizer, {}};
    if (const auto u = executor.pending_update()) {  // delayed: the last step's update travels with the checkpoint
      state.pending = formats::TrainState::PendingUpdate{u->adam_step, u->lr, u->decision.report.grad_norm, u->decision.grad_scale,
                                                u->decision.report.skipped};
      for (int p = 0; p < params.count(); ++p) {
        const auto& slot = layout.slot(p);
        std::copy_n(executor.pending_gradients(slot.bucket).data() + slot.offset, slot.numel, params.grad(p).data());
      }
    }
    sum.last_checkpoint = formats::save_checkpoint(cfg.train.checkpoint_dir, spec, params, m.as<float>(), v.as<float>(), state,
                                          cfg.train.keep_checkpoints);
  };
  const int first_step = static_cast<int>(resumed.step) + 1;
  std::vector<dataset::Batch> micro(cfg.train.grad_accum);
  for (int step = first_step; step <= cfg.train.steps; ++step) {
    if (trace) trace->enable(step < first_step + opt.trace_steps);
    if (!opt.inject_fault.empty() && step == opt.inject_fault_step) executor.inject_fault(opt.inject_fault);
    const auto t0 = Clock::now();
    for (int i = 0; i < cfg.train.grad_accum; ++i)
      micro[i] = train_batch(int64_t(step - 1) * cfg.train.grad_accum + i);
    const float lr = schedule.at(step - 1);
    const float loss_scale = scaler.scale();
    const double loss_scale_value = scaler.value();
    const StepResult r = executor.step(micro, optimizer_steps + 1, lr, loss_scale);
    if (fp16) scaler.update(!r.skipped);
    // Synchronous steps: the first ones, and the last (its update belongs to the result).
    if (delayed && (step <= cfg.offload.sync_steps || step == cfg.train.steps)) executor.apply_pending_update();
    const double loss = r.loss;
    if (!r.skipped) {
      ++optimizer_steps;
    } else {
      ++sum.skipped_steps;
      progress.message(fp16 ? fmt::format("step {}: the gradients overflowed at loss scale {:g}; the update was skipped and the scale "
                                          "is now {:g}", step, loss_scale_value, scaler.value())
                            : fmt::format("step {}: an inf/nan gradient; the update was skipped", step));
    }
    const double norm = r.grad_norm;
    const double step_s = seconds_since(t0);
    train_s += step_s;
    step_times.push_back(step_s);
    sum.h2d_bytes = r.h2d_bytes, sum.d2h_bytes = r.d2h_bytes;
    sum.stall_s += r.stall_s;
    sum.losses.push_back(static_cast<float>(loss));
    if (!std::isfinite(loss))
      throw std::runtime_error(fmt::format("step {}: the loss is {}; lower optim.lr or raise optim.warmup_steps", step, loss));

    std::optional<float> val;
    const bool last = step == cfg.train.steps;
    if (has_val && (last || (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0))) {
      val = evaluate_now();
      sum.val_loss = *val;
    }
    const double elapsed = seconds_since(t_start);
    if (step % cfg.train.log_every == 0 || last || step == 1)
      progress.update(step, cfg.train.steps, static_cast<float>(loss), tokens_per_step / step_s, elapsed,
                      fmt::format("h2d {} d2h {} | stall {:.0f}% | step {:.3f} s (predicted {:.3f})", memory::format_bytes(r.h2d_bytes),
                                  memory::format_bytes(r.d2h_bytes), 100.0 * r.stall_s / step_s, step_s, sum.predicted_step_s));
    if (val) progress.message(fmt::format("step {}: val_loss {:.4f}", step, *val));
    if (metrics.is_open()) {
      nlohmann::json j{{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                       {"tokens_per_s", tokens_per_step / step_s}, {"elapsed_s", elapsed},
                       {"step_s", step_s}, {"predicted_step_s", sum.predicted_step_s}, {"stall_s", r.stall_s},
                       {"h2d_bytes", r.h2d_bytes}, {"d2h_bytes", r.d2h_bytes}, {"peak_device_bytes", sum.peak_device_bytes}};
      if (fp16) j["loss_scale"] = loss_scale_value;
      if (r.skipped) j["skipped"] = true;
      if (val) j["val_loss"] = *val;
      metrics << j.dump() << '\n' << std::flush;
    }
    const bool stopping = (opt.stop && opt.stop->load()) || (opt.stop_after > 0 && step - first_step + 1 >= opt.stop_after);
    if ((cfg.train.checkpoint_every > 0 && step % cfg.train.checkpoint_every == 0 && !last) || (stopping && !last)) {
      checkpoint(step);
      if (!sum.last_checkpoint.empty()) progress.message(fmt::format("step {}: checkpoint {}", step, sum.last_checkpoint.string()));
    }
    if (stopping && !last) {
      sum.interrupted = true;
      sum.steps = step;
      break;
    }
  }
  if (!sum.interrupted) checkpoint(cfg.train.steps);
  progress.finish();
  if (trace) {
    trace->write(opt.trace);
    progress.message(fmt::format("trace: {} ({} slices); open it in ui.perfetto.dev", opt.trace.string(), trace->slices()));
  }
  if (!sum.interrupted) sum.steps = cfg.train.steps;
  sum.wall_s = seconds_since(t_start);
  const size_t ran = sum.losses.size();  // steps run by this call (fewer when resumed or stopped)
  sum.tokens_per_s = ran ? static_cast<double>(tokens_per_step) * double(ran) / train_s : 0.0;
  if (!step_times.empty()) {
    std::sort(step_times.begin(), step_times.end());
    sum.median_step_s = step_times[step_times.size() / 2];
  }
  const size_t tail = std::min<size_t>(10, ran);
  double tail_sum = 0;
  for (size_t i = ran - tail; i < ran; ++i) tail_sum += sum.losses[i];
  sum.train_loss = tail ? static_cast<float>(tail_sum / static_cast<double>(tail)) : nan;
  return sum;
}

}  // namespace ferry::engine
