// Model FLOPs utilisation (MFU) of a training step: the FLOPs the model must do by the standard count, over
// the step's time and the GPU's peak rate. Pure functions, tested on the host (tests/engine/test_mfu.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "memory/dtype.h"
#include "models/model_spec.h"

namespace ferry::bench {

// The shape a step's FLOP count needs.
struct FlopShape {
  int64_t params = 0;        // N: every parameter of the model
  int64_t block_params = 0;  // the parameters of one transformer block
  int64_t n_layer = 0;       // L
  int64_t n_embd = 0;        // C
  int64_t seq = 0;           // T: tokens per sequence
  int64_t tokens = 0;        // tokens per optimizer step (batch x T x micro-batches)
  int64_t recomputed_blocks = 0;  // blocks whose forward activation checkpointing runs twice
};

// The formula, as the results print it.
inline const char* kMfuFormula =
    "model FLOPs/step = 6*N*tokens + 12*L*C*T*tokens (PaLM, appendix B: 2N forward and 4N backward per token "
    "for the weights, N every parameter; 4*C*T forward and 8*C*T backward per token and layer for attention's "
    "QK^T and PV over the full T x T, the causal mask not discounted); recomputation (activation checkpointing) "
    "is not in MFU: recompute FLOPs/step = blocks * (2*N_block + 4*C*T) * tokens, reported apart";

// The shape of a spec's step: N from its parameters, N_block from the parameters block 0's ops use.
inline FlopShape flop_shape(const models::ModelSpec& spec, int64_t n_layer, int64_t n_embd, int64_t seq, int64_t tokens,
                            int64_t recomputed_blocks) {
  std::set<int> block0;
  for (const models::OpSpec& op : spec.ops)
    if (op.layer == 0) block0.insert(op.params.begin(), op.params.end());
  int64_t block_params = 0;
  for (int p : block0) block_params += models::numel(spec.params[p].shape);
  return {spec.param_count(), block_params, n_layer, n_embd, seq, tokens, recomputed_blocks};
}

struct StepFlops {
  double model = 0;      // what MFU counts
  double recompute = 0;  // the recomputed blocks' second forward: hardware FLOPs, not model FLOPs
};

inline StepFlops step_flops(const FlopShape& s) {
  const double tokens = static_cast<double>(s.tokens);
  const double weights = 6.0 * static_cast<double>(s.params) * tokens;
  const double attention = 12.0 * static_cast<double>(s.n_layer * s.n_embd * s.seq) * tokens;
  const double block_forward = (2.0 * static_cast<double>(s.block_params) + 4.0 * static_cast<double>(s.n_embd * s.seq)) * tokens;
  return {weights + attention, static_cast<double>(s.recomputed_blocks) * block_forward};
}

// A GPU's peak rate for the step's storage: dense tensor-core bf16/fp16 for a 2-byte precision, plain fp32
// (CUDA cores, no TF32) for fp32. Vendor datasheet figures, the ones HOPPER.md/H200.md of the device notes
// quote: H100 SXM and H200 989 TFLOP/s bf16/fp16 dense, 67 fp32; H100 PCIe 756 and 51. Memory: HBM3 3.35 TB/s
// (H100 SXM), HBM2e 2.0 TB/s (H100 PCIe), HBM3e 4.8 TB/s (H200).
struct PeakRate {
  std::string name;        // e.g. "H100 SXM bf16 dense (tensor cores)"
  double flops = 0;        // per second
  double bytes_per_s = 0;  // device memory bandwidth
};

inline std::optional<PeakRate> peak_rate(const std::string& gpu_name, DType precision) {
  const bool two_byte = precision == DType::BF16 || precision == DType::F16;
  const std::string math = two_byte ? std::string(to_string(precision)) + " dense (tensor cores)" : "fp32 (CUDA cores, no TF32)";
  const bool h200 = gpu_name.find("H200") != std::string::npos;
  const bool h100 = gpu_name.find("H100") != std::string::npos;
  if (!h100 && !h200) return std::nullopt;
  if (h100 && gpu_name.find("PCIe") != std::string::npos)
    return PeakRate{"H100 PCIe " + math, two_byte ? 756e12 : 51e12, 2.0e12};
  return PeakRate{std::string(h200 ? "H200 " : "H100 SXM ") + math, two_byte ? 989e12 : 67e12, h200 ? 4.8e12 : 3.35e12};
}

// Model FLOPs per second over the peak.
inline double mfu(const StepFlops& flops, double step_seconds, const PeakRate& peak) { return flops.model / step_seconds / peak.flops; }

}  // namespace ferry::bench
