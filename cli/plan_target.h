// What `ferry plan` plans for, shared by the plan of one model (plan.cpp) and the search for the largest one
// (plan_max_model.cpp): the device and the cost model `ferry train` would take here.
#pragma once

#include <string>

#include "engine/config.h"
#include "engine/device/make_device.h"
#include "models/model_spec.h"
#include "offload/cost_model.h"

namespace ferry::cli {

// What the plan is for: the device `ferry train` takes here (device::resolve_device), except that on a machine
// without a GPU a cost model file stands for the GPU it describes, unless the config asks for device: cpu
// (configs/cost_models/h100-assumed.json plans an H100 run anywhere).
struct PlanTarget {
  device::ResolvedDevice device;  // what the budget and the cost model are taken from
  bool host_device = true;        // the plan is the host device's: its arena is host memory too
  std::string says;               // in words, for the plan's device line
};
PlanTarget plan_target(const engine::Config& config);

// The cost model `ferry train` would plan with: on a GPU, the CUDA device measured and profiled (seconds); else
// the file offload.cost_model names, or the host device's measured rates (`cache`: where they are kept).
offload::CostModel plan_cost_model(const engine::Config& config, const models::ModelSpec& spec,
                                   const PlanTarget& target, std::string* cache);

}  // namespace ferry::cli
