// measure_host_cost_model: short timings of the real kernels the host device runs.
#include "engine/ops/host_cost_model.h"

#include <tbb/global_control.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <cstring>
#include <vector>
#include <nlohmann/json.hpp>

#include "cpu_optim/adamw.h"
#include "foundation/atomic_file.h"
#include "foundation/cache_dir.h"
#include "memory/host_buffer.h"
#include "kernels/cpu/matmul.h"

namespace ferry::ops {
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

int64_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(name);
    if (bytes > 0) return bytes;
  }
  return 0;  // some VMs name none
}

int64_t cpu_optimizer_probe_params(int64_t last_level_cache_bytes) {
  constexpr int64_t kBytesPerParam = 16, kMin = int64_t{4} << 20, kMax = int64_t{32} << 20;
  if (last_level_cache_bytes <= 0) return kMax;  // unknown: the most start-up affords
  const int64_t span = 8 * last_level_cache_bytes;
  return std::clamp((span + kBytesPerParam - 1) / kBytesPerParam, kMin, kMax);
}

offload::CostModel measure_host_cost_model(int threads) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  kernels::cpu::set_matmul_threads(threads);
  offload::CostModel c;
  c.name = "host device (measured at start-up)";
  c.assumed = false;
  c.op_overhead_s = 20e-6;

  const int64_t M = 512, K = 768, N = 2304;
  std::vector<float> A(M * K, 0.01f), B(K * N, 0.01f), C(M * N);
  auto mm = [&] { kernels::cpu::matmul(C.data(), A.data(), B.data(), nullptr, M, N, K, false, false, false); };
  mm();
  c.flops_per_s = 2.0 * M * N * K / best_seconds(5, mm);

  const size_t bytes = size_t(64) << 20;
  memory::HostBuffer from(bytes), to(bytes);
  auto copy = [&] { std::memcpy(to.data(), from.data(), bytes); };
  copy();
  const double copy_s = best_seconds(3, copy);
  c.memory_bytes_per_s = 2.0 * double(bytes) / copy_s;  // read + write
  c.h2d = c.d2h = {double(bytes) / copy_s / 1e9, 2e-6};

  const CpuOptimizerRates rates = measure_cpu_optimizer_rates(threads, DType::F32, false);
  c.cpu_adam_params_per_s = rates.adam_params_per_s;
  c.cpu_norm_params_per_s = rates.norm_params_per_s;
  c.cpu_compact_adam_params_per_s = rates.compact_adam_params_per_s;
  c.device_adam_params_per_s = c.cpu_adam_params_per_s;  // the host device's "device" is this CPU
  return c;
}

CpuOptimizerRates measure_cpu_optimizer_rates(int threads, DType grad_type, bool working_copy) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  const auto n = static_cast<size_t>(cpu_optimizer_probe_params(last_level_cache_bytes()));
  memory::HostBuffer p(n * 4), m(n * 4), v(n * 4), g(n * 4), out(n * 4);
  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{{}, "auto", threads});
  cpu_optim::Bucket bucket{p.as<float>(), m.as<float>(), v.as<float>(), g.data(), grad_type};
  if (working_copy) bucket.upload = out.data(), bucket.upload_type = grad_type;
  int64_t step = 0;
  CpuOptimizerRates r;
  r.probe_params = static_cast<int64_t>(n);
  r.adam_params_per_s = double(n) / best_seconds(3, [&] { adamw.step(bucket, ++step, 1e-4, 1.0f); });
  r.norm_params_per_s = double(n) / best_seconds(3, [&] { adamw.grad_stats(g.data(), grad_type, n); });
  // The compact state in the first half of the fp32 buffers, zero (the kernels' speed does not depend on values).
  std::memset(p.data(), 0, n * 2), std::memset(m.data(), 0, n * 2), std::memset(v.data(), 0, n * 2);
  const cpu_optim::CompactBucket compact{p.as<uint16_t>().first(n), m.as<uint16_t>().first(n),
                                         v.as<uint16_t>().first(n), g.data(), grad_type};
  r.compact_adam_params_per_s = double(n) / best_seconds(3, [&] { adamw.step(compact, ++step, 1e-4, 1.0f); });
  return r;
}

offload::CostModel host_cost_model(int threads, std::string* cache_path) {
  std::string cpu = "cpu";
  {
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    while (std::getline(info, line))
      if (line.rfind("model name", 0) == 0) {
        cpu = line.substr(line.find(':') + 2);
        break;
      }
  }
  for (char& ch : cpu)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '-';
  const std::filesystem::path file = ferry_cache_dir() / ("host-" + cpu + "-" + std::to_string(threads) + "t-v2.json");
  if (cache_path) *cache_path = file.string();
  if (std::filesystem::is_regular_file(file)) {
    try {
      std::ifstream in(file);
      const auto j = nlohmann::json::parse(in);
      if (j.contains("cpu_compact_adam_params_per_s")) return offload::CostModel::from_json(j, file.string());
    } catch (const std::exception&) {
    }
    // a damaged cache, or one from before a rate was measured: measured again below
  }
  offload::CostModel c = measure_host_cost_model(threads);
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  try {
    write_file_atomically(file, c.to_json().dump(2) + "\n", "cost model cache");
  } catch (const std::exception&) {
    // a cache: without it the next run measures again
  }
  return c;
}

}  // namespace ferry::ops
