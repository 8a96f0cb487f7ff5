// oneDNN matmul with a per-shape primitive cache. Primitive creation costs milliseconds (JIT), so each
// (shape, transpose, bias, accumulate) combination is created once and reused for every later call.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <tuple>

#include "kernels/cpu/onednn.h"

namespace ferry::kernels::cpu {
namespace {

struct Matmul {
  dnnl::memory::desc a, b, bias, c, scratchpad;
  dnnl::matmul prim;
};

}  // namespace

void matmul(float* C, const float* A, const float* B, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate) {
  const bool has_bias = bias != nullptr;
  const auto& p = onednn::cached<Matmul>(std::tuple(M, N, K, trans_a, trans_b, has_bias, accumulate), [&] {
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    Matmul m;
    // Logical shapes are (M,K) @ (K,N); "ba" describes an operand stored transposed.
    m.a = dnnl::memory::desc({M, K}, f32, trans_a ? tag::ba : tag::ab);
    m.b = dnnl::memory::desc({K, N}, f32, trans_b ? tag::ba : tag::ab);
    m.c = dnnl::memory::desc({M, N}, f32, tag::ab);
    if (has_bias) m.bias = dnnl::memory::desc({1, N}, f32, tag::ab);
    dnnl::primitive_attr attr = onednn::attributes();
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    auto desc = has_bias ? dnnl::matmul::desc(m.a, m.b, m.bias, m.c) : dnnl::matmul::desc(m.a, m.b, m.c);
    const dnnl::matmul::primitive_desc pd(desc, attr, onednn::engine());
    m.prim = dnnl::matmul(pd), m.scratchpad = pd.scratchpad_desc();
    return m;
  });
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, onednn::wrap(p.a, A)},
                                             {DNNL_ARG_WEIGHTS, onednn::wrap(p.b, B)},
                                             {DNNL_ARG_DST, onednn::wrap(p.c, C)}};
  if (has_bias) args.emplace(DNNL_ARG_BIAS, onednn::wrap(p.bias, bias));
  onednn::execute(p.prim, p.scratchpad, std::move(args));
}

void batched_matmul(float* C, StridedBatch c, const float* A, StridedBatch a, const float* B_, StridedBatch b,
                    int64_t B, int64_t H, int64_t M, int64_t N, int64_t K, bool accumulate) {
  auto key = std::tuple(B, H, M, N, K, accumulate, std::tuple(a.batch, a.head, a.row, a.col),
                        std::tuple(b.batch, b.head, b.row, b.col), std::tuple(c.batch, c.head, c.row, c.col));
  const auto& p = onednn::cached<Matmul>(key, [&] {
    const auto f32 = dnnl::memory::data_type::f32;
    Matmul m;
    m.a = dnnl::memory::desc({B, H, M, K}, f32, {a.batch, a.head, a.row, a.col});
    m.b = dnnl::memory::desc({B, H, K, N}, f32, {b.batch, b.head, b.row, b.col});
    m.c = dnnl::memory::desc({B, H, M, N}, f32, {c.batch, c.head, c.row, c.col});
    dnnl::primitive_attr attr = onednn::attributes();
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m.a, m.b, m.c), attr, onednn::engine());
    m.prim = dnnl::matmul(pd), m.scratchpad = pd.scratchpad_desc();
    return m;
  });
  onednn::execute(p.prim, p.scratchpad,
                  {{DNNL_ARG_SRC, onednn::wrap(p.a, A)}, {DNNL_ARG_WEIGHTS, onednn::wrap(p.b, B_)}, {DNNL_ARG_DST, onednn::wrap(p.c, C)}});
}

void set_matmul_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace ferry::kernels::cpu
