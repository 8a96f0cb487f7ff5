// op_breakdown: where a step's time goes on a device, by op kind and pass: every op of the step profiled on a
// device of its own (ops::profile_ops), summed, with each kind's achieved FLOP rate.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/device/make_device.h"
#include "models/model_spec.h"

namespace ferry::bench {

struct OpKindTime {
  std::string kind, pass;  // "Linear", "forward"
  int ops = 0;
  double seconds = 0, flops = 0;  // summed over the step's ops of this kind and pass
};

// Rows in decreasing time; token ids spread over `vocab`. The device is made here (an arena the size of the largest op's operands) and freed
// before returning: call it when no other device of that kind holds memory.
std::vector<OpKindTime> op_breakdown(const models::ModelSpec& spec, int64_t vocab, device::DeviceChoice::Kind kind, int threads);

std::string op_breakdown_markdown(const std::vector<OpKindTime>& rows, double step_s);
nlohmann::json op_breakdown_json(const std::vector<OpKindTime>& rows);

}  // namespace ferry::bench
