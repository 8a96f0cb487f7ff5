// op_scratch_bytes: what each op's CUDA kernels take from the plan's workspace, from the same scratch functions
// CudaKernels sizes its requests by (so the planned workspace and the requests cannot disagree). Built only
// with CUDA.
#include <algorithm>

#include "engine/device/cuda_device.h"
#include "engine/ops/op_dispatch.h"
#include "engine/ops/op_workspace.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"

namespace ferry::ops {

using namespace kernels::cuda;  // the kernels' scratch functions

int64_t op_scratch_bytes(const models::OpSpec& op, DType compute, const AttentionScratch& attention) {
  const models::OpAttrs& a = op.attrs;
  const bool backward = op.pass == models::Pass::Backward;
  switch (op.kind) {
    case models::OpKind::Embedding:
      return backward ? static_cast<int64_t>(embedding_backward_scratch_bytes(a.batch, a.seq, a.in)) : 0;
    case models::OpKind::LayerNorm:
      return backward ? layernorm_backward_scratch_floats(a.rows, a.in) * int64_t{sizeof(float)} : 0;
    case models::OpKind::Linear:  // the matmuls, then (backward) dbias: one after the other
      return std::max<int64_t>(kLtWorkspaceBytes,
                               backward ? static_cast<int64_t>(column_sums_scratch_bytes(a.rows, a.out)) : 0);
    case models::OpKind::Attention: {
      // GPT-2's packed qkv (one input in forward), BERT's q, k, v, or Llama's with fewer k and v heads.
      const bool packed = op.inputs.size() == (backward ? 4u : 1u);
      return attention(attention_shape(ops::attention_dims(a, packed)), compute, op.pass);
    }
    case models::OpKind::RmsNorm:  // dw's column partials
      return backward ? rmsnorm_backward_scratch_floats(a.rows, a.in) * int64_t{sizeof(float)} : 0;
    case models::OpKind::CrossEntropy:
      return backward ? int64_t{sizeof(float)} : 0;  // the loss gradient's scale, counted on the device
    case models::OpKind::Rope:                       // its frequencies travel as kernel arguments
    case models::OpKind::SwiGlu:
    case models::OpKind::Gelu:
    case models::OpKind::Residual: return 0;
  }
  return 0;
}

int64_t ops_scratch_bytes(const models::ModelSpec& spec, const AttentionScratch& attention) {
  int64_t most = 0;
  for (const models::OpSpec& op : spec.ops) most = std::max(most, op_scratch_bytes(op, spec.precision, attention));
  return most;
}

int64_t cuda_workspace_bytes(const models::ModelSpec& spec, const AttentionScratch& attention) {
  const int64_t buckets = std::max<int64_t>(1, static_cast<int64_t>(spec.params.size()));
  const int64_t most = std::max(ops_scratch_bytes(spec, attention), device::device_adamw_scratch_bytes(buckets));
  return (most + 255) / 256 * 256;
}

int64_t cuda_op_workspace_bytes(const models::ModelSpec& spec) {
  return cuda_workspace_bytes(spec, [](const AttentionShape& s, DType t, models::Pass pass) {
    const AttentionKernel k = choose_attention_kernel(s, t);
    return static_cast<int64_t>(pass == models::Pass::Forward ? attention_forward_scratch_bytes(k, s, t)
                                                              : attention_backward_scratch_bytes(k, s, t));
  });
}

}  // namespace ferry::ops
