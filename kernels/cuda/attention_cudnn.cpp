// cuDNN's fused SDPA (cuDNN >= 9.0) through cudnn-frontend's graph API, with cuDNN dlopen()ed at run time
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): no link-time dependency, and a machine without cuDNN gets
// "not available" and the flash kernel. Host code only (the small kernels it needs are in attention_flash.cu).
// Compiled to "never available" unless configured with FERRY_CUDNN_FRONTEND_INCLUDE (FERRY_WITH_CUDNN_SDPA).
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_sdpa_desc.h"
#include "kernels/cuda/library_search.h"

#if defined(FERRY_WITH_CUDNN_SDPA)

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

// The library handle cudnn-frontend resolves cuDNN's symbols from (it declares it; the user defines it).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace ferry::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;

// Where libcudnn.so.9 may be: $FERRY_CUDNN_LIB (the file or its folder), the loader's search path, the build's
// toolkit, then PyTorch's wheels (nvidia/cudnn/lib in a site-packages folder).
std::vector<std::string> cudnn_candidates() {
  return library_candidates({"FERRY_CUDNN_LIB", "libcudnn.so.9", FERRY_CUDA_LIBRARY_DIR, {"nvidia/cudnn/lib"}});
}

// A built graph and its workspace.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

// (B, T, C, NH, row_stride, causal, padding mask, dtype, backward, kv_heads, kv_row_stride)
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, bool, int64_t, int64_t>;

// The process's cuDNN: library, version, one handle, the plans built so far (under the mutex: handle and
// plans are shared by every caller). Never destroyed: plans released at exit would call into cuDNN while
// the loader may already have unloaded it.
struct Cudnn {
  void* lib = nullptr;
  size_t version = 0;
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;  // null: this shape is not supported
};

// cudnn-frontend dlopen()s a libcudart (.so.12 or .so.13) for its few runtime calls. Where the loader's path
// has none, point it at PyTorch's, beside cuDNN in the wheels' layout (nvidia/cuda_runtime/lib).
void hint_cudart(void* cudnn_symbol) {
  if (std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME")) return;
  for (const char* name : {"libcudart.so.13", "libcudart.so.12"})
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      dlclose(h);
      return;
    }
  Dl_info info{};
  if (!dladdr(cudnn_symbol, &info) || !info.dli_fname) return;
  const std::string lib = info.dli_fname;  // .../nvidia/cudnn/lib/libcudnn.so.9
  const size_t cut = lib.rfind("/cudnn/lib/");
  if (cut == std::string::npos) return;
  for (const char* name : {"libcudart.so.13", "libcudart.so.12"}) {
    const std::string path = lib.substr(0, cut) + "/cuda_runtime/lib/" + name;
    struct stat st{};
    if (stat(path.c_str(), &st) == 0) {
      setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", path.c_str(), 0);
      return;
    }
  }
}

Cudnn* load_cudnn() {
  auto* c = new Cudnn;
  for (const std::string& path : cudnn_candidates())
    if ((c->lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  if (!c->lib) return c;
  using GetVersion = size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(c->lib, "cudnnGetVersion"));
  c->version = get_version ? get_version() : 0;
  if (c->version < 90000) return c;
  fe::cudnn_dlhandle = c->lib;
  hint_cudart(reinterpret_cast<void*>(get_version));
  try {
    if (fe::detail::create_handle(&c->handle) != CUDNN_STATUS_SUCCESS) c->handle = nullptr;
  } catch (const std::exception&) {
    c->handle = nullptr;  // cudnn-frontend throws when it cannot resolve a symbol or load the CUDA runtime
  }
  return c;
}

Cudnn& cudnn() {
  static Cudnn* c = load_cudnn();
  return *c;
}

// Tensor uids of the graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeqQ, kSeqKv, kDO, kDQ, kDK, kDV };

fe::DataType_t fe_type(DType d) { return d == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                     const sdpa::View& v) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({v.dim.begin(), v.dim.end()})
                      .set_stride({v.stride.begin(), v.stride.end()}));
}

void set_output(fe::graph::Tensor_attributes& t, Uid uid, const sdpa::View& v) {
  t.set_output(true).set_uid(uid).set_dim({v.dim.begin(), v.dim.end()}).set_stride({v.stride.begin(), v.stride.end()});
}

sdpa::Views views_of(const AttentionShape& s) {
  return sdpa::views(s.B, s.T, s.C, s.NH, s.row_stride, s.kv_heads, s.kv_row_stride);
}

int64_t kv_channels(const AttentionShape& s) { return (s.kv_heads ? s.kv_heads : s.NH) * (s.C / s.NH); }
int64_t kv_row_stride(const AttentionShape& s) { return s.kv_row_stride ? s.kv_row_stride : s.row_stride; }

std::shared_ptr<fe::graph::Tensor_attributes> seq_len(fe::graph::Graph& g, const char* name, Uid uid, int64_t B) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

float scale_of(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.C / s.NH)); }

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// Forward: O and the stats (cuDNN's "Stats": per query max + ln(sum of e^{s - max}) of the scaled, masked
// scores, natural log: our lse).
std::shared_ptr<fe::graph::Graph> forward_graph(const AttentionShape& s, bool mask, DType dtype) {
  auto g = new_graph(dtype);
  const sdpa::Views w = views_of(s);
  auto q = tensor(*g, "q", kQ, w.q), k = tensor(*g, "k", kK, w.kv), v = tensor(*g, "v", kV, w.kv);
  auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_causal_mask(s.causal).set_attn_scale(
      scale_of(s));
  if (mask)
    options.set_padding_mask(true).set_seq_len_q(seq_len(*g, "seq_q", kSeqQ, s.B)).set_seq_len_kv(
        seq_len(*g, "seq_kv", kSeqKv, s.B));
  auto [o, stats] = g->sdpa(q, k, v, options);
  set_output(*o, kO, w.out);
  set_output(*stats, kStats, w.stats);
  stats->set_data_type(fe::DataType_t::FLOAT);
  return g;
}

// Backward: dq, dk, dv into (B,T,C) and (B,T,KV*hs) buffers (cuDNN overwrites them, summing a key/value
// head's query heads); deterministic algorithm.
std::shared_ptr<fe::graph::Graph> backward_graph(const AttentionShape& s, bool mask, DType dtype) {
  auto g = new_graph(dtype);
  const sdpa::Views w = views_of(s);
  auto q = tensor(*g, "q", kQ, w.q), k = tensor(*g, "k", kK, w.kv), v = tensor(*g, "v", kV, w.kv);
  auto o = tensor(*g, "o", kO, w.out), dout = tensor(*g, "dO", kDO, w.out);
  auto stats = tensor(*g, "stats", kStats, w.stats);
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("sdpa_backward")
                     .set_causal_mask(s.causal)
                     .set_attn_scale(scale_of(s))
                     .set_deterministic_algorithm(true);
  if (mask)
    options.set_padding_mask(true).set_seq_len_q(seq_len(*g, "seq_q", kSeqQ, s.B)).set_seq_len_kv(
        seq_len(*g, "seq_kv", kSeqKv, s.B));
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
  set_output(*dq, kDQ, w.out);
  set_output(*dk, kDK, w.kv_grads);
  set_output(*dv, kDV, w.kv_grads);
  return g;
}

// The plan of a shape, built on first use (null where cuDNN cannot run it). Caller holds the mutex.
const Plan* plan_locked(Cudnn& c, const AttentionShape& s, bool mask, DType dtype, bool backward) {
  const PlanKey key{s.B,
                    s.T,
                    s.C,
                    s.NH,
                    s.row_stride,
                    s.causal,
                    mask,
                    static_cast<int>(dtype),
                    backward,
                    s.kv_heads,
                    s.kv_row_stride};
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return it->second.get();
  std::unique_ptr<Plan> plan;
  try {
    auto g = backward ? backward_graph(s, mask, dtype) : forward_graph(s, mask, dtype);
    if (g->build(c.handle, {fe::HeurMode_t::A}).is_good()) {
      plan = std::make_unique<Plan>();
      plan->graph = std::move(g);
      if (!plan->graph->get_workspace_size(plan->workspace).is_good()) plan.reset();
    }
  } catch (const std::exception&) {
    plan.reset();
  }
  return (c.plans[key] = std::move(plan)).get();
}

sdpa::Scratch layout(const AttentionShape& s, DType dtype, bool backward, int64_t workspace) {
  return sdpa::scratch(s.B, s.T, s.C, kv_channels(s), static_cast<size_t>(dtype_bytes(dtype)), backward,
                       static_cast<size_t>(workspace));
}

// The largest workspace over the masked and unmasked plans (the caller plans scratch before it knows).
size_t scratch_bytes(const AttentionShape& s, DType dtype, bool backward) {
  Cudnn& c = cudnn();
  if (!c.handle) return 0;
  std::lock_guard<std::mutex> lock(c.mutex);
  int64_t ws = 0;
  for (bool mask : {false, true})
    if (const Plan* p = plan_locked(c, s, mask, dtype, backward)) ws = std::max(ws, p->workspace);
  return layout(s, dtype, backward, ws).total;
}

char* at(void* scratch, size_t offset) { return static_cast<char*>(scratch) + offset; }

// Runs the plan with the pack on `stream` (seq_q/seq_kv filled first when there is a mask).
cudaError_t execute(Cudnn& c, const Plan& p, std::unordered_map<int64_t, void*>& pack, const sdpa::Scratch& l, void* scratch,
                    const int32_t* key_mask, const AttentionShape& s, cudaStream_t stream) {
  if (key_mask) {
    auto* seq_q = reinterpret_cast<int32_t*>(at(scratch, l.seq_q));
    auto* seq_kv = reinterpret_cast<int32_t*>(at(scratch, l.seq_kv));
    const cudaError_t e = cudnn_seq_lens(seq_q, seq_kv, key_mask, s.B, s.T, stream);
    if (e != cudaSuccess) return e;
    pack[kSeqQ] = seq_q, pack[kSeqKv] = seq_kv;
  }
  try {
    if (fe::detail::set_stream(c.handle, stream) != CUDNN_STATUS_SUCCESS) return cudaErrorUnknown;
    return p.graph->execute(c.handle, pack, at(scratch, l.workspace)).is_good() ? cudaSuccess : cudaErrorUnknown;
  } catch (const std::exception&) {
    return cudaErrorUnknown;
  }
}

}  // namespace

bool cudnn_sdpa_supports(const AttentionShape& s, DType dtype) {
  const int64_t hs = s.C / s.NH;
  if ((dtype != DType::BF16 && dtype != DType::F16) || hs > 128 || hs % 8 != 0 || s.row_stride % 8 != 0 ||
      s.C % 8 != 0 || kv_row_stride(s) % 8 != 0)
    return false;
  Cudnn& c = cudnn();
  if (!c.handle) return false;
  std::lock_guard<std::mutex> lock(c.mutex);
  for (bool mask : {false, true})
    for (bool backward : {false, true})
      if (!plan_locked(c, s, mask, dtype, backward)) return false;
  return true;
}

size_t cudnn_sdpa_forward_scratch_bytes(const AttentionShape& s, DType dtype) { return scratch_bytes(s, dtype, false); }
size_t cudnn_sdpa_backward_scratch_bytes(const AttentionShape& s, DType dtype) { return scratch_bytes(s, dtype, true); }

cudaError_t cudnn_sdpa_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                               const int32_t* key_mask, const AttentionShape& s, DType dtype, void* scratch,
                               size_t scratch_bytes, cudaStream_t stream) {
  Cudnn& c = cudnn();
  if (!c.handle) return cudaErrorNotSupported;
  std::lock_guard<std::mutex> lock(c.mutex);
  const Plan* p = plan_locked(c, s, key_mask != nullptr, dtype, false);
  if (!p) return cudaErrorNotSupported;
  const sdpa::Scratch l = layout(s, dtype, false, p->workspace);
  if (scratch_bytes < l.total) return cudaErrorInvalidValue;
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)}, {kO, out}, {kStats, lse}};
  return execute(c, *p, pack, l, scratch, key_mask, s, stream);
}

cudaError_t cudnn_sdpa_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k,
                                const void* v, const int32_t* key_mask, const void* out, const float* lse,
                                const AttentionShape& s, bool accumulate, DType dtype, void* scratch,
                                size_t scratch_bytes, cudaStream_t stream) {
  Cudnn& c = cudnn();
  if (!c.handle) return cudaErrorNotSupported;
  std::unique_lock<std::mutex> lock(c.mutex);
  const Plan* p = plan_locked(c, s, key_mask != nullptr, dtype, true);
  if (!p) return cudaErrorNotSupported;
  const sdpa::Scratch l = layout(s, dtype, true, p->workspace);
  if (scratch_bytes < l.total) return cudaErrorInvalidValue;
  void* g[3] = {at(scratch, l.dq), at(scratch, l.dk), at(scratch, l.dv)};
  // With a padding mask cuDNN's kernels stop each batch row's keys at its count: the dk and dv rows of the padded
  // keys, whose gradient is 0, need not be written, and the scratch holds what an earlier op left there (NaN, say),
  // which write_view would copy into the views and the K/V projections' weight gradients. Zeroed first: one memset
  // of the two buffers, BERT's masked batches only. (Not yet seen on a GPU either way.)
  if (key_mask) {
    const cudaError_t zeroed = cudaMemsetAsync(g[1], 0, l.workspace - l.dk, stream);
    if (zeroed != cudaSuccess) return zeroed;
  }
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},   {kV, const_cast<void*>(v)},
      {kO, const_cast<void*>(out)}, {kDO, const_cast<void*>(dout)}, {kStats, const_cast<float*>(lse)},
      {kDQ, g[0]},                {kDK, g[1]},                  {kDV, g[2]}};
  cudaError_t e = execute(c, *p, pack, l, scratch, key_mask, s, stream);
  lock.unlock();
  // cuDNN wrote the gradients into scratch; they are added into the views, or copied there when not accumulating.
  // (A graph whose outputs are the strided views themselves, GPT-2's dqkv rows 3C apart, would save the copy and
  // the scratch; it has never run on a GPU, so the scratch stays.) On an H100, compute-sanitizer's initcheck flags
  // this kernel's reads of g[1] and g[2] (dk, dv; not dq) though their values are right (the CUDA op tests match
  // the host device): most likely cuDNN's sm90 kernel stores them by TMA, which initcheck does not see. Sanitize
  // Ferry's own kernels with FERRY_ATTENTION=flash.
  void* dst[3] = {dq, dk, dv};
  const int64_t channels[3] = {s.C, kv_channels(s), kv_channels(s)};
  const int64_t strides[3] = {s.row_stride, kv_row_stride(s), kv_row_stride(s)};
  for (int i = 0; i < 3 && e == cudaSuccess; ++i)
    e = write_view(dst[i], g[i], s.B, s.T, channels[i], strides[i], accumulate, dtype, stream);
  return e;
}

}  // namespace ferry::kernels::cuda

#else  // no cudnn-frontend at build time: never available

namespace ferry::kernels::cuda {

bool cudnn_sdpa_supports(const AttentionShape&, DType) { return false; }
size_t cudnn_sdpa_forward_scratch_bytes(const AttentionShape&, DType) { return 0; }
size_t cudnn_sdpa_backward_scratch_bytes(const AttentionShape&, DType) { return 0; }

cudaError_t cudnn_sdpa_forward(void*, float*, const void*, const void*, const void*, const int32_t*,
                               const AttentionShape&, DType, void*, size_t, cudaStream_t) {
  return cudaErrorNotSupported;
}

cudaError_t cudnn_sdpa_backward(void*, void*, void*, const void*, const void*, const void*, const void*, const int32_t*,
                                const void*, const float*, const AttentionShape&, bool, DType, void*, size_t,
                                cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace ferry::kernels::cuda

#endif
