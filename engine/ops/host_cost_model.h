// The host device's cost model, measured at start-up in about a second: its matmul rate, its memory
// bandwidth (which is also its "link": host-device copies are memcpys), and its CPU AdamW rate.
#pragma once

#include <cstdint>
#include <string>

#include "memory/dtype.h"
#include "offload/cost_model.h"

namespace ferry::ops {

offload::CostModel measure_host_cost_model(int threads);

// The CPU AdamW's update and gradient-statistics rates (parameters a second) on `threads` threads, with
// gradients in `grad_type`; with `working_copy`, each update also writes the new weights out in `grad_type`,
// as an offloaded step writes the device's working copy (bf16: 28 bytes a parameter in all). The compact
// state's update (optim.state: compact) with the same gradients.
struct CpuOptimizerRates {
  double adam_params_per_s = 0, norm_params_per_s = 0, compact_adam_params_per_s = 0;
  int64_t probe_params = 0;  // the parameters each was timed on
};
CpuOptimizerRates measure_cpu_optimizer_rates(int threads, DType grad_type, bool working_copy);

// How many parameters measure_cpu_optimizer_rates updates: enough that what an update touches (16 bytes a
// parameter or more: fp32 master, m and v, a 2-byte gradient and working copy) spans 8x the last-level cache
// (within 4M..32M), so the rate is memory's, as a model's buckets meet it; 32M where no cache size is known. The 4M
// parameters (80 MB) of before fit a 16-core Xeon's cache: 8.2e9 parameters/s at start-up, while the 2026-11-28 H200
// steps ran past their predictions in proportion to their CPU updates (65 ms with 0.61B, 150 ms with 1.56B),
// as a rate near 4.6e9 would.
int64_t cpu_optimizer_probe_params(int64_t last_level_cache_bytes);
int64_t last_level_cache_bytes();  // the largest cache sysconf names (L3, else L2); 0 where it names none

// The measured model of this machine at this thread count, from the cache when it was measured before
// (ferry_cache_dir()/host-<cpu>-<threads>t-v2.json; v2: AdamW probed beyond the caches), else measured now and cached.
// `cache_path` receives the file used.
offload::CostModel host_cost_model(int threads, std::string* cache_path = nullptr);

}  // namespace ferry::ops
