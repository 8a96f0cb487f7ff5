// ferry-bench step: times full CPU training steps of a config's model shape and, in the same run,
// oneDNN's matmul rate on the model's largest matmul; reports their ratio and where the step's time goes.
// With --device host|cuda: the step `ferry train` runs (the Executor with the config's plan, resident by
// default) on that device, and on a GPU its MFU (bench/mfu.h).
#include <fmt/format.h>
#include <sys/utsname.h>
#include <tbb/global_control.h>

#include <cmath>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "bench/lt_algorithms.h"
#include "bench/mfu.h"
#include "bench/op_breakdown.h"
#include "cpu_optim/adamw.h"
#include "engine/config.h"
#include "engine/device/make_device.h"
#include "engine/executor.h"
#include "engine/step_planning.h"
#include "engine/trainer.h"
#include "memory/host_buckets.h"
#include "models/registry.h"
#include "memory/host_buffer.h"
#include "engine/ops/cpu_runner.h"
#include "engine/ops/op_workspace.h"
#include "models/gpt2.h"
#include "kernels/cpu/matmul.h"
#include "foundation/rng.h"
#include "foundation/console.h"

#ifdef FERRY_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_kernels.h"
#endif

namespace ferry::bench {

std::string cuda_gpu_name(int ordinal) {
#ifdef FERRY_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) return prop.name;
#endif
  (void)ordinal;
  return "";
}

namespace {

// The attention kernels the step's attention ops run on this GPU, as the CUDA kernels choose them per shape
// ("cudnn-sdpa", "flash"); empty without CUDA.
std::vector<std::string> attention_kernels(const models::ModelSpec& spec) {
  std::set<std::string> used;
#ifdef FERRY_WITH_CUDA
  namespace kc = kernels::cuda;
  ops::ops_scratch_bytes(spec, [&](const kc::AttentionShape& s, DType t, models::Pass) {
    used.insert(kc::choose_attention_kernel(s, t) == kc::AttentionKernel::CudnnSdpa ? "cudnn-sdpa" : "flash");
    return int64_t{0};
  });
#endif
  (void)spec;
  return {used.begin(), used.end()};
}

}  // namespace

nlohmann::json mfu_json(const StepFlops& flops, double step_s, const std::optional<PeakRate>& peak) {
  nlohmann::json j{{"model_flops_per_step", flops.model},
                   {"recompute_flops_per_step", flops.recompute},
                   {"model_tflops_per_s", flops.model / step_s / 1e12},
                   {"flop_formula", kMfuFormula}};
  if (peak) j.update({{"peak_name", peak->name}, {"peak_tflops_per_s", peak->flops / 1e12}, {"mfu", mfu(flops, step_s, *peak)}});
  else j["mfu"] = nullptr, j["peak_name"] = "no peak known for this device: MFU not computed";
  return j;
}
namespace {

struct StepTimes {
  std::vector<double> seconds;  // per timed step
  // Summed over the timed steps: "<kind>.<fwd|bwd>" per op, plus the optimizer.
  std::map<std::string, double> by_op;
};

// Runs `warmup` untimed then `steps` timed training steps (every op, then AdamW over all parameters).
StepTimes time_steps(const models::ModelSpec& spec, models::ParameterStore& params, ops::CpuRunner& runner, int threads,
                     int warmup, int steps) {
  memory::HostBuffer m(params.values().size_bytes()), v(params.values().size_bytes());
  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{{}, "auto", threads});
  const cpu_optim::Bucket bucket{params.values(), m.as<float>(), v.as<float>(), params.grads().data(), DType::F32};
  StepTimes times;
  for (int s = 1; s <= warmup + steps; ++s) {
    const bool timed = s > warmup;
    const auto t0 = Clock::now();
    params.zero_grads();
    for (const auto& op : spec.ops) {
      const auto t_op = Clock::now();
      runner.run_op(op);
      if (timed)
        times.by_op[fmt::format("{}.{}", models::to_string(op.kind), op.pass == models::Pass::Forward ? "fwd" : "bwd")] +=
            seconds_since(t_op);
    }
    const auto t_opt = Clock::now();
    adamw.apply({&bucket, 1}, s, 3e-4, 1.0f);
    if (timed) times.by_op["optimizer (norm + adamw)"] += seconds_since(t_opt);
    const double dt = seconds_since(t0);
    if (timed) times.seconds.push_back(dt);
    console::print(stderr, "  step {}/{}: {:.1f} ms{}\n", s, warmup + steps, dt * 1e3, timed ? "" : " (warm-up)");
  }
  return times;
}

struct MatmulTiming {
  const models::OpSpec* op = nullptr;  // the forward Linear timed
  double gflops = 0;                   // median rate
  size_t runs = 0;
};

// The largest matmul of the step, by FLOPs, in its forward shape alone: at least 5 runs and 2 seconds.
MatmulTiming time_largest_matmul(const models::ModelSpec& spec, Rng& rng) {
  const models::OpSpec* biggest = nullptr;
  for (const auto& op : spec.ops)
    if (op.kind == models::OpKind::Linear && op.pass == models::Pass::Forward &&
        (!biggest || op.attrs.in * op.attrs.out > biggest->attrs.in * biggest->attrs.out))
      biggest = &op;
  const auto& a = biggest->attrs;
  std::vector<float> X(a.rows * a.in), W(a.in * a.out), Y(a.rows * a.out);
  for (auto& x : X) x = static_cast<float>(rng.normal());
  for (auto& w : W) w = static_cast<float>(rng.normal() * 0.02);
  auto mm = [&] {
    kernels::cpu::matmul(Y.data(), X.data(), W.data(), nullptr, a.rows, a.out, a.in, false, a.weight_out_in, false);
  };
  mm();
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 5 || seconds_since(start) < 2.0) {
    const auto t0 = Clock::now();
    mm();
    times.push_back(seconds_since(t0));
  }
  return {biggest, 2.0 * a.rows * a.in * a.out / median(times) / 1e9, times.size()};
}

// What one run measured, and on what, for the printed summary and the result files.
struct StepResult {
  const std::string& config_path;
  const models::ModelSpec& spec;
  const std::string& command;
  int B, T, steps, threads;
  StepTimes times{};
  MatmulTiming matmul{};
  double step_s = 0, step_gflops = 0, ratio = 0;
};

double ms_per_step(const StepResult& r, double total_s) { return total_s / r.steps * 1e3; }

void print_summary(const StepResult& r) {
  const auto& a = r.matmul.op->attrs;
  console::print("model {} ({:.1f}M params) batch {}x{} threads {}\n", r.config_path, r.spec.param_count() / 1e6, r.B,
                 r.T, r.threads);
  console::print("  step:   {:.1f} ms median of {}, {:.1f} GFLOP/step, {:.1f} GFLOP/s\n", r.step_s * 1e3, r.steps,
                 r.spec.step_flops() / 1e9, r.step_gflops);
  console::print("  matmul: {} ({}x{} @ {}x{}): {:.1f} GFLOP/s (median of {})\n", r.matmul.op->name, a.rows, a.in, a.in,
                 a.out, r.matmul.gflops, r.matmul.runs);
  console::print("  ratio:  {:.2f} of the matmul rate\n", r.ratio);
  console::print("  time per step by op:\n");
  for (const auto& [name, total] : r.times.by_op)
    console::print("    {:<26} {:8.1f} ms\n", name, ms_per_step(r, total));
}

std::string to_json(const StepResult& r) {
  utsname u{};
  uname(&u);
  const auto& a = r.matmul.op->attrs;
  nlohmann::json by_op_ms;
  for (const auto& [name, total] : r.times.by_op) by_op_ms[name] = ms_per_step(r, total);
  std::vector<double> step_ms;  // the timings are kept in seconds; the key says ms
  for (double s : r.times.seconds) step_ms.push_back(s * 1e3);
  const nlohmann::json j{{"benchmark", "step"},
                         {"ms_per_step_median", r.step_s * 1e3},
                         {"step_gflops", r.step_gflops},
                         {"matmul_gflops", r.matmul.gflops},
                         {"ratio", r.ratio},
                         {"step_gflop", r.spec.step_flops() / 1e9},
                         {"matmul_op", r.matmul.op->name},
                         {"matmul_shape", {a.rows, a.in, a.out}},
                         {"step_ms_all", step_ms},
                         {"ms_per_step_by_op", by_op_ms},
                         {"config", r.config_path},
                         {"batch", r.B},
                         {"seq", r.T},
                         {"threads", r.threads},
                         {"params", r.spec.param_count()},
                         {"machine", {{"cpu", cpu_model()}, {"cores", std::thread::hardware_concurrency()}, {"kernel", u.release}}},
                         {"date", today()},
                         {"command", r.command}};
  return j.dump(2) + "\n";
}

std::string to_markdown(const StepResult& r) {
  std::ostringstream md;
  md << fmt::format("# CPU training step vs oneDNN matmul\n\n"
                    "Machine: {} ({} cores), {} threads. Date: {}.\n\nCommand: `{}`\n\n",
                    cpu_model(), std::thread::hardware_concurrency(), r.threads, today(), r.command);
  md << "| model | batch x seq | ms/step (median of " << r.steps << ") | step GFLOP/s | matmul GFLOP/s ("
     << r.matmul.op->name << ") | ratio |\n|---|---|---|---|---|---|\n";
  md << fmt::format("| {} ({:.1f}M) | {}x{} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n\n", r.config_path,
                    r.spec.param_count() / 1e6, r.B, r.T, r.step_s * 1e3, r.step_gflops, r.matmul.gflops, r.ratio);
  md << "Time per step by op (ms):\n\n| op | ms |\n|---|---|\n";
  for (const auto& [name, total] : r.times.by_op) md << fmt::format("| {} | {:.1f} |\n", name, ms_per_step(r, total));
  return md.str();
}

}  // namespace

int run_step_bench(const std::string& config_path, int B, int T, int steps, int warmup, int threads,
                   const std::string& json_path, const std::string& markdown_path, const std::string& command) {
  const engine::Config cfg = engine::load_config(config_path);
  if (T <= 0) T = cfg.model.seq_len;
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  tbb::global_control tbb_threads(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  kernels::cpu::set_matmul_threads(threads);

  const models::GptConfig gpt{cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                              cfg.model.seq_len};
  const models::ModelSpec spec = models::build_gpt2(gpt, B, T);
  models::ParameterStore params(spec.params);
  models::init_gpt2(spec, gpt, params, 1);
  ops::CpuRunner runner(spec, params);
  Rng rng(7);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(gpt.vocab_size));
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(gpt.vocab_size));
  runner.set_batch(tokens, targets);
  console::print(stderr, "step: {} ({:.1f}M params), batch {}x{}, {} threads, {} warm-up + {} timed steps\n", spec.kind,
                 spec.param_count() / 1e6, B, T, threads, warmup, steps);

  StepResult r{config_path, spec, command, B, T, steps, threads};
  r.times = time_steps(spec, params, runner, threads, warmup, steps);
  r.matmul = time_largest_matmul(spec, rng);
  r.step_s = median(r.times.seconds);
  r.step_gflops = spec.step_flops() / r.step_s / 1e9;
  r.ratio = r.step_gflops / r.matmul.gflops;
  print_summary(r);
  if (!json_path.empty()) write_result(json_path, "--json", to_json(r));
  if (!markdown_path.empty()) write_result(markdown_path, "--markdown", to_markdown(r));
  return 0;
}

namespace {

// What `ferry-bench step --device` measured.
struct DeviceStep {
  std::string device, gpu;
  std::vector<double> seconds;  // per timed step
  double step_s = 0;
  // The host thread's CPU time per timed step (queueing the step's ops, copies and waits; not its waiting), and
  // the ops a step queues: the host-side cost per op, which a GPU's step must stay ahead of.
  std::vector<double> host_busy_seconds;  // per timed step: until step() returned, less its waits
  int64_t ops_per_step = 0;
  int64_t host_bucket_bytes = 0;  // pinned for the buckets the host keeps (none of the device tier's), as ferry train
  StepFlops flops;
  std::optional<PeakRate> peak;
};

// The run set up as the trainer sets one up (plan, device with the plan's arena, pinned host buckets without the
// buckets the device alone keeps, the initial weights as ferry train sets them), then `warmup` untimed and `steps`
// timed steps on one random batch, each timed to the end of its device work.
DeviceStep time_device_steps(const engine::Config& cfg, device::DeviceChoice::Kind kind, int steps, int warmup) {
  const models::ModelSpec spec = models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence(), cfg.precision());
  offload::CostModel cost = cfg.offload.cost_model.empty() ? offload::CostModel{} : offload::CostModel::load(cfg.offload.cost_model);
  if (kind == device::DeviceChoice::Kind::Host) cost.fused_attention = false;  // the host's attention keeps its probabilities
  // A cost model from a file was not profiled here: the plan reserves the workspace the device's ops declare.
  cost.profiled_workspace_bytes = std::max(cost.profiled_workspace_bytes, ops::op_workspace_bytes(kind, spec));
  const offload::StepPlan plan = engine::plan_for_config(cfg, spec, cost);
  auto dev = device::make_device({.kind = kind, .arena_bytes = plan.memory.layout.peak, .compute_threads = cfg.threads()});
  const DType precision = plan.problem.precision;
  const memory::HostBuckets::GradLanding landing = engine::Executor::gradient_landing(plan);
  const std::vector<bool> device_only = engine::Executor::device_only_buckets(plan);
  DeviceStep r;
  r.host_bucket_bytes =
      memory::HostBuckets::bytes_needed(plan.problem.layout, precision, precision, false, landing, device_only);
  auto pool = dev->make_host_pool(r.host_bucket_bytes + engine::Executor::host_bytes_needed(spec, plan));
  memory::HostBuckets host(plan.problem.layout, *pool, precision, precision, false, landing, device_only);
  const cpu_optim::CpuAdamW adamw({{cfg.optim.lr, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay}, "auto", cfg.threads()});
  engine::ExecutorOptions options;
  options.grad_clip = static_cast<float>(cfg.optim.grad_clip);
  engine::Executor executor(spec, plan, host, *pool, *dev, adamw, options, nullptr);
  engine::initialize_weights(cfg, spec, host, executor, stderr);
  executor.upload_state();
  Rng rng(7);
  std::vector<dataset::Batch> batch(static_cast<size_t>(cfg.train.grad_accum));
  for (dataset::Batch& b : batch) {
    b.tokens.resize(static_cast<size_t>(cfg.train.batch_size * cfg.sequence()));
    for (int32_t& t : b.tokens) t = static_cast<int32_t>(rng.below(cfg.model.vocab_size));
    b.targets = b.tokens;
    std::rotate(b.targets.begin(), b.targets.begin() + 1, b.targets.end());
  }
  r.device = dev->name();
  if (kind == device::DeviceChoice::Kind::Cuda) r.gpu = cuda_gpu_name(0);
  console::print(stderr,
                 "step: {} ({:.1f}M params) on {}, plan {}, batch {}x{} x{} accum, {}, {} warm-up + {} timed steps\n",
                 spec.kind, spec.param_count() / 1e6, r.device, plan.schedule.policy, cfg.train.batch_size,
                 cfg.sequence(), cfg.train.grad_accum, cfg.train.precision, warmup, steps);
  r.ops_per_step = int64_t{plan.problem.n_ops} * cfg.train.grad_accum;
  for (int s = 1; s <= warmup + steps; ++s) {
    const auto t0 = Clock::now();
    const engine::StepResult result = executor.step(batch, s, cfg.optim.lr);
    const double busy = seconds_since(t0) - result.host_wait_s;
    const float loss = result.loss;
    dev->synchronize();
    const double dt = seconds_since(t0);
    if (s > warmup) r.seconds.push_back(dt), r.host_busy_seconds.push_back(busy);
    console::print(stderr, "  step {}/{}: {:.1f} ms, loss {:.4f}{}\n", s, warmup + steps, dt * 1e3, loss,
                   s > warmup ? "" : " (warm-up)");
  }
  r.step_s = median(r.seconds);
  const int64_t tokens = int64_t(cfg.train.batch_size) * cfg.sequence() * cfg.train.grad_accum;
  r.flops = step_flops(flop_shape(spec, cfg.model.n_layer, cfg.model.n_embd, cfg.sequence(), tokens, plan.problem.checkpointed_layers));
  if (!r.gpu.empty()) r.peak = peak_rate(r.gpu, precision);
  return r;
}

}  // namespace

int run_device_step_bench(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& device_kind, int B,
                          int T, int steps, int warmup, const std::string& json_path, const std::string& markdown_path,
                          const std::string& command) {
  std::vector<std::string> o{"offload.policy=resident", fmt::format("train.batch_size={}", B)};
  if (T > 0) o.push_back(fmt::format("train.seq_len={}", T));
  o.insert(o.end(), overrides.begin(), overrides.end());  // after the defaults: --set wins
  const engine::Config cfg = engine::load_config(config_path, o);
  const auto kind = device_kind == "cuda" ? device::DeviceChoice::Kind::Cuda : device::DeviceChoice::Kind::Host;
  const DeviceStep r = time_device_steps(cfg, kind, steps, warmup);
  // After the timed device is gone (two arenas never share a GPU): the ops one by one.
  const std::vector<OpKindTime> by_kind =
      op_breakdown(models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence(), cfg.precision()),
                   cfg.model.vocab_size, kind, cfg.threads(), r.peak);
  const double tokens_per_s = double(cfg.train.batch_size) * cfg.sequence() * cfg.train.grad_accum / r.step_s;
  const int64_t params = models::build_model(cfg.model, 1, 1).param_count();
  const std::string mfu_text = r.peak ? fmt::format("{:.1f}% of {} ({:.0f} TFLOP/s)", 100 * mfu(r.flops, r.step_s, *r.peak), r.peak->name, r.peak->flops / 1e12)
                                      : std::string("not computed (no peak known for this device)");
  const double ops = static_cast<double>(r.ops_per_step), host_us_per_op = median(r.host_busy_seconds) / ops * 1e6;
  console::print(
      "model {} ({} {}) batch {}x{} on {}\n  step: {:.1f} ms median of {}, {:.0f} tokens/s, {:.1f} model TFLOP/s\n  "
      "MFU: {}\n  ({})\n  host buckets: {:.2f} bytes a parameter\n  host thread: {:.2f} us per op queueing the step, "
      "its waits aside ({} ops a step, median of {}); the step {:.2f} us per op\n",
      config_path, cfg.model.kind, cfg.train.precision, cfg.train.batch_size, cfg.sequence(), r.device, r.step_s * 1e3,
      steps, tokens_per_s, r.flops.model / r.step_s / 1e12, mfu_text, kMfuFormula,
      static_cast<double>(r.host_bucket_bytes) / static_cast<double>(params), host_us_per_op, r.ops_per_step, steps,
      r.step_s / ops * 1e6);
  const std::string breakdown = op_breakdown_markdown(by_kind, r.step_s, r.peak);
  console::print("\n{}", breakdown);
  std::vector<double> step_ms;
  for (double s : r.seconds) step_ms.push_back(s * 1e3);
  nlohmann::json j{{"benchmark", "step"},
                   {"device", r.device},
                   {"gpu", r.gpu},
                   {"policy", cfg.offload.policy},
                   {"precision", cfg.train.precision},
                   {"ms_per_step_median", r.step_s * 1e3},
                   {"step_ms_all", step_ms},
                   {"ops_per_step", r.ops_per_step},
                   {"host_busy_us_per_op_median", host_us_per_op},
                   {"tokens_per_s", tokens_per_s},
                   {"config", config_path},
                   {"batch", cfg.train.batch_size},
                   {"seq", cfg.sequence()},
                   {"grad_accum", cfg.train.grad_accum},
                   {"params", params},
                   {"host_bucket_bytes", r.host_bucket_bytes},
                   {"machine", {{"cpu", cpu_model()}, {"cores", std::thread::hardware_concurrency()}}},
                   {"date", today()},
                   {"command", command}};
  j.update(mfu_json(r.flops, r.step_s, r.peak));
  j["by_op_kind"] = op_breakdown_json(by_kind);
  if (kind == device::DeviceChoice::Kind::Cuda) {
    const models::ModelSpec spec =
        models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence(), cfg.precision());
    j["attention_kernels"] = attention_kernels(spec);
    j["cublaslt_algorithms"] = cublaslt_algorithms(spec);
  }
  if (!json_path.empty()) write_result(json_path, "--json", j.dump(2) + "\n");
  if (!markdown_path.empty())
    write_result(markdown_path, "--markdown",
                 fmt::format("# Training step on {}\n\nMachine: {} ({} cores). Date: {}.\n\nCommand: `{}`\n\n"
                             "| model | precision | policy | batch x seq | ms/step (median of {}) | tokens/s | model TFLOP/s | MFU |\n"
                             "|---|---|---|---|---|---|---|---|\n| {} | {} | {} | {}x{} | {:.1f} | {:.0f} | {:.1f} | {} |\n\n{}.\n\n{}",
                             r.device, cpu_model(), std::thread::hardware_concurrency(), today(), command, steps, config_path,
                             cfg.train.precision, cfg.offload.policy, cfg.train.batch_size, cfg.sequence(), r.step_s * 1e3, tokens_per_s,
                             r.flops.model / r.step_s / 1e12, mfu_text, kMfuFormula, breakdown));
  return 0;
}

}  // namespace ferry::bench
