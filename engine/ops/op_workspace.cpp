// op_workspace_bytes: the host device measures its scratch; the CUDA device's kernels declare theirs.
#include "engine/ops/op_workspace.h"

#include <stdexcept>

namespace ferry::ops {

int64_t op_workspace_bytes(device::DeviceKind kind, const models::ModelSpec& spec) {
  if (kind == device::DeviceKind::Host) return 0;
#ifdef FERRY_WITH_CUDA
  return cuda_op_workspace_bytes(spec);
#else
  (void)spec;
  throw std::runtime_error("device: cuda: this build has no CUDA (configure with -DFERRY_CUDA=ON where nvcc exists)");
#endif
}

}  // namespace ferry::ops
