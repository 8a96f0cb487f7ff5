// GELU, forward and backward; BERT's exact form 0.5 x (1 + erf(x / sqrt(2))) through eltwise_gelu_erf, and
// the tanh approximation (GPT-2's "gelu_new"):
//   y = 0.5 x (1 + tanh(s (x + 0.044715 x^3))),  s = sqrt(2/pi)
//   dy/dx = 0.5 (1 + th) + 0.5 x (1 - th^2) s (1 + 3 * 0.044715 x^2),  th = tanh(...)
// computed by oneDNN's eltwise_gelu_tanh (vectorised tanh; libm's scalar tanh made this op a fifth of a
// GPT-2 step on the CPU).
#include <tuple>
#include <utility>

#include "kernels/cpu/onednn.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/workspace.h"

namespace ferry::kernels::cpu {
namespace {

struct Gelu {
  dnnl::memory::desc md, fwd_scratchpad, bwd_scratchpad;
  dnnl::eltwise_forward fwd;
  dnnl::eltwise_backward bwd;
};

const Gelu& gelu_for(int64_t n, bool exact) {
  return onednn::cached<Gelu>(std::pair{n, exact}, [n, exact] {
    Gelu g;
    g.md = dnnl::memory::desc({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    const auto alg = exact ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_gelu_tanh;
    dnnl::eltwise_forward::primitive_desc fpd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, g.md, 0.f, 0.f), onednn::attributes(), onednn::engine());
    dnnl::eltwise_backward::primitive_desc bpd(dnnl::eltwise_backward::desc(alg, g.md, g.md, 0.f, 0.f), onednn::attributes(),
                                               onednn::engine(), fpd);
    g.fwd = dnnl::eltwise_forward(fpd), g.fwd_scratchpad = fpd.scratchpad_desc();
    g.bwd = dnnl::eltwise_backward(bpd), g.bwd_scratchpad = bpd.scratchpad_desc();
    return g;
  });
}

}  // namespace

void gelu_forward(float* out, const float* x, int64_t N, bool exact) {
  const Gelu& g = gelu_for(N, exact);
  onednn::execute(g.fwd, g.fwd_scratchpad, {{DNNL_ARG_SRC, onednn::wrap(g.md, x)}, {DNNL_ARG_DST, onednn::wrap(g.md, out)}});
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t N, bool exact, bool accumulate) {
  // oneDNN overwrites its output: straight into dx when it is written, else into scratch, then added.
  float* s = accumulate ? workspace(Scratch::Op, N * 4) : dx;
  const Gelu& g = gelu_for(N, exact);
  onednn::execute(g.bwd, g.bwd_scratchpad,
                  {{DNNL_ARG_SRC, onednn::wrap(g.md, x)}, {DNNL_ARG_DIFF_DST, onednn::wrap(g.md, dout)}, {DNNL_ARG_DIFF_SRC, onednn::wrap(g.md, s)}});
  if (!accumulate) return;
  parallel_chunks(N, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dx[i] += s[i];
  });
}

}  // namespace ferry::kernels::cpu
