// train(): one model on the host (CPU) path. Each step: zero grads, forward+backward per micro-batch,
// global-norm clip, AdamW over the flat parameter buffer, metrics.
#include "engine/trainer.h"

#include <fmt/format.h>
#include <tbb/global_control.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "cpu_optim/adamw.h"
#include "cpu_optim/lr_schedule.h"
#include "engine/checkpoint.h"
#include "engine/cuda_devices.h"
#include "engine/dataset.h"
#include "engine/progress.h"
#include "engine/weights.h"
#include "memory/bucket_layout.h"
#include "memory/host_buffer.h"
#include "models/cpu_runner.h"
#include "models/gpt2.h"
#include "models/ops/matmul.h"

namespace ferry::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

float evaluate(models::CpuRunner& runner, const TextDataset& data, int batches, int64_t B) {
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    Batch b = data.val_batch(i, batches, B);
    runner.set_batch(b.tokens, b.targets);
    sum += runner.forward();
  }
  return static_cast<float>(sum / batches);
}

}  // namespace

TrainSummary train(const Config& cfg, const TrainOptions& opt) {
  Progress progress(opt.progress);

  // The CUDA backend (compute, streams, the offload executor) is not built yet: every run is on the CPU.
  const int gpus = cuda_device_count();
  if (cfg.device == "cuda")
    throw std::runtime_error(fmt::format("device: cuda is not available yet ({}; Ferry's CUDA backend is a later "
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
  const models::GptConfig gpt{cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                              cfg.model.seq_len};
  const models::ModelSpec spec = models::build_gpt2(gpt, B, T);
  models::ParameterStore params(spec.params);
  models::init_gpt2(spec, gpt, params, cfg.train.seed);
  if (!cfg.model.init_from.empty()) load_weights(cfg.model.init_from, spec, params);
  memory::HostBuffer adam_m(params.values().size_bytes()), adam_v(params.values().size_bytes());
  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{{cfg.optim.lr, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay},
                                   cfg.optim.isa, cfg.optim.cpu_threads, cpu_optim::Rounding::NearestEven,
                                                           cfg.train.seed});
  // The CPU path keeps fp32 weights and grads in one flat store: one bucket, no upload copy.
  const cpu_optim::Bucket bucket{params.values(), adam_m.as<float>(), adam_v.as<float>(), params.grads().data(),
                                 cpu_optim::DType::F32};
  models::CpuRunner runner(spec, params);
  const TextDataset data(cfg.data.path, cfg.data.val_fraction, T);
  if (data.max_token() >= cfg.model.vocab_size)
    throw std::runtime_error("data.path: '" + cfg.data.path.string() + "' holds token id " + std::to_string(data.max_token()) +
                             ", beyond model.vocab_size " + std::to_string(cfg.model.vocab_size));

  progress.message(fmt::format(
      "ferry: {} ({} layers, {} heads, n_embd {}), {:.2f}M parameters, device {} ({} threads), batch {}x{} x{} accum, "
      "{} train / {} val tokens, AdamW on the CPU: {} x{}",
      spec.kind, gpt.n_layer, gpt.n_head, gpt.n_embd, spec.param_count() / 1e6, device_note,
      threads, B, T, cfg.train.grad_accum, data.train_tokens(), data.val_tokens(), cpu_optim::to_string(adamw.isa()),
      adamw.threads()));

  {
    // How the parameters would travel: the bucket layout the offload executor will move (printed now so a
    // user can see and tune offload.bucket_mb).
    std::vector<memory::BucketLayout::Param> order;
    for (int id : spec.params_in_first_use_order()) order.push_back({id, spec.params[id].shape});
    const int64_t bucket_bytes =
        cfg.offload.bucket_bytes > 0 ? cfg.offload.bucket_bytes : memory::BucketLayout::kDefaultBucketBytes;
    const memory::BucketLayout layout(order, bucket_bytes, memory::DType::BF16);
    const memory::Plan& acts = runner.activation_plan();
    progress.message(fmt::format("memory: {} parameter buckets of up to {:.1f} MiB (bf16); activations {:.1f} MiB "
                                 "planned (lower bound {:.1f} MiB)",
                                 layout.buckets().size(), bucket_bytes / double(1 << 20), acts.peak / double(1 << 20),
                                 acts.lower_bound / double(1 << 20)));
  }

  TrainState resumed;
  const std::string hash = config_hash(cfg);
  if (!opt.resume.empty()) {
    resumed = load_checkpoint(opt.resume, spec, params, adam_m.as<float>(), adam_v.as<float>(), hash);
    progress.message(fmt::format("resumed from {} at step {}", opt.resume.string(), resumed.step));
  }

  std::ofstream metrics;
  if (!opt.metrics.empty()) {
    metrics.open(opt.metrics, opt.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) throw std::runtime_error("--metrics: cannot write '" + opt.metrics.string() + "'");
  }

  const cpu_optim::LrSchedule schedule{
      cfg.optim.schedule == "constant" ? cpu_optim::LrSchedule::Kind::Constant : cpu_optim::LrSchedule::Kind::Cosine,
      static_cast<float>(cfg.optim.lr), static_cast<float>(cfg.optim.min_lr), cfg.optim.warmup_steps, cfg.train.steps};

  TrainSummary sum;
  const bool has_val = data.val_tokens() > 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto t_start = Clock::now();
  if (opt.resume.empty()) {
    sum.val_loss_start = has_val ? evaluate(runner, data, cfg.train.eval_batches, B) : nan;
    if (has_val) progress.message(fmt::format("step 0: val_loss {:.4f}", sum.val_loss_start));
  } else {
    sum.val_loss_start = static_cast<float>(resumed.val_loss_start);
  }
  sum.val_loss = sum.val_loss_start;

  double train_s = 0;
  int64_t optimizer_steps = resumed.optimizer_steps;  // updates applied: Adam's bias correction counts these
  const int64_t tokens_per_step = B * T * cfg.train.grad_accum;
  auto checkpoint = [&](int step) {
    if (cfg.train.checkpoint_dir.empty()) return;
    sum.last_checkpoint = save_checkpoint(cfg.train.checkpoint_dir, spec, params, adam_m.as<float>(), adam_v.as<float>(),
                                          {step, optimizer_steps, sum.val_loss_start, hash, cfg.model, cfg.data.tokenizer},
                                          cfg.train.keep_checkpoints);
  };
  const int first_step = static_cast<int>(resumed.step) + 1;
  for (int step = first_step; step <= cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    params.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < cfg.train.grad_accum; ++micro) {
      Batch b = data.train_batch(cfg.train.seed, int64_t(step - 1) * cfg.train.grad_accum + micro, B);
      runner.set_batch(b.tokens, b.targets);
      loss += runner.forward_backward(1.0f / static_cast<float>(cfg.train.grad_accum));
    }
    loss /= cfg.train.grad_accum;
    const float lr = schedule.at(step - 1);
    const cpu_optim::StepReport report =
        adamw.apply({&bucket, 1}, optimizer_steps + 1, lr, static_cast<float>(cfg.optim.grad_clip));
    if (!report.skipped) {
      ++optimizer_steps;
    } else {
      ++sum.skipped_steps;
      progress.message(fmt::format("step {}: an inf/nan gradient; the update was skipped", step));
    }
    const double norm = report.grad_norm;
    const double step_s = seconds_since(t0);
    train_s += step_s;
    sum.losses.push_back(static_cast<float>(loss));
    if (!std::isfinite(loss))
      throw std::runtime_error(fmt::format("step {}: the loss is {}; lower optim.lr or raise optim.warmup_steps", step, loss));

    std::optional<float> val;
    const bool last = step == cfg.train.steps;
    if (has_val && (last || (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0))) {
      val = evaluate(runner, data, cfg.train.eval_batches, B);
      sum.val_loss = *val;
    }
    const double elapsed = seconds_since(t_start);
    if (step % cfg.train.log_every == 0 || last || step == 1)
      progress.update(step, cfg.train.steps, static_cast<float>(loss), tokens_per_step / step_s, elapsed);
    if (val) progress.message(fmt::format("step {}: val_loss {:.4f}", step, *val));
    if (metrics.is_open()) {
      nlohmann::json j{{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                       {"tokens_per_s", tokens_per_step / step_s}, {"elapsed_s", elapsed}};
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
  if (!sum.interrupted) sum.steps = cfg.train.steps;
  sum.wall_s = seconds_since(t_start);
  const size_t ran = sum.losses.size();  // steps run by this call (fewer when resumed or stopped)
  sum.tokens_per_s = ran ? static_cast<double>(tokens_per_step) * double(ran) / train_s : 0.0;
  const size_t tail = std::min<size_t>(10, ran);
  double tail_sum = 0;
  for (size_t i = ran - tail; i < ran; ++i) tail_sum += sum.losses[i];
  sum.train_loss = tail ? static_cast<float>(tail_sum / static_cast<double>(tail)) : nan;
  return sum;
}

}  // namespace ferry::engine
