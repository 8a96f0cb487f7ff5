// The host device's cost model, measured at start-up in about a second: its matmul rate, its memory
// bandwidth (which is also its "link": host-device copies are memcpys), and its CPU AdamW rate.
#pragma once

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
};
CpuOptimizerRates measure_cpu_optimizer_rates(int threads, DType grad_type, bool working_copy);

// The measured model of this machine at this thread count, from the cache when it was measured before
// (ferry_cache_dir()/host-<cpu>-<threads>t.json), else measured now and cached.
// `cache_path` receives the file used.
offload::CostModel host_cost_model(int threads, std::string* cache_path = nullptr);

}  // namespace ferry::ops
