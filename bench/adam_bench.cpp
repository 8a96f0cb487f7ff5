// ferry-bench adam: CPU AdamW in each mode (the compact state's too) against the memory bandwidth of a plain
// kernel reading four fp32 streams and writing three in place, at 1 thread and at all cores.
#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "cpu_optim/adamw.h"
#include "foundation/precision.h"
#include "memory/host_buffer.h"
#include "foundation/console.h"

namespace ferry::bench {
namespace {

constexpr size_t kTile = 1 << 14;  // as CpuAdamW's tiles

// The bandwidth yardstick: AdamW's streams without its arithmetic. Cloned per ISA so that it is not held
// back by the baseline x86-64 code generation.
__attribute__((target_clones("avx512f", "avx2", "default"))) void plain_update(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    p[i] += 1e-3f * gi;
    m[i] += gi;
    v[i] += gi * gi;
  }
}

struct Mode {
  std::string name;
  DType grad;
  bool upload;
  DType upload_type;
  cpu_optim::Rounding rounding;
  bool compact = false;  // optim.state: compact (bf16 weights, m and v; the weights are the upload)
  double bytes_per_param() const {
    const double grad_bytes = grad == DType::F32 ? 4 : 2;
    if (compact) return 6 + grad_bytes + 6;          // read p, m, v, grad; write p, m, v
    return 12 + grad_bytes + 12 + (upload ? 2 : 0);  // read p, m, v, grad; write p, m, v, upload
  }
};

// The bench's host memory: fp32 weights, moments and gradients, 16-bit gradients, and the upload copy.
struct AdamBuffers {
  size_t n;
  memory::HostBuffer p, m, v, g32, g16, out;
  explicit AdamBuffers(size_t count)
      : n(count), p(n * 4), m(n * 4), v(n * 4), g32(n * 4), g16(n * 2), out(n * 2) {
    auto g = g32.as<float>();
    auto h = g16.as<uint16_t>();
    auto pp = p.as<float>();
    tbb::parallel_for(size_t(0), n, [&](size_t i) {
      const float x = static_cast<float>((i * 2654435761u) % 2001) * 1e-5f - 0.01f;
      g[i] = x;
      h[i] = 0x3c00;  // 1.0 in fp16; bf16 reads it as a small normal number
      pp[i] = 0.5f;
    });
  }
  cpu_optim::Bucket bucket(const Mode& mode) {
    return {p.as<float>(), m.as<float>(), v.as<float>(),
            mode.grad == DType::F32 ? static_cast<const void*>(g32.data()) : g16.data(), mode.grad,
            mode.upload ? out.data() : nullptr, mode.upload_type};
  }
  // The compact state in the first half of the fp32 buffers.
  cpu_optim::CompactBucket compact_bucket(const Mode& mode) {
    return {p.as<uint16_t>().first(n), m.as<uint16_t>().first(n), v.as<uint16_t>().first(n),
            mode.grad == DType::F32 ? static_cast<const void*>(g32.data()) : g16.data(), mode.grad};
  }
};

std::vector<Mode> adam_modes() {
  using cpu_optim::Rounding;
  return {
      {"f32-grad", DType::F32, false, DType::BF16, Rounding::NearestEven},
      {"f32-grad+bf16-out", DType::F32, true, DType::BF16, Rounding::NearestEven},
      {"bf16-grad+bf16-out", DType::BF16, true, DType::BF16, Rounding::NearestEven},
      {"bf16-grad+bf16-out-stochastic", DType::BF16, true, DType::BF16, Rounding::Stochastic},
      {"f16-grad+f16-out", DType::F16, true, DType::F16, Rounding::NearestEven},
      {"compact-bf16-grad", DType::BF16, false, DType::BF16, Rounding::NearestEven, true},
  };
}

// Every mode on the widest path, then the offload mode and the compact state's on every other path, for comparison.
std::vector<std::pair<Mode, cpu_optim::Isa>> adam_runs(const std::vector<Mode>& modes) {
  std::vector<std::pair<Mode, cpu_optim::Isa>> runs;
  for (const Mode& mode : modes) runs.emplace_back(mode, cpu_optim::best_isa());
  for (cpu_optim::Isa isa : cpu_optim::supported_isas())
    if (isa != cpu_optim::best_isa()) runs.emplace_back(modes[2], isa), runs.emplace_back(modes.back(), isa);
  return runs;
}

// One pass of the plain kernel over the buffers on `arena`'s threads, in AdamW's tiles; its seconds.
double plain_pass(tbb::task_arena& arena, AdamBuffers& buf) {
  const size_t N = buf.n;
  const auto t0 = Clock::now();
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, (N + kTile - 1) / kTile, 1), [&](const auto& range) {
      for (size_t t = range.begin(); t != range.end(); ++t) {
        const size_t i0 = t * kTile, len = std::min(N, i0 + kTile) - i0;
        plain_update(buf.p.as<float>().data() + i0, buf.g32.as<float>().data() + i0, buf.m.as<float>().data() + i0,
                     buf.v.as<float>().data() + i0, len);
      }
    }, tbb::simple_partitioner());
  });
  return seconds_since(t0);
}

// What the bench reports: a JSON record per run and the Markdown table's rows.
struct AdamReport {
  nlohmann::json results = nlohmann::json::array();
  std::ostringstream table;
};

// Times one mode on one path: each repetition times the plain kernel and then AdamW back to back, so that
// both see the same machine (this one is shared, and its bandwidth drifts).
void time_adam_run(const Mode& mode, cpu_optim::Isa isa, int threads, int reps, tbb::task_arena& arena,
                   AdamBuffers& buf, AdamReport& report) {
  // Zeroed moments, so that every run starts from the same state.
  std::fill(buf.m.as<float>().begin(), buf.m.as<float>().end(), 0.0f);
  std::fill(buf.v.as<float>().begin(), buf.v.as<float>().end(), 0.0f);
  const cpu_optim::CpuAdamW opt(cpu_optim::AdamWOptions{{}, cpu_optim::to_string(isa), threads, mode.rounding, 1});
  const cpu_optim::Bucket bucket = buf.bucket(mode);
  const cpu_optim::CompactBucket compact = buf.compact_bucket(mode);
  std::vector<double> times, bw_times;
  for (int r = 0; r < reps; ++r) {
    bw_times.push_back(plain_pass(arena, buf));
    if (mode.compact) {  // the plain pass wrote fp32 over the compact state: a fresh one, outside the timing
      std::fill(compact.param.begin(), compact.param.end(), float_to_bf16(0.5f));
      std::fill(compact.m.begin(), compact.m.end(), uint16_t{0}),
          std::fill(compact.v.begin(), compact.v.end(), uint16_t{0});
    }
    const auto t0 = Clock::now();
    if (mode.compact) opt.step(compact, r + 1, 1e-4, 1.0f);
    else opt.step(bucket, r + 1, 1e-4, 1.0f);
    times.push_back(seconds_since(t0));
  }
  const double n = static_cast<double>(buf.n);
  const double bandwidth = 28.0 * n / median(bw_times) / 1e9;
  const double pps = n / median(times), gbps = mode.bytes_per_param() * pps / 1e9;
  const double gbps_best = mode.bytes_per_param() * n / best(times) / 1e9;
  report.results.push_back({{"mode", mode.name}, {"threads", threads}, {"isa", cpu_optim::to_string(isa)},
                            {"params_per_s_median", pps}, {"params_per_s_best", n / best(times)},
                            {"adam_gbps_median", gbps}, {"adam_gbps_best", gbps_best},
                            {"bandwidth_gbps_median", bandwidth}, {"bandwidth_gbps_best", 28.0 * n / best(bw_times) / 1e9},
                            {"ratio", gbps / bandwidth}, {"bytes_per_param", mode.bytes_per_param()}});
  report.table << fmt::format("| {} | {} | {} | {:.0f} | {:.1f} / {:.1f} | {:.1f} | {:.2f} |\n", mode.name,
                              cpu_optim::to_string(isa), threads, pps / 1e6, gbps, gbps_best, bandwidth, gbps / bandwidth);
  console::print(stderr, "{} thread(s) {} {}: {:.1f} GB/s vs {:.1f} GB/s plain\n", threads, mode.name,
                 cpu_optim::to_string(isa), gbps, bandwidth);
}

// 1 thread and all cores, or the one count asked for.
std::vector<int> adam_thread_counts(int threads_opt, int all) {
  std::vector<int> counts = threads_opt > 0 ? std::vector<int>{threads_opt} : std::vector<int>{1, all};
  if (counts.size() == 2 && all == 1) counts.pop_back();
  return counts;
}

void write_adam_results(const AdamReport& report, int64_t n, int reps, int all, const std::string& json_path,
                        const std::string& markdown_path, const std::string& command) {
  const std::string stamp = fmt::format("Machine: {} ({} cores). Date: {}. Parameters: {}, {} repetitions.\n\nCommand: `{}`\n",
                                        cpu_model(), all, today(), n, reps, command);
  if (!json_path.empty()) {
    nlohmann::json j{{"benchmark", "adam"}, {"params", n}, {"reps", reps}, {"results", report.results},
                     {"machine", {{"cpu", cpu_model()}, {"cores", all}}}, {"date", today()}, {"command", command}};
    write_result(json_path, "--json", j.dump(2) + "\n");
  }
  if (!markdown_path.empty()) {
    write_result(markdown_path, "--markdown",
                 "# CPU AdamW vs memory bandwidth\n\n" + stamp + "\n" +
                     "GB/s count the bytes each mode must move (fp32 p, m, v read and written; the gradient read; the "
                     "upload written; compact: bf16 p, m, v read and written, the gradient read). Bandwidth: a plain "
                     "kernel reading 4 fp32 streams and writing 3 in place, same "
                     "tiles and threads, timed right before each AdamW repetition.\n\n" +
                     report.table.str());
  }
}

}  // namespace

int run_adam_bench(int64_t n, int threads_opt, int reps, const std::string& json_path,
                   const std::string& markdown_path, const std::string& command) {
  AdamBuffers buf(static_cast<size_t>(n));
  const std::vector<Mode> modes = adam_modes();
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  AdamReport report;
  report.table << "| mode | isa | threads | Mparams/s (median) | AdamW GB/s (median / best) | bandwidth GB/s (median) | ratio |\n"
               << "|---|---|---|---|---|---|---|\n";
  for (int threads : adam_thread_counts(threads_opt, all)) {
    tbb::task_arena arena(threads);
    plain_pass(arena, buf);  // warm-up
    for (const auto& [mode, isa] : adam_runs(modes)) time_adam_run(mode, isa, threads, reps, arena, buf, report);
  }
  console::print("{}", report.table.str());
  write_adam_results(report, n, reps, all, json_path, markdown_path, command);
  return 0;
}

}  // namespace ferry::bench
