// run_cpu_op on operands stored in bf16/fp16: every op kind and pass of GPT-2 and BERT gives, bit for bit,
// what widening each operand, running the fp32 op and rounding the results to nearest even gives; fp32
// operands are used in place, without the Storage workspace.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "memory/convert.h"
#include "models/cpu_op.h"
#include "models/ops/workspace.h"
#include "models/registry.h"
#include "models/rng.h"
#include "test_helpers.h"

namespace ferry::models {
namespace {

constexpr int kVocab = 96;

// One operand's bytes, in its storage dtype.
struct Buffer {
  std::vector<std::byte> bytes;
  DType dtype;
  int64_t n;
  Operand operand() { return {bytes.data(), dtype}; }
};

// Every operand of an op, by list (inputs, outputs, values, grads), in the order the op's slots take them.
struct OperandSet {
  std::vector<Buffer> lists[4];
  std::vector<Operand> views[4];
  OpOperands operands() {
    for (int l = 0; l < 4; ++l) {
      views[l].clear();
      for (Buffer& b : lists[l]) views[l].push_back(b.operand());
    }
    return {views[0], views[1], views[2], views[3]};
  }
};

// Ids the op can take (tokens and targets below the vocabulary, BERT's -100 for unmasked targets, padding
// at the end of each sequence), and random floats, rounded to the storage, everywhere else.
Buffer random_buffer(const std::string& name, DType dtype, int64_t n, Rng& rng) {
  Buffer b{std::vector<std::byte>(static_cast<size_t>(n * dtype_bytes(dtype))), dtype, n};
  if (dtype == DType::I32) {
    auto* ids = reinterpret_cast<int32_t*>(b.bytes.data());
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = static_cast<int32_t>(rng.below(kVocab));
      if (name == "targets" && i % 3 == 1) ids[i] = -100;
      if (name == "attention_mask") ids[i] = i % 8 < 6;
    }
    return b;
  }
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = static_cast<float>(rng.uniform() * 2 - 1);
  memory::narrow(b.bytes.data(), dtype, values.data(), n);
  return b;
}

OperandSet random_operands(const ModelSpec& spec, const OpSpec& op, uint64_t seed) {
  Rng rng(seed);
  OperandSet set;
  for (int l = 0; l < 2; ++l)
    for (int t : l == 0 ? op.inputs : op.outputs) {
      const TensorSpec& ts = spec.tensors[t];
      set.lists[l].push_back(random_buffer(ts.name, ts.dtype, numel(ts.shape), rng));
    }
  for (int l = 2; l < 4; ++l)  // values, then gradients with contents to accumulate onto
    for (int p : op.params) set.lists[l].push_back(random_buffer(spec.params[p].name, spec.precision, numel(spec.params[p].shape), rng));
  return set;
}

// The reference's operands: each floating one widened to fp32, ids as they are.
OperandSet widened(const OperandSet& stored) {
  OperandSet wide;
  for (int l = 0; l < 4; ++l)
    for (const Buffer& b : stored.lists[l]) {
      if (b.dtype == DType::I32) {
        wide.lists[l].push_back(b);
        continue;
      }
      Buffer w{std::vector<std::byte>(static_cast<size_t>(b.n * 4)), DType::F32, b.n};
      memory::widen(reinterpret_cast<float*>(w.bytes.data()), b.bytes.data(), b.dtype, b.n);
      wide.lists[l].push_back(std::move(w));
    }
  return wide;
}

// Rounds the reference's fp32 operand to `stored`'s dtype; its bytes must equal what run_cpu_op left there.
bool same_after_rounding(const Buffer& stored, const Buffer& reference) {
  std::vector<std::byte> rounded(stored.bytes.size());
  if (stored.dtype == DType::I32) rounded = reference.bytes;
  else memory::narrow(rounded.data(), stored.dtype, reinterpret_cast<const float*>(reference.bytes.data()), stored.n);
  return std::memcmp(rounded.data(), stored.bytes.data(), rounded.size()) == 0;
}

using Case = std::pair<std::string, DType>;  // model kind, storage precision

class StoredOps : public ::testing::TestWithParam<Case> {};

TEST_P(StoredOps, EqualWidenRunFp32ThenRoundBitwise) {
  const auto& [kind, precision] = GetParam();
  const ModelSpec spec = build_model({kind, 2, 4, 32, kVocab, 16, {}}, 2, 16, precision);
  std::set<std::pair<OpKind, Pass>> covered;
  const char* lists[] = {"input", "output", "parameter", "gradient"};
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    OperandSet stored = random_operands(spec, op, 100 + i);
    OperandSet reference = widened(stored);
    const float loss = run_cpu_op(spec, op, stored.operands(), 0.75f);
    const float reference_loss = run_cpu_op(spec, op, reference.operands(), 0.75f);
    EXPECT_EQ(std::memcmp(&loss, &reference_loss, sizeof loss), 0) << op.name;
    // Every operand: what the op reads must be untouched, what it writes rounded from the fp32 result.
    for (int l = 0; l < 4; ++l)
      for (size_t k = 0; k < stored.lists[l].size(); ++k)
        EXPECT_TRUE(same_after_rounding(stored.lists[l][k], reference.lists[l][k])) << op.name << ": " << lists[l] << " " << k;
    covered.insert({op.kind, op.pass});
  }
  EXPECT_EQ(covered.size(), 14u) << "every kind, forward and backward";
}

INSTANTIATE_TEST_SUITE_P(Models, StoredOps,
                         ::testing::Values(Case{"gpt2", DType::BF16}, Case{"gpt2", DType::F16}, Case{"bert", DType::BF16},
                                           Case{"bert", DType::F16}),
                         [](const auto& info) { return info.param.first + "_" + to_string(info.param.second); });

// The Storage workspace a fresh thread holds after running every op of a spec stored in `precision`.
int64_t storage_workspace_after_a_step(DType precision) {
  const ModelSpec spec = build_model({"gpt2", 1, 2, 32, kVocab, 16, {}}, 1, 16, precision);
  int64_t bytes = -1;
  std::thread([&] {
    for (size_t i = 0; i < spec.ops.size(); ++i) {
      OperandSet operands = random_operands(spec, spec.ops[i], i);
      run_cpu_op(spec, spec.ops[i], operands.operands(), 1.0f);
    }
    bytes = ops::workspace_bytes(ops::Scratch::Storage);
  }).join();
  return bytes;
}

TEST(StoredOps, Fp32OperandsAreUsedInPlace) {
  EXPECT_EQ(storage_workspace_after_a_step(DType::F32), 0);
  EXPECT_GT(storage_workspace_after_a_step(DType::BF16), 0);  // the same ops, staged
}

// Storage the op's slots cannot take is refused before anything is staged or written, naming the op.
TEST(StoredOps, MixedStorageIsRefusedNamingTheOp) {
  const ModelSpec spec = build_model({"gpt2", 1, 2, 32, kVocab, 16, {}}, 1, 16, DType::BF16);
  const OpSpec& op = spec.ops[1];  // h.0.ln_1.fwd: [x] -> [y, mean, rstd]
  OperandSet operands = random_operands(spec, op, 1);
  Rng rng(2);
  operands.lists[2][0] = random_buffer("w", DType::F16, operands.lists[2][0].n, rng);
  try {
    run_cpu_op(spec, op, operands.operands(), 1.0f);
    ADD_FAILURE() << "an fp16 weight among bf16 operands was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("op " + op.name), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry::models
