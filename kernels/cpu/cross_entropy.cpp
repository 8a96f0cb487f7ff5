// Softmax cross-entropy over the vocabulary (the first V of each row's `stride` logits; the rest are padding):
//   forward:  losses[r] = -log_softmax(logits[r, :V])[target[r]]
//   backward: dlogits[r, :V] (+)= dloss * (softmax(logits[r, :V]) - onehot(target[r]))
// The probabilities are never kept between passes (backward recomputes them). The softmaxes run in
// oneDNN (vectorised exp over rows of up to 50k entries; scalar libm exp cost ~10% of a GPT-2 step).
#include <algorithm>
#include <tuple>

#include "kernels/cpu/onednn.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/workspace.h"

namespace ferry::kernels::cpu {
namespace {

struct Softmax {
  dnnl::memory::desc md, scratchpad;
  dnnl::primitive prim;
};

// log_softmax (log=true) or softmax over the last dim of an (N,V) matrix.
const Softmax& softmax_for(int64_t N, int64_t V, bool log) {
  return onednn::cached<Softmax>(std::tuple(N, V, log), [=] {
    Softmax s;
    s.md = dnnl::memory::desc({N, V}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
    const auto prop = dnnl::prop_kind::forward_inference;
    if (log) {
      dnnl::logsoftmax_forward::primitive_desc pd(dnnl::logsoftmax_forward::desc(prop, s.md, 1), onednn::attributes(), onednn::engine());
      s.prim = dnnl::logsoftmax_forward(pd), s.scratchpad = pd.scratchpad_desc();
    } else {
      dnnl::softmax_forward::primitive_desc pd(dnnl::softmax_forward::desc(prop, s.md, 1), onednn::attributes(), onednn::engine());
      s.prim = dnnl::softmax_forward(pd), s.scratchpad = pd.scratchpad_desc();
    }
    return s;
  });
}

// The (log-)softmax of each row's first V of `stride` logits, as dense (N,V) rows in scratch. Rows with padding
// are first gathered into the scratch and transformed in place: oneDNN's vectorised softmax takes only dense
// rows (a strided one falls back to its scalar reference).
float* softmax_into_scratch(const float* logits, int64_t N, int64_t V, int64_t stride, bool log) {
  float* probs = workspace(Scratch::Op, N * V * 4);
  const Softmax& s = softmax_for(N, V, log);
  const float* src = logits;
  if (stride != V) {
    parallel_chunks(N, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::copy_n(logits + r * stride, V, probs + r * V);
    });
    src = probs;
  }
  onednn::execute(s.prim, s.scratchpad,
                  {{DNNL_ARG_SRC, onednn::wrap(s.md, src)}, {DNNL_ARG_DST, onednn::wrap(s.md, probs)}});
  return probs;
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t stride) {
  const float* logp = softmax_into_scratch(logits, N, V, stride, /*log=*/true);
  for (int64_t r = 0; r < N; ++r) losses[r] = targets[r] < 0 ? 0.0f : -logp[r * V + targets[r]];
}

void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int64_t N,
                            int64_t V, int64_t stride, bool accumulate) {
  const float* p = softmax_into_scratch(logits, N, V, stride, /*log=*/false);
  parallel_chunks(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* d = dlogits + r * stride;
      if (!accumulate) std::fill(d + (targets[r] < 0 ? 0 : V), d + stride, 0.0f);  // no gradient there
      if (targets[r] < 0) continue;                                                // not a position of the loss
      const float* pr = p + r * V;
      for (int64_t v = 0; v < V; ++v) d[v] = accumulate ? d[v] + dloss * pr[v] : dloss * pr[v];
      d[targets[r]] -= dloss;
    }
  });
}

}  // namespace ferry::kernels::cpu
