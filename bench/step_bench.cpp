// ferry-bench step: times full CPU training steps of a config's model shape and, in the same run,
// oneDNN's matmul rate on the model's largest matmul; reports their ratio and where the step's time goes.
#include <fmt/format.h>
#include <sys/utsname.h>
#include <tbb/global_control.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "cpu_optim/adamw.h"
#include "engine/config.h"
#include "memory/host_buffer.h"
#include "models/cpu_runner.h"
#include "models/gpt2.h"
#include "models/ops/matmul.h"
#include "models/rng.h"

namespace ferry::bench {

int run_step_bench(const std::string& config_path, int B, int T, int steps, int warmup, int threads,
                   const std::string& json_path, const std::string& markdown_path, const std::string& command) {
  using namespace ferry;
  const engine::Config cfg = engine::load_config(config_path);
  if (T <= 0) T = cfg.model.seq_len;
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  tbb::global_control tbb_threads(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  models::ops::set_matmul_threads(threads);

  const models::GptConfig gpt{cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                              cfg.model.seq_len};
  const models::ModelSpec spec = models::build_gpt2(gpt, B, T);
  models::ParameterStore params(spec.params);
  models::init_gpt2(spec, gpt, params, 1);
  memory::HostBuffer m(params.values().size_bytes()), v(params.values().size_bytes());
  models::CpuRunner runner(spec, params);
  models::Rng rng(7);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(gpt.vocab_size));
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(gpt.vocab_size));
  runner.set_batch(tokens, targets);
  fmt::print(stderr, "step: {} ({:.1f}M params), batch {}x{}, {} threads, {} warm-up + {} timed steps\n", spec.kind,
             spec.param_count() / 1e6, B, T, threads, warmup, steps);

  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{{}, "auto", threads});
  const cpu_optim::Bucket bucket{params.values(), m.as<float>(), v.as<float>(), params.grads().data(), DType::F32};
  std::vector<double> times;
  // Where the time goes, summed over timed steps: "<kind>.<fwd|bwd>" per op, plus the optimizer.
  std::map<std::string, double> breakdown;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (int s = 1; s <= warmup + steps; ++s) {
    const auto t0 = Clock::now();
    params.zero_grads();
    for (const auto& op : spec.ops) {
      const auto t_op = Clock::now();
      runner.run_op(op);
      if (s > warmup)
        breakdown[fmt::format("{}.{}", models::to_string(op.kind), op.pass == models::Pass::Forward ? "fwd" : "bwd")] += since(t_op);
    }
    const auto t_opt = Clock::now();
    adamw.apply({&bucket, 1}, s, 3e-4, 1.0f);
    if (s > warmup) breakdown["optimizer (norm + adamw)"] += since(t_opt);
    const double dt = since(t0);
    if (s > warmup) times.push_back(dt);
    fmt::print(stderr, "  step {}/{}: {:.1f} ms{}\n", s, warmup + steps, dt * 1e3, s <= warmup ? " (warm-up)" : "");
  }
  const double step_s = median(times);
  const double step_gflops = spec.step_flops() / step_s / 1e9;

  // The largest matmul of the step, by FLOPs: time its forward shape alone.
  const models::OpSpec* biggest = nullptr;
  for (const auto& op : spec.ops)
    if (op.kind == models::OpKind::Linear && op.pass == models::Pass::Forward &&
        (!biggest || op.attrs.in * op.attrs.out > biggest->attrs.in * biggest->attrs.out))
      biggest = &op;
  const auto& a = biggest->attrs;
  std::vector<float> X(a.rows * a.in), W(a.in * a.out), Y(a.rows * a.out);
  for (auto& x : X) x = static_cast<float>(rng.normal());
  for (auto& w : W) w = static_cast<float>(rng.normal() * 0.02);
  const double mm_flops = 2.0 * a.rows * a.in * a.out;
  auto mm = [&] { models::ops::matmul(Y.data(), X.data(), W.data(), nullptr, a.rows, a.out, a.in, false, a.weight_out_in, false); };
  mm();
  std::vector<double> mm_times;
  const auto mm_start = Clock::now();
  while (mm_times.size() < 5 || std::chrono::duration<double>(Clock::now() - mm_start).count() < 2.0) {
    const auto t0 = Clock::now();
    mm();
    mm_times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double matmul_gflops = mm_flops / median(mm_times) / 1e9;
  const double ratio = step_gflops / matmul_gflops;

  fmt::print("model {} ({:.1f}M params) batch {}x{} threads {}\n", config_path, spec.param_count() / 1e6, B, T, threads);
  fmt::print("  step:   {:.1f} ms median of {}, {:.1f} GFLOP/step, {:.1f} GFLOP/s\n", step_s * 1e3, steps,
             spec.step_flops() / 1e9, step_gflops);
  fmt::print("  matmul: {} ({}x{} @ {}x{}): {:.1f} GFLOP/s (median of {})\n", biggest->name, a.rows, a.in, a.in, a.out,
             matmul_gflops, mm_times.size());
  fmt::print("  ratio:  {:.2f} of the matmul rate\n", ratio);
  fmt::print("  time per step by op:\n");
  nlohmann::json breakdown_ms;
  for (const auto& [name, total] : breakdown) {
    fmt::print("    {:<26} {:8.1f} ms\n", name, total / steps * 1e3);
    breakdown_ms[name] = total / steps * 1e3;
  }

  if (!json_path.empty()) {
    utsname u{};
    uname(&u);
    nlohmann::json j{{"benchmark", "step"},
                     {"ms_per_step_median", step_s * 1e3},
                     {"step_gflops", step_gflops},
                     {"matmul_gflops", matmul_gflops},
                     {"ratio", ratio},
                     {"step_gflop", spec.step_flops() / 1e9},
                     {"matmul_op", biggest->name},
                     {"matmul_shape", {a.rows, a.in, a.out}},
                     {"step_ms_all", times},
                     {"ms_per_step_by_op", breakdown_ms},
                     {"config", config_path},
                     {"batch", B},
                     {"seq", T},
                     {"threads", threads},
                     {"params", spec.param_count()},
                     {"machine", {{"cpu", cpu_model()}, {"cores", std::thread::hardware_concurrency()}, {"kernel", u.release}}},
                     {"date", today()},
                     {"command", command}};
    write_result(json_path, "--json", j.dump(2) + "\n");
  }
  if (!markdown_path.empty()) {
    std::ostringstream md;
    md << fmt::format("# CPU training step vs oneDNN matmul\n\n"
                      "Machine: {} ({} cores), {} threads. Date: {}.\n\nCommand: `{}`\n\n",
                      cpu_model(), std::thread::hardware_concurrency(), threads, today(), command);
    md << "| model | batch x seq | ms/step (median of " << steps << ") | step GFLOP/s | matmul GFLOP/s (" << biggest->name
       << ") | ratio |\n|---|---|---|---|---|---|\n";
    md << fmt::format("| {} ({:.1f}M) | {}x{} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n\n", config_path,
                      spec.param_count() / 1e6, B, T, step_s * 1e3, step_gflops, matmul_gflops, ratio);
    md << "Time per step by op (ms):\n\n| op | ms |\n|---|---|\n";
    for (const auto& [name, total] : breakdown) md << fmt::format("| {} | {:.1f} |\n", name, total / steps * 1e3);
    write_result(markdown_path, "--markdown", md.str());
  }
  return 0;
}

}  // namespace ferry::bench
