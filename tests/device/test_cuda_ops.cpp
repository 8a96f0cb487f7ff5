// The CUDA device's ops (with a GPU; skipped without one): every op kind and pass of GPT-2, BERT and Llama through
// CudaDevice::run_op against the host device's CPU op, both reached through the Device interface, on random
// shapes (odd vocabulary and channel sizes) in fp32, bf16 and fp16, backward ops also told to write their
// activation gradients (accumulate false) over garbage; and the Hugging Face goldens (GPT-2, BERT, Llama, Qwen2:
// tests/data/*_reference.safetensors) replayed on the CUDA device, AdamW steps included.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "engine/device/cuda_devices.h"
#include "engine/device/make_device.h"
#include "engine/ops/op_dispatch.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "kernels/op_call.h"
#include "memory/convert.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "models/parameter_store.h"
#include "models/registry.h"
#include "foundation/rng.h"
#include "golden_helpers.h"
#include "test_helpers.h"

namespace ferry::device {
namespace {

using models::ModelSpec;
using models::OpSpec;
using models::numel;

// The reason a GPU test skips: the build has no CUDA, or the machine no GPU.
#define REQUIRE_GPU()                                                                                        \
  if (cuda_device_count() == 0) {                                                                            \
    GTEST_SKIP() << "no CUDA device: " << (kCudaBuilt ? "cuda_device_count() is 0 (no driver or no GPU visible)" \
                                                      : "built without CUDA (FERRY_CUDA=OFF or no nvcc)");   \
  }
#ifdef FERRY_WITH_CUDA
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Where every operand of a spec lives, as a byte offset shared by the arena and its host image: each tensor
// on its own; the parameters' working values, their gradients (both in the precision) and AdamW's fp32
// master weights and moments as four regions of one padded length, each parameter 256-byte aligned in them,
// so that one optimizer bucket covers them all.
struct SpecLayout {
  std::vector<int64_t> tensor;       // per tensor
  std::vector<int64_t> param_slot;   // per parameter: its element offset inside each region
  int64_t region_numel = 0;          // elements of each region, padding included (padding stays zero)
  int64_t values = 0, grads = 0, master = 0, m = 0, v = 0;  // the regions' byte offsets
  int64_t bytes = 0;

  explicit SpecLayout(const ModelSpec& spec) {
    for (const auto& t : spec.tensors) tensor.push_back(bytes), bytes += align256(t.bytes());
    for (const auto& p : spec.params) param_slot.push_back(region_numel), region_numel += align256(numel(p.shape) * 4) / 4;
    for (int64_t* region : {&values, &grads, &master, &m, &v}) *region = bytes, bytes += region_numel * 4;
  }
  int64_t value(const ModelSpec& spec, int p) const { return values + param_slot[p] * dtype_bytes(spec.precision); }
  int64_t grad(const ModelSpec& spec, int p) const { return grads + param_slot[p] * dtype_bytes(spec.precision); }
};

// The libraries' scratch (cuBLASLt, cuDNN; oneDNN on the host device), bound as the Executor binds the
// plan's workspace: 32 MiB, what cuBLAS suggests on Hopper, ample for these shapes.
constexpr int64_t kWorkspaceBytes = int64_t(32) << 20;

// A backend's kernels with every backward told to write its activation gradients (accumulate false), as the
// dispatcher tells an op that is the first to produce them.
class WritingKernels : public kernels::OpKernels {
 public:
  explicit WritingKernels(kernels::OpKernels& k) : k_(k) {}
  bool computes_in(DType compute) const override { return k_.computes_in(compute); }
  void zero(kernels::Operand tensor, int64_t bytes) override { k_.zero(tensor, bytes); }
  void embedding_forward(const kernels::EmbeddingForward& a) override { k_.embedding_forward(a); }
  void embedding_backward(const kernels::EmbeddingBackward& a) override { k_.embedding_backward(a); }
  void layernorm_forward(const kernels::LayerNormForward& a) override { k_.layernorm_forward(a); }
  void layernorm_backward(const kernels::LayerNormBackward& a) override { k_.layernorm_backward(written(a)); }
  void linear_forward(const kernels::LinearForward& a) override { k_.linear_forward(a); }
  void linear_backward(const kernels::LinearBackward& a) override { k_.linear_backward(written(a)); }
  void attention_forward(const kernels::AttentionForward& a) override { k_.attention_forward(a); }
  void attention_backward(const kernels::AttentionBackward& a) override { k_.attention_backward(written(a)); }
  void gelu_forward(const kernels::GeluForward& a) override { k_.gelu_forward(a); }
  void gelu_backward(const kernels::GeluBackward& a) override { k_.gelu_backward(written(a)); }
  void rmsnorm_forward(const kernels::RmsNormForward& a) override { k_.rmsnorm_forward(a); }
  void rmsnorm_backward(const kernels::RmsNormBackward& a) override { k_.rmsnorm_backward(written(a)); }
  void rope_forward(const kernels::RopeForward& a) override { k_.rope_forward(a); }
  void rope_backward(const kernels::RopeBackward& a) override { k_.rope_backward(written(a)); }
  void swiglu_forward(const kernels::SwiGluForward& a) override { k_.swiglu_forward(a); }
  void swiglu_backward(const kernels::SwiGluBackward& a) override { k_.swiglu_backward(written(a)); }
  void residual_forward(const kernels::ResidualForward& a) override { k_.residual_forward(a); }
  void residual_backward(const kernels::ResidualBackward& a) override { k_.residual_backward(written(a)); }
  void cross_entropy_forward(const kernels::CrossEntropyForward& a) override { k_.cross_entropy_forward(a); }
  void cross_entropy_backward(const kernels::CrossEntropyBackward& a) override {
    k_.cross_entropy_backward(written(a));
  }

 private:
  template <class Args>
  static Args written(Args a) {
    a.accumulate = false;
    return a;
  }
  kernels::OpKernels& k_;
};

// `call` launched on WritingKernels, its gradient tensors not zeroed first: what they held must not matter.
kernels::OpCall writing_gradients(kernels::OpCall call) {
  for (kernels::CallOperand& o : call.operands) o.zeroed = false;
  call.launch = [launch = std::move(call.launch)](kernels::OpKernels& k, std::span<const kernels::Operand> operands) {
    WritingKernels writing(k);
    return launch(writing, operands);
  };
  return call;
}

// One device with an arena (the operands, then the workspace) and a pinned host image of its operands:
// offsets mean the same in both.
struct Mirror {
  std::unique_ptr<Device> dev;
  std::unique_ptr<memory::PinnedHostPool> pool;
  std::byte* host = nullptr;
  int64_t bytes = 0;

  Mirror(DeviceChoice::Kind kind, int64_t size)
      : dev(make_device({.kind = kind, .arena_bytes = size + kWorkspaceBytes, .compute_threads = 2})), pool(dev->make_host_pool(size)),
        host(pool->carve(size)), bytes(size) {
    dev->bind_workspace(at(size), kWorkspaceBytes);
  }
  std::byte* at(int64_t offset) const { return dev->arena().data() + offset; }
  void upload() {
    dev->copy(Stream::H2D, at(0), host, bytes, "upload");
    dev->wait(Stream::Compute, dev->record(Stream::H2D), "upload");
  }
  void download() {
    dev->wait(Stream::D2H, dev->record(Stream::Compute), "results");
    dev->copy(Stream::D2H, host, at(0), bytes, "download");
    dev->synchronize();
  }
  // An op's operands in this device's arena.
  struct Operands {
    std::vector<kernels::Operand> lists[4];
    ops::OpOperands view() const { return {lists[0], lists[1], lists[2], lists[3]}; }
  };
  Operands operands(const ModelSpec& spec, const SpecLayout& l, const OpSpec& op) const {
    Operands o;
    for (int t : op.inputs) o.lists[0].push_back({at(l.tensor[t]), spec.tensors[t].dtype});
    for (int t : op.outputs) o.lists[1].push_back({at(l.tensor[t]), spec.tensors[t].dtype});
    for (int p : op.params) o.lists[2].push_back({at(l.value(spec, p)), spec.precision});
    for (int p : op.params) o.lists[3].push_back({at(l.grad(spec, p)), spec.precision});
    return o;
  }
  // Runs the op; `write_gradients`: a backward op writes its activation gradients (writing_gradients).
  float run(const ModelSpec& spec, const SpecLayout& l, const OpSpec& op, float loss_weight = 1.0f,
            bool write_gradients = false) {
    float loss = 0;
    const Operands o = operands(spec, l, op);
    kernels::OpCall call = ops::decode_op(spec, op, o.view(), loss_weight);
    if (write_gradients) call = writing_gradients(std::move(call));
    dev->run_op(std::move(call), &loss, op.name);
    dev->synchronize();
    return loss;
  }
  std::vector<float> widened(int64_t offset, DType dtype, int64_t n) const {
    std::vector<float> out(static_cast<size_t>(n));
    memory::widen(out.data(), host + offset, dtype, n);
    return out;
  }
};

std::vector<DType> storage_of(const ModelSpec& spec, const OpSpec& op) {
  std::vector<DType> s;
  for (int t : op.inputs) s.push_back(spec.tensors[t].dtype);
  for (int t : op.outputs) s.push_back(spec.tensors[t].dtype);
  return s;
}

// Ids the op can take (below the vocabulary, BERT's -100 for unmasked targets, padding at the end of each
// sequence) and random floats, rounded to the storage, elsewhere.
void fill_random(std::byte* dst, const std::string& name, DType dtype, int64_t n, int vocab, int64_t seq, Rng& rng) {
  if (dtype == DType::I32) {
    auto* ids = reinterpret_cast<int32_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = static_cast<int32_t>(rng.below(vocab));
      if (name == "targets" && i % 3 == 1) ids[i] = -100;
      if (name == "attention_mask") ids[i] = i % seq < seq - 2 || seq < 3;  // the last two keys padded
    }
    return;
  }
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = static_cast<float>(rng.uniform() * 2 - 1);
  memory::narrow(dst, dtype, values.data(), n);
}

void fill_op_operands(std::byte* image, const ModelSpec& spec, const SpecLayout& l, const OpSpec& op, int vocab, uint64_t seed) {
  Rng rng(seed);
  const int64_t seq = op.attrs.seq > 0 ? op.attrs.seq : 1;
  for (int t : op.inputs) fill_random(image + l.tensor[t], spec.tensors[t].name, spec.tensors[t].dtype, numel(spec.tensors[t].shape), vocab, seq, rng);
  for (int t : op.outputs) fill_random(image + l.tensor[t], spec.tensors[t].name, spec.tensors[t].dtype, numel(spec.tensors[t].shape), vocab, seq, rng);
  for (int p : op.params) {
    const int64_t n = numel(spec.params[p].shape);
    fill_random(image + l.value(spec, p), spec.params[p].name, spec.precision, n, vocab, seq, rng);
    fill_random(image + l.grad(spec, p), spec.params[p].name, spec.precision, n, vocab, seq, rng);
  }
}

// The largest difference a stored result may show, relative to the largest entry of the host's: fp32 is
// the same math in another order (1e-4); a 2-byte result may round one way on one device and the other on
// the other, two units in the last place of the largest entry. Attention's backward is looser: the host
// reads the probabilities its forward rounded to the storage, the GPU recomputes them in fp32 from the
// log-sum-exp.
double tolerance(DType dtype, const OpSpec& op) {
  const double ulp = dtype == DType::BF16 ? 1.0 / 256 : dtype == DType::F16 ? 1.0 / 2048 : 0.0;
  if (ulp == 0) return 1e-4;
  const bool attention_backward = op.kind == models::OpKind::Attention && op.pass == models::Pass::Backward;
  return (attention_backward ? 8 : 2) * ulp;
}

// The saved probabilities of attention's forward (its second output) are each device's own form: the CPU's
// probabilities, the GPU's log-sum-exp. Compared through the backward, not bytewise.
bool device_specific(const OpSpec& op, size_t output) {
  return op.kind == models::OpKind::Attention && op.pass == models::Pass::Forward && output == 1;
}

// The forward op whose saved outputs `op` (attention's or cross-entropy's backward) reads.
const OpSpec& forward_of(const ModelSpec& spec, const OpSpec& op) {
  const std::string name = op.name.substr(0, op.name.size() - 4) + ".fwd";
  for (const OpSpec& f : spec.ops)
    if (f.name == name) return f;
  throw std::logic_error("no forward op " + name);
}

struct Shape {
  std::string kind;
  DType precision;
  int n_head, head_size, vocab;
  int64_t B, T;
  // Llama's: key/value heads (a divisor of n_head), the MLP's width, Qwen2's q/k/v biases, Llama 3's rope scaling.
  int kv_heads = 0, intermediate = 0;
  bool attention_bias = false, rope_scaled = false;
};

std::string describe(const Shape& s) {
  std::string d = s.kind + " " + to_string(s.precision) + " heads " + std::to_string(s.n_head) + "x" +
                  std::to_string(s.head_size) + " vocab " + std::to_string(s.vocab) + " batch " + std::to_string(s.B) +
                  "x" + std::to_string(s.T);
  if (s.kind == "llama")
    d += " kv heads " + std::to_string(s.kv_heads) + " mlp " + std::to_string(s.intermediate) +
         (s.attention_bias ? " q/k/v bias" : "") + (s.rope_scaled ? " llama3 rope" : "");
  return d;
}

models::ModelConfig model_of(const Shape& s) {
  models::ModelConfig m;
  m.kind = s.kind;
  m.n_layer = 1;
  m.n_head = s.n_head;
  m.n_embd = s.n_head * s.head_size;
  m.vocab_size = s.vocab;
  m.seq_len = static_cast<int>(s.T);
  if (s.kind == "llama") {
    m.n_kv_head = s.kv_heads;
    m.intermediate_size = s.intermediate;
    m.attention_bias = s.attention_bias;
    if (s.rope_scaled) m.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 16};  // positions past 16 / 4 take the scaled band
  }
  return m;
}

// Every op of one model shape on two devices, from the same random operands: `tested`'s results (the CUDA
// device's) within tolerance of the host device's. `write_gradients`: `tested`'s backward ops write their
// activation gradients over NaN while the host's add into zeros (an element skipped or read stays NaN there,
// and the comparison refuses a NaN against a number). Returns the (kind, pass) pairs covered.
std::set<std::pair<models::OpKind, models::Pass>> compare_every_op(const Shape& s, uint64_t seed,
                                                                   DeviceChoice::Kind tested,
                                                                   bool write_gradients = false) {
  const ModelSpec spec = models::build_model(model_of(s), s.B, s.T, s.precision);
  const SpecLayout layout(spec);
  Mirror host(DeviceChoice::Kind::Host, layout.bytes), cuda(tested, layout.bytes);
  std::vector<std::byte> image(static_cast<size_t>(layout.bytes));
  std::set<std::pair<models::OpKind, models::Pass>> covered;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    const std::string what = describe(s) + ", op " + op.name;
    const auto storage = storage_of(spec, op);
    EXPECT_TRUE(cuda.dev->supports_op(storage, op.inputs.size())) << what << ": the CUDA device does not run it";
    if (!cuda.dev->supports_op(storage, op.inputs.size())) continue;
    fill_op_operands(image.data(), spec, layout, op, s.vocab, seed * 1000 + i);
    float losses[2];
    int d = 0;
    const bool writing = write_gradients && op.pass == models::Pass::Backward;
    for (Mirror* m : {&host, &cuda}) {
      std::memcpy(m->host, image.data(), image.size());
      if (writing)  // all bits set: a NaN in fp32, bf16 and fp16
        for (int t : op.outputs)
          std::memset(m->host + layout.tensor[t], m == &cuda ? 0xff : 0, static_cast<size_t>(spec.tensors[t].bytes()));
      m->upload();
      // Attention's backward reads what its forward saved, in the device's own form, and cross-entropy's the
      // losses (the CUDA backward takes each row's log-sum-exp from them): run that forward first on the same
      // inputs (qkv, or q, k, v and the mask; the logits and targets), not on random operands.
      const bool reads_its_forward = op.kind == models::OpKind::Attention || op.kind == models::OpKind::CrossEntropy;
      if (reads_its_forward && op.pass == models::Pass::Backward) m->run(spec, layout, forward_of(spec, op));
      losses[d++] = m->run(spec, layout, op, 0.75f, writing && m == &cuda);
      m->download();
    }
    if (op.kind == models::OpKind::CrossEntropy && op.pass == models::Pass::Forward) {
      EXPECT_NEAR(losses[1], losses[0], (s.precision == DType::F32 ? 1e-5 : 1e-4) * std::abs(losses[0])) << what;
    }
    auto expect_close = [&](int64_t offset, DType dtype, int64_t n, const std::string& operand) {
      const auto want = host.widened(offset, dtype, n), got = cuda.widened(offset, dtype, n);
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_TRUE(std::isfinite(got[k]) == std::isfinite(want[k])) << what << ": " << operand << " element " << k;
      EXPECT_LE(testing::max_error_of_largest(got, want), tolerance(dtype, op)) << what << ": " << operand;
    };
    for (size_t k = 0; k < op.outputs.size(); ++k)
      if (!device_specific(op, k)) {
        const auto& t = spec.tensors[op.outputs[k]];
        expect_close(layout.tensor[op.outputs[k]], t.dtype, numel(t.shape), "output " + t.name);
      }
    if (op.pass == models::Pass::Backward)
      for (int p : op.params) expect_close(layout.grad(spec, p), spec.precision, numel(spec.params[p].shape), "gradient of " + spec.params[p].name);
    covered.insert({op.kind, op.pass});
  }
  return covered;
}

// Random shapes: head sizes and vocabularies that are no multiple of a warp or a vector width among them; for
// Llama, grouped-query attention (key/value heads a divisor of the heads, one of them among them), odd MLP widths,
// q/k/v biases and Llama 3's rope scaling, each on some shapes and not others.
std::vector<Shape> random_shapes(const std::string& kind, DType precision, uint64_t seed) {
  Rng rng(seed);
  std::vector<Shape> shapes{{kind, precision, 4, 16, 96, 2, 16}};  // a regular one first
  if (kind == "llama") shapes[0].kv_heads = 2, shapes[0].intermediate = 160;
  for (int i = 0; i < 3; ++i) {
    const int heads = 1 + static_cast<int>(rng.below(4));
    const int head_size = 4 + 2 * static_cast<int>(rng.below(15));  // 4..32, even
    const int vocab = 33 + 2 * static_cast<int>(rng.below(60));     // odd, 33..151
    Shape s{kind,
            precision,
            heads,
            head_size,
            vocab,
            1 + static_cast<int64_t>(rng.below(3)),
            3 + static_cast<int64_t>(rng.below(38))};
    if (kind == "llama") {
      s.kv_heads = heads % 2 == 0 && i != 1 ? heads / 2 : i == 1 ? 1 : heads;
      s.intermediate = 7 + 2 * static_cast<int>(rng.below(40));  // odd, 7..85
      s.attention_bias = i % 2 == 0;
      s.rope_scaled = i != 0;
    }
    shapes.push_back(s);
  }
  return shapes;
}

struct OpCase {
  std::string kind;
  DType precision;
};
// Printed in the test's name and its failures as "gpt2 bf16", not as the struct's bytes.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.kind << ' ' << to_string(c.precision); }

class CudaOps : public ::testing::TestWithParam<OpCase> {};

void expect_every_op_like_the_host(const OpCase& c, DeviceChoice::Kind tested, bool write_gradients = false) {
  // "Rope backward": printed by name where the two sets differ.
  const auto name = [](models::OpKind kind, models::Pass pass) {
    return std::string(to_string(kind)) + (pass == models::Pass::Forward ? " forward" : " backward");
  };
  std::set<std::string> covered, in_the_model;
  uint64_t seed = 1;
  for (const Shape& s : random_shapes(c.kind, c.precision, 17 + static_cast<uint64_t>(c.precision))) {
    SCOPED_TRACE(describe(s));
    for (const auto& [kind, pass] : compare_every_op(s, seed++, tested, write_gradients))
      covered.insert(name(kind, pass));
    for (const OpSpec& op : models::build_model(model_of(s), s.B, s.T, s.precision).ops)
      in_the_model.insert(name(op.kind, op.pass));
  }
  EXPECT_EQ(covered, in_the_model) << "every kind of the model's, forward and backward";
  EXPECT_EQ(in_the_model.size(), c.kind == "llama" ? 16u : 14u) << "the kinds a " << c.kind << " step has";
}

TEST_P(CudaOps, EveryOpMatchesTheHostDeviceOnRandomShapes) {
  REQUIRE_GPU();
  expect_every_op_like_the_host(GetParam(), DeviceChoice::Kind::Cuda);
}

// Backward told to write (accumulate false) over NaN on the GPU gives what the host adds into zeros.
TEST_P(CudaOps, EveryBackwardWritingItsGradientsMatchesTheHostAddingIntoZeros) {
  REQUIRE_GPU();
  expect_every_op_like_the_host(GetParam(), DeviceChoice::Kind::Cuda, true);
}

// The harness itself, with no GPU: a second host device in the CUDA device's place runs every op and shape
// and agrees (bitwise, so within any tolerance).
TEST(CudaOpsHarness, RunsEveryOpOnASecondHostDevice) {
  expect_every_op_like_the_host({"gpt2", DType::BF16}, DeviceChoice::Kind::Host);
  expect_every_op_like_the_host({"bert", DType::F32}, DeviceChoice::Kind::Host);
  expect_every_op_like_the_host({"llama", DType::BF16}, DeviceChoice::Kind::Host);
}

// The same with the second host device's backward ops writing their gradients over NaN: the CPU kernels honour
// `accumulate` as the CUDA ones must.
TEST(CudaOpsHarness, RunsEveryBackwardWritingItsGradientsOnASecondHostDevice) {
  expect_every_op_like_the_host({"gpt2", DType::BF16}, DeviceChoice::Kind::Host, true);
  expect_every_op_like_the_host({"bert", DType::F32}, DeviceChoice::Kind::Host, true);
  expect_every_op_like_the_host({"llama", DType::F32}, DeviceChoice::Kind::Host, true);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaOps,
                         ::testing::Values(OpCase{"gpt2", DType::F32}, OpCase{"gpt2", DType::BF16},
                                           OpCase{"gpt2", DType::F16}, OpCase{"bert", DType::F32},
                                           OpCase{"bert", DType::BF16}, OpCase{"bert", DType::F16},
                                           OpCase{"llama", DType::F32}, OpCase{"llama", DType::BF16},
                                           OpCase{"llama", DType::F16}),
                         [](const auto& info) { return info.param.kind + "_" + to_string(info.param.precision); });

// A whole model on the CUDA device, every tensor in its own place (the golden models are tiny): the batch,
// the weights, a forward and backward pass, and AdamW over one bucket of all parameters.
class DeviceModel {
 public:
  DeviceModel(const ModelSpec& spec, const models::ParameterStore& params, DeviceChoice::Kind kind)
      : spec_(spec), layout_(spec), cuda_(kind, layout_.bytes) {
    std::memset(cuda_.host, 0, static_cast<size_t>(layout_.bytes));
    for (int p = 0; p < static_cast<int>(spec.params.size()); ++p) {
      const auto values = params.value(p);
      memory::narrow(cuda_.host + layout_.value(spec, p), spec.precision, values.data(), static_cast<int64_t>(values.size()));
      std::memcpy(cuda_.host + layout_.master + layout_.param_slot[p] * 4, values.data(), values.size_bytes());
    }
  }
  void set_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, const std::vector<int32_t>& mask = {}) {
    for (size_t t = 0; t < spec_.tensors.size(); ++t) {
      const std::string& name = spec_.tensors[t].name;
      const std::vector<int32_t>* ids = name == "tokens" ? &tokens : name == "targets" ? &targets : name == "attention_mask" ? &mask : nullptr;
      if (!ids) continue;
      auto* dst = reinterpret_cast<int32_t*>(cuda_.host + layout_.tensor[t]);
      if (ids->empty()) std::fill_n(dst, numel(spec_.tensors[t].shape), 1);
      else std::copy(ids->begin(), ids->end(), dst);
    }
  }
  // Uploads the host image, runs the forward ops (and the backward ones) with every gradient zeroed first,
  // downloads the arena; returns the loss.
  float run(bool backward) {
    for (size_t t = 0; t < spec_.tensors.size(); ++t)
      if (spec_.tensors[t].is_grad) std::memset(cuda_.host + layout_.tensor[t], 0, static_cast<size_t>(spec_.tensors[t].bytes()));
    std::memset(cuda_.host + layout_.grads, 0, static_cast<size_t>(layout_.region_numel * dtype_bytes(spec_.precision)));
    cuda_.upload();
    float loss = 0;
    for (const OpSpec& op : spec_.ops)
      if (backward || op.pass == models::Pass::Forward) {
        const float l = cuda_.run(spec_, layout_, op);
        if (op.kind == models::OpKind::CrossEntropy && op.pass == models::Pass::Forward) loss = l;
      }
    cuda_.download();
    return loss;
  }
  // One AdamW step on the device over the gradients of the last run(true); the step's decision.
  cpu_optim::StepDecision adamw(const cpu_optim::AdamWHyper& hyper, int64_t step, double lr, float clip) {
    cpu_optim::StepDecision decision;
    const Device::OptimizerBucket bucket{reinterpret_cast<float*>(cuda_.at(layout_.master)), reinterpret_cast<float*>(cuda_.at(layout_.m)),
                                         reinterpret_cast<float*>(cuda_.at(layout_.v)),      cuda_.at(layout_.grads),
                                         spec_.precision,                                   cuda_.at(layout_.values),
                                         spec_.precision,                                   layout_.region_numel};
    cuda_.dev->adamw({bucket}, hyper, step, lr, clip, 1.0f, &decision, "adamw");
    cuda_.dev->synchronize();
    // The updated weights (working copy and master) stay on the device; the next run() uploads the host
    // image, so bring them back into it first.
    cuda_.download();
    return decision;
  }
  std::vector<float> tensor(const std::string& name) const {
    const int t = spec_.tensor_index(name);
    return cuda_.widened(layout_.tensor[t], spec_.tensors[t].dtype, numel(spec_.tensors[t].shape));
  }
  std::vector<float> grad(int p) const { return cuda_.widened(layout_.grad(spec_, p), spec_.precision, numel(spec_.params[p].shape)); }

 private:
  const ModelSpec& spec_;
  SpecLayout layout_;
  Mirror cuda_;
};

// A golden reference (logits, loss, every gradient, AdamW steps) and the model it was made from: GPT-2's and
// BERT's from their committed weights, the Llama family's (llama_tiny: grouped-query attention, its own head,
// Llama 3's rope scaling; qwen2_tiny: q/k/v biases, tied head) from a Hugging Face folder, as model.init_from
// reads one.
struct GoldenCase {
  std::string model;  // gpt2 | bert | llama_tiny | qwen2_tiny
  formats::SafetensorsFile ref;
  ModelSpec spec;
  std::vector<int32_t> tokens, targets, mask;
  std::string logits;  // the logits tensor's name in the spec

  explicit GoldenCase(const std::string& kind)
      : model(kind), ref(formats::SafetensorsFile::open(testing::data_path(reference_name(kind)))) {
    const int64_t B = ref.find("input_ids")->shape[0], T = ref.find("input_ids")->shape[1];
    tokens = ref.read_i32("input_ids");
    if (kind == "bert") {
      const nlohmann::json cfg = nlohmann::json::parse(ref.metadata().at("config"));
      spec = models::build_bert({cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["hidden_size"], cfg["vocab_size"],
                                 cfg["max_position_embeddings"], cfg["intermediate_size"]},
                                B, T);
      targets = ref.read_i32("labels");
      mask = ref.read_i32("attention_mask");
      logits = "head.decoder.out";
      return;
    }
    targets = ref.read_i32("targets");
    logits = "lm_head.out";
    if (kind == "gpt2") {
      const nlohmann::json cfg = nlohmann::json::parse(ref.metadata().at("config"));
      spec = models::build_gpt2({cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]},
                                B, T);
    } else {
      spec = models::build_model(llama_config(), B, T);
    }
  }
  static std::string reference_name(const std::string& kind) {
    return kind + (kind == "gpt2" || kind == "bert" ? "_tiny" : "") + "_reference.safetensors";
  }
  // The Llama family's model section, filled from its folder's config.json.
  models::ModelConfig llama_config() const {
    models::ModelConfig m;
    m.init_from = testing::data_path("hf_" + model);
    formats::apply_hf_config(m, {});
    return m;
  }
  void load_weights(models::ParameterStore& params) const {
    if (model == "gpt2" || model == "bert")
      formats::load_weights(formats::SafetensorsFile::open(testing::data_path(model + "_tiny.safetensors")), spec,
                            params);
    else formats::load_weights(llama_config().init_from, spec, params);
  }
};

// Logits, loss and every gradient against transformers, at the CPU golden tests' tolerances for the
// storage (tests/models/test_*_golden.cpp says where they come from).
void expect_golden_pass(const std::string& kind, DType precision, DeviceChoice::Kind device) {
  GoldenCase g(kind);
  models::ParameterStore params(g.spec.params);
  g.load_weights(params);
  ModelSpec spec = g.spec;
  spec.set_precision(precision);
  DeviceModel model(spec, params, device);
  model.set_batch(g.tokens, g.targets, g.mask);
  const bool fp32 = precision == DType::F32;
  const float loss = model.run(true);
  const float want = g.ref.read_f32("loss")[0];
  EXPECT_NEAR(loss, want, (fp32 ? 1e-4 : 2e-3) * want) << kind << " " << to_string(precision);
  // The engine's logits and vocabulary tables have the padded vocabulary's rows (models/vocab.h); transformers' V.
  const auto logits = testing::real_logits(model.tensor(g.logits), spec, g.logits);
  const auto want_logits = g.ref.read_f32("logits");
  EXPECT_LT(fp32 ? testing::max_rel_error(logits, want_logits, 1e-2) : testing::max_error_of_largest(logits, want_logits), fp32 ? 1e-4 : 2e-2)
      << kind << " " << to_string(precision) << " logits";
  const double tolerance = fp32 ? 1e-3 : 5e-2;
  for (int p = 0; p < static_cast<int>(spec.params.size()); ++p) {
    const std::string& name = spec.params[p].name;
    if (name.ends_with("attention.self.key.bias")) {
      // Zero in exact arithmetic (a key bias shifts a query's scores by a constant, which the softmax
      // ignores): rounding noise, held to the tolerance relative to the key weight's largest gradient.
      double key_weight = 0;
      for (float x : g.ref.read_f32("grad." + name.substr(0, name.size() - 4) + "weight")) key_weight = std::max(key_weight, double(std::abs(x)));
      for (float x : testing::real_grad(spec, model.grad(p), p))
        EXPECT_LT(std::abs(x), tolerance * key_weight) << kind << " " << to_string(precision) << " " << name;
      continue;
    }
    const std::vector<float> grad = testing::real_grad(spec, model.grad(p), p);
    EXPECT_LT(testing::max_error_of_largest(grad, g.ref.read_f32("grad." + name)), tolerance)
        << kind << " " << to_string(precision) << " gradient of " << name;
  }
}

TEST(CudaGolden, Gpt2LogitsLossAndGradientsMatchTransformers) {
  REQUIRE_GPU();
  for (DType precision : {DType::F32, DType::BF16}) expect_golden_pass("gpt2", precision, DeviceChoice::Kind::Cuda);
}

TEST(CudaGolden, BertLogitsLossAndGradientsMatchTransformers) {
  REQUIRE_GPU();
  for (DType precision : {DType::F32, DType::BF16}) expect_golden_pass("bert", precision, DeviceChoice::Kind::Cuda);
}

// Grouped-query attention through the device's attention (cuDNN SDPA in bf16 where it loads, the flash kernel
// otherwise: FERRY_ATTENTION=flash runs the second), RoPE with Llama 3's scaling, RMSNorm, SwiGLU, q/k/v biases.
TEST(CudaGolden, LlamaAndQwen2LogitsLossAndGradientsMatchTransformers) {
  REQUIRE_GPU();
  for (const char* kind : {"llama_tiny", "qwen2_tiny"})
    for (DType precision : {DType::F32, DType::BF16}) expect_golden_pass(kind, precision, DeviceChoice::Kind::Cuda);
}

// The golden replay itself, on the host device: the same runner there meets the same references.
TEST(CudaGoldenHarness, ReplaysTheGoldensOnTheHostDevice) {
  for (const char* kind : {"gpt2", "bert", "llama_tiny", "qwen2_tiny"})
    for (DType precision : {DType::F32, DType::BF16}) expect_golden_pass(kind, precision, DeviceChoice::Kind::Host);
}

// The device AdamW with clipping, step after step, against torch.optim.AdamW's losses and gradient norms
// (tests/golden_helpers.h does the same on the CPU path).
void expect_adamw_like_torch(DeviceChoice::Kind device) {
  for (const char* kind : {"gpt2", "bert", "llama_tiny", "qwen2_tiny"}) {
    GoldenCase g(kind);
    models::ParameterStore params(g.spec.params);
    g.load_weights(params);
    DeviceModel model(g.spec, params, device);
    model.set_batch(g.tokens, g.targets, g.mask);
    const nlohmann::json adamw = nlohmann::json::parse(g.ref.metadata().at("adamw"));
    const float clip = std::stof(g.ref.metadata().at("grad_clip"));
    const cpu_optim::AdamWHyper hyper{adamw["lr"], adamw["beta1"], adamw["beta2"], adamw["eps"], adamw["weight_decay"]};
    const auto losses = g.ref.read_f32("adamw_losses");
    const auto norms = g.ref.read_f32("adamw_grad_norms");
    for (int step = 1; step <= static_cast<int>(norms.size()); ++step) {
      const float loss = model.run(true);
      EXPECT_NEAR(loss, losses[step - 1], 1e-4 * losses[step - 1]) << kind << " before step " << step;
      const cpu_optim::StepDecision d = model.adamw(hyper, step, hyper.lr, clip);
      EXPECT_FALSE(d.report.skipped) << kind << " step " << step;
      EXPECT_NEAR(d.report.grad_norm, norms[step - 1], 1e-3 * norms[step - 1]) << kind << " grad norm at step " << step;
    }
    EXPECT_NEAR(model.run(false), losses.back(), 1e-4 * losses.back()) << kind << " after the last step";
  }
}

TEST(CudaGolden, AdamWStepsWithClippingMatchTorch) {
  REQUIRE_GPU();
  expect_adamw_like_torch(DeviceChoice::Kind::Cuda);
}

TEST(CudaGoldenHarness, AdamWStepsOnTheHostDeviceMatchTorch) { expect_adamw_like_torch(DeviceChoice::Kind::Host); }

}  // namespace
}  // namespace ferry::device
