// CostModel: how long the parts of a step take on one machine. Each op's compute time (a roofline of its
// FLOPs and the bytes it touches), the link per direction as a function of transfer size, and the AdamW
// rate on the CPU and on the device. Loaded from JSON (measured, or shipped and marked assumed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model_spec.h"

namespace ferry::offload {

struct LinkCost {
  double gbps = 25;          // sustained bandwidth, GB/s (1e9 bytes)
  double latency_s = 10e-6;  // per transfer
  double seconds(int64_t bytes) const { return bytes > 0 ? latency_s + double(bytes) / (gbps * 1e9) : 0.0; }
};

struct CostModel {
  std::string name;
  bool assumed = true;                // figures not yet measured on the machine
  double flops_per_s = 1e12;          // dense math actually achieved
  double memory_bytes_per_s = 1e11;   // device memory traffic achieved by elementwise ops
  double op_overhead_s = 5e-6;        // launch / dispatch cost per op
  bool fused_attention = false;       // attention keeps a (B, heads, T) log-sum-exp, not the (T, T) probabilities
  LinkCost h2d, d2h;
  double cpu_adam_params_per_s = 1e9;
  // The same AdamW on the compact state (optim.state: compact): bf16 weights rounded stochastically, m and v
  // in bf16. Fewer bytes, more arithmetic: slower than the exact state's on AVX2 (ferry-bench adam).
  double cpu_compact_adam_params_per_s = kCompactAdamRatio * 1e9;
  // A cost model file without cpu_compact_adam_params_per_s (written before it was measured) takes the exact
  // rate times this: ferry-bench adam, 10M parameters, bf16 gradients, 2 threads, AVX2 (2-core AMD EPYC,
  // loaded, 2026-11-27): compact 443 Mparam/s against 569 exact with its bf16 upload.
  static constexpr double kCompactAdamRatio = 0.78;
  // The fused gradient-statistics pass (sum of squares, inf/nan) that global-norm clipping needs before
  // any update (it reads 4 bytes per parameter where fp32 AdamW moves 28, hence the default's 7x).
  double cpu_norm_params_per_s = 7e9;
  double device_adam_params_per_s = 5e10;

  // Per-op times profiled on the device for one spec (indexed like spec.ops); they replace the roofline
  // for that spec. Not saved to JSON: a profile belongs to one model shape and batch.
  std::vector<double> profiled_op_s;
  // The scratch the device's libraries needed while the profiled ops ran (oneDNN's scratchpad on the host
  // device): the plan's workspace tensor. Not saved to JSON either.
  int64_t profiled_workspace_bytes = 0;

  // One op's time: its profiled time when there is a profile for this spec; else the roofline: the larger
  // of its FLOPs at flops_per_s and the bytes it touches (its tensors and parameters at the device's
  // storage: ModelSpec::precision and each tensor's dtype) at memory_bytes_per_s, plus the per-op overhead.
  double op_seconds(const models::ModelSpec& spec, const models::OpSpec& op) const;
  // The bytes that roofline counts for an op: its parameters (in backward their gradients too, read and
  // written), inputs and outputs (read too where backward adds into them) at their device storage.
  double op_bytes(const models::ModelSpec& spec, const models::OpSpec& op) const;
  // Bytes a tensor takes on the device: its own (TensorSpec::bytes, from its storage dtype), except the
  // attention probabilities under fused attention (one fp32 log-sum-exp per row instead of a row of T).
  int64_t tensor_bytes(const models::ModelSpec& spec, int tensor) const;

  static CostModel from_json(const nlohmann::json& j, const std::string& origin);
  static CostModel load(const std::filesystem::path& path);
  nlohmann::json to_json() const;
};

}  // namespace ferry::offload
