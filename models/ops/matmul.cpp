// oneDNN matmul with a per-shape primitive cache. Primitive creation costs milliseconds (JIT), so each
// (shape, transpose, bias, accumulate) combination is created once and reused for every later call.
#include "models/ops/matmul.h"

#include <omp.h>

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

namespace ferry::models::ops {
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, bool>;

struct Cached {
  dnnl::memory::desc a, b, bias, c;
  dnnl::matmul prim;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

const Cached& primitive_for(const Key& key) {
  static std::mutex mu;
  static std::map<Key, Cached> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  auto [M, N, K, trans_a, trans_b, has_bias, accumulate] = key;
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  Cached c;
  // Logical shapes are (M,K) @ (K,N); "ba" describes an operand stored transposed.
  c.a = dnnl::memory::desc({M, K}, f32, trans_a ? tag::ba : tag::ab);
  c.b = dnnl::memory::desc({K, N}, f32, trans_b ? tag::ba : tag::ab);
  c.c = dnnl::memory::desc({M, N}, f32, tag::ab);
  if (has_bias) c.bias = dnnl::memory::desc({1, N}, f32, tag::ab);
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  auto desc = has_bias ? dnnl::matmul::desc(c.a, c.b, c.bias, c.c) : dnnl::matmul::desc(c.a, c.b, c.c);
  c.prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu_engine()));
  return cache.emplace(key, std::move(c)).first->second;
}

}  // namespace

void matmul(float* C, const float* A, const float* B, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate) {
  const Cached& p = primitive_for({M, N, K, trans_a, trans_b, bias != nullptr, accumulate});
  auto& eng = cpu_engine();
  thread_local dnnl::stream stream(eng);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(p.a, eng, const_cast<float*>(A))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, eng, const_cast<float*>(B))},
      {DNNL_ARG_DST, dnnl::memory(p.c, eng, C)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, eng, const_cast<float*>(bias)));
  p.prim.execute(stream, args);
  stream.wait();
}

void set_matmul_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace ferry::models::ops
