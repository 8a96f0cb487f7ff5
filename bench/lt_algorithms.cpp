// cublaslt_algorithms: the step's Linear shapes, each asked of cuBLASLt's heuristic as CudaKernels asks it (dx
// with the beta its ops use).
#include "bench/lt_algorithms.h"

#include <exception>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#ifdef FERRY_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cublaslt_library.h"
#endif

namespace ferry::bench {

#ifdef FERRY_WITH_CUDA
namespace {

namespace kc = kernels::cuda;

nlohmann::json entry(const std::string& pass, const kc::LinearShape& s, int ops, const kc::LtAlgorithm& a) {
  return {{"pass", pass},
          {"rows", s.rows},
          {"in", s.in},
          {"out", s.out},
          {"weight_out_in", s.weight_out_in},
          {"ops", ops},
          {"algo_id", a.id},
          {"tile", a.tile},
          {"stages", a.stages},
          {"split_k", a.split_k},
          {"reduction", a.reduction},
          {"swizzle", a.swizzle},
          {"cluster", a.cluster},
          {"workspace_bytes", a.workspace},
          {"waves", a.waves}};
}

}  // namespace

nlohmann::json cublaslt_algorithms(const models::ModelSpec& spec) {
  // (rows, in, out, weight_out_in, bias) -> how many forward Linear ops have it, and whether their backward's dx
  // is written (beta 0: the op produces it first) or added into (beta 1), as the dispatcher decides
  using Shape = std::tuple<int64_t, int64_t, int64_t, bool, bool>;
  std::map<Shape, int> shapes;
  std::map<Shape, std::set<bool>> dx_accumulates;
  for (const models::OpSpec& op : spec.ops) {
    if (op.kind != models::OpKind::Linear) continue;
    const Shape key{op.attrs.rows, op.attrs.in, op.attrs.out, op.attrs.weight_out_in, op.params.size() > 1};
    if (op.pass == models::Pass::Forward) ++shapes[key];
    else if (!op.outputs.empty()) dx_accumulates[key].insert(!spec.writes_gradients(op));
  }
  try {
    kc::LtMatmuls lt;
    const auto ws = static_cast<size_t>(kc::kLtWorkspaceBytes);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [key, ops] : shapes) {
      const auto& [rows, in, features, out_in, bias] = key;
      const kc::LinearShape s{rows, in, features, out_in};
      std::vector<std::pair<std::string, kc::LtMatmulDesc>> passes{{"forward", kc::linear_forward_desc(s, bias)}};
      for (bool accumulate : dx_accumulates[key])
        passes.emplace_back(accumulate ? "dx (beta 1)" : "dx (beta 0)", kc::linear_dx_desc(s, accumulate));
      passes.emplace_back("dW", kc::linear_dw_desc(s));
      for (const auto& [pass, desc] : passes) {
        kc::LtAlgorithm a;
        const cublasStatus_t status = lt.algorithm(desc, spec.precision, ws, 256, &a);
        if (status != CUBLAS_STATUS_SUCCESS)
          out.push_back({{"pass", pass},
                         {"rows", rows},
                         {"in", in},
                         {"out", features},
                         {"error", kc::cublaslt().status_string(status)}});
        else out.push_back(entry(pass, s, ops, a));
      }
    }
    return out;
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

#else

nlohmann::json cublaslt_algorithms(const models::ModelSpec&) { return {{"error", "this build has no CUDA"}}; }

#endif

}  // namespace ferry::bench
