// Helpers shared by Ferry's benchmarks: timing, medians, and the machine/date/command stamp of results.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ferry::bench {

using Clock = std::chrono::steady_clock;

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

inline std::string today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Writes a result file whole; `option` (e.g. "--json") names it in the error.
inline void write_result(const std::string& path, const std::string& option, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error(option + ": cannot write '" + path + "'");
  out << text;
}

inline double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// `ferry-bench step`: CPU training steps of a model shape against oneDNN's matmul rate.
int run_step_bench(const std::string& config_path, int B, int T, int steps, int warmup, int threads,
                   const std::string& json_path, const std::string& markdown_path, const std::string& command);

// `ferry-bench step --device host|cuda`: the step `ferry train` runs (the Executor, the config's plan with
// policy resident unless --set says otherwise) on that device; on an H100/H200 its MFU (bench/mfu.h).
int run_device_step_bench(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& device_kind, int B,
                          int T, int steps, int warmup, const std::string& json_path, const std::string& markdown_path,
                          const std::string& command);

// `ferry-bench roofline`: each op kind's least time on a GPU (h100, h100-pcie, h200) from its bytes and FLOPs;
// needs no GPU.
int run_roofline_bench(const std::string& config_path, const std::vector<std::string>& overrides,
                       const std::string& gpu, int B, int T, const std::string& json_path,
                       const std::string& markdown_path, const std::string& command);

// The name of CUDA GPU `ordinal` ("NVIDIA H100 80GB HBM3"); "" without CUDA or without that GPU.
std::string cuda_gpu_name(int ordinal);

// `ferry-bench adam`: CPU AdamW in each mode against the memory bandwidth of the same access pattern.
int run_adam_bench(int64_t params, int threads, int reps, const std::string& json_path,
                   const std::string& markdown_path, const std::string& command);

// `ferry-bench planner`: the memory Planner on GPT-2 step schedules and random instances.
int run_planner_bench(const std::string& json_path, const std::string& markdown_path, const std::string& command);

// `ferry-bench memory`: host bytes per parameter of training runs (GPT-2 124M and 350M shapes).
int run_memory_bench(const std::string& config_path, const std::vector<std::string>& overrides, int steps, const std::string& json_path,
                     const std::string& markdown_path, const std::string& command);

// `ferry-bench policies`: every placement policy on a cost model over models, tokens per step and budgets.
struct PoliciesBenchOptions {
  std::string cost_model;
  std::vector<std::string> models;  // shape names; empty: all
  std::vector<int64_t> tokens;      // per step: micro-batches x accumulation
  std::vector<int> budgets_gib;
  // offload.overlap: delayed where the policy allows it; pipelined for greedy only (zero-offload and
  // chunk-lru stand for DeepSpeed's and Gemini's step, which finish the update before the next forward)
  std::string overlap = "backward";
  bool mixed_tiers = true;          // greedy may split AdamW between the device and the CPU
  std::string json, markdown, command;
};
int run_policies_bench(const PoliciesBenchOptions& options);

// `ferry-bench offload`: offloaded training on the host device, every policy: measured vs predicted.
struct OffloadBenchOptions {
  std::string config;
  std::vector<std::string> overrides;
  int steps = 20;
  int repeats = 1;                    // runs per policy and overlap (medians reported)
  std::vector<std::string> policies;  // empty: resident, zero-offload, chunk-lru, greedy
  std::string json, markdown, command;
  std::vector<std::string> overlaps;  // of the policies with AdamW on the CPU; empty: backward, delayed, pipelined
};
int run_offload_bench(const OffloadBenchOptions& options);

// `ferry-bench experiment`: an experiment file trained as shipped: wall time, tokens/s, validation loss.
int run_experiment_bench(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& json_path,
                         const std::string& markdown_path, const std::string& command);

// `ferry-bench pcie`: pinned-pool <-> arena bandwidth per transfer size (CUDA builds with a GPU).
int run_pcie_bench(int reps, const std::string& json_path, const std::string& markdown_path, const std::string& command);

}  // namespace ferry::bench
