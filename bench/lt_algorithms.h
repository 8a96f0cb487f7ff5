// The cuBLASLt algorithm of every Linear matmul of a model's step (issue 31: what a GPU session records beside
// the op breakdown, to read which products run a poor algorithm).
#pragma once

#include <nlohmann/json.hpp>

#include "models/model_spec.h"

namespace ferry::bench {

// One entry per distinct Linear shape and pass (forward, dx, dW): its ops, shape and cuBLASLt's algorithm
// (id, tile, stages, split-K, reduction, swizzle, cluster, workspace, waves) as the heuristic chooses it for
// 256-byte-aligned operands (the arena's alignment) and the kernels' full workspace. Needs a GPU: without one,
// or without CUDA, {"error": why}.
nlohmann::json cublaslt_algorithms(const models::ModelSpec& spec);

}  // namespace ferry::bench
