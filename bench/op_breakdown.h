// op_breakdown: where a step's time goes on a device, by op kind and pass: every op of the step profiled on a
// device of its own (ops::profile_ops), summed, with each kind's achieved FLOP rate and, for a GPU whose peak is
// known, the roofline beside it; without a device, the roofline alone (the estimate a GPU session starts from).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/roofline.h"
#include "engine/device/make_device.h"
#include "models/model_spec.h"

namespace ferry::bench {

// Rows in decreasing time; token ids spread over `vocab`; roofline_s filled when `peak` is given. The device is
// made here (an arena the size of the largest op's operands) and freed before returning: call it when no other
// device of that kind holds memory.
std::vector<OpKindTime> op_breakdown(const models::ModelSpec& spec, int64_t vocab, device::DeviceChoice::Kind kind,
                                     int threads, const std::optional<PeakRate>& peak = std::nullopt);

// The measured table (with roofline columns when `peak` is given), and the roofline-only table.
std::string op_breakdown_markdown(const std::vector<OpKindTime>& rows, double step_s,
                                  const std::optional<PeakRate>& peak = std::nullopt);
std::string roofline_markdown(const std::vector<OpKindTime>& rows, const PeakRate& peak);
nlohmann::json op_breakdown_json(const std::vector<OpKindTime>& rows);

}  // namespace ferry::bench
