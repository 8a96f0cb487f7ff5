// measure_host_cost_model: short timings of the real kernels the host device runs.
#include "engine/host_cost_model.h"

#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "cpu_optim/adamw.h"
#include "memory/host_buffer.h"
#include "models/ops/matmul.h"

namespace ferry::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Best of a few repetitions of f, in seconds.
template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

offload::CostModel measure_host_cost_model(int threads) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  models::ops::set_matmul_threads(threads);
  offload::CostModel c;
  c.name = "host device (measured at start-up)";
  c.assumed = false;
  c.activation_bytes = 4;  // the host device computes in fp32
  c.weight_bytes = 4;
  c.op_overhead_s = 20e-6;

  const int64_t M = 512, K = 768, N = 2304;
  std::vector<float> A(M * K, 0.01f), B(K * N, 0.01f), C(M * N);
  auto mm = [&] { models::ops::matmul(C.data(), A.data(), B.data(), nullptr, M, N, K, false, false, false); };
  mm();
  c.flops_per_s = 2.0 * M * N * K / best_seconds(5, mm);

  const size_t bytes = size_t(64) << 20;
  memory::HostBuffer from(bytes), to(bytes);
  auto copy = [&] { std::memcpy(to.data(), from.data(), bytes); };
  copy();
  const double copy_s = best_seconds(3, copy);
  c.memory_bytes_per_s = 2.0 * double(bytes) / copy_s;  // read + write
  c.h2d = c.d2h = {double(bytes) / copy_s / 1e9, 2e-6};

  const size_t n = size_t(4) << 20;
  memory::HostBuffer p(n * 4), m(n * 4), v(n * 4), g(n * 4);
  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{{}, "auto", threads});
  const cpu_optim::Bucket bucket{p.as<float>(), m.as<float>(), v.as<float>(), g.data(), cpu_optim::DType::F32};
  int64_t step = 0;
  c.cpu_adam_params_per_s = double(n) / best_seconds(3, [&] { adamw.step(bucket, ++step, 1e-4, 1.0f); });
  c.device_adam_params_per_s = c.cpu_adam_params_per_s;  // the host device's "device" is this CPU
  return c;
}

}  // namespace ferry::engine
