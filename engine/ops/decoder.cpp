// Decoder: the model's forward ops for one token, with attention, the rotary angles and GPT-2's position table
// taken from the key/value cache's length instead of the token's place in a one-token sequence.
#include "engine/ops/decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"

namespace ferry::ops {

using models::OpKind;
using models::OpSpec;
using models::Pass;

Decoder::Decoder(const models::ModelConfig& config, models::ParameterStore& params)
    : config_(config), spec_(models::build_model(config, 1, 1)), params_(params) {
  if (config.kind != "gpt2" && config.kind != "llama")
    throw std::invalid_argument("decoding needs a causal LM (model.kind gpt2 or llama), not " + config.kind);
  if (params.count() != static_cast<int>(spec_.params.size()))
    throw std::invalid_argument("the weights hold " + std::to_string(params.count()) + " tensors; the model has " +
                                std::to_string(spec_.params.size()));
  runner_ = std::make_unique<CpuRunner>(spec_, params_);
  logits_tensor_ = spec_.tensor_index("lm_head.out");
  const int64_t kv_width = int64_t{config.kv_heads()} * (config.n_embd / config.n_head);
  keys_.assign(static_cast<size_t>(config.n_layer), std::vector<float>(static_cast<size_t>(capacity() * kv_width)));
  values_ = keys_;
}

std::span<const float> Decoder::step(int32_t token) {
  if (position_ >= capacity())
    throw std::out_of_range("the key/value cache holds " + std::to_string(capacity()) +
                            " positions (model.seq_len), all taken: reset() and feed the text's end again");
  if (token < 0 || token >= config_.vocab_size)
    throw std::out_of_range("token " + std::to_string(token) + " is outside the vocabulary of " +
                            std::to_string(config_.vocab_size));
  for (const OpSpec& op : spec_.ops) {
    if (op.pass != Pass::Forward || op.kind == OpKind::CrossEntropy) continue;
    if (op.kind == OpKind::Embedding) embed(op, token);
    else if (op.kind == OpKind::Rope) rotate(op);
    else if (op.kind == OpKind::Attention) attend(op);
    else runner_->run_op(op);
  }
  ++position_;
  // The first V of the padded vocabulary's logits, read in place (the spec is fp32).
  return {reinterpret_cast<const float*>(runner_->data(logits_tensor_)), static_cast<size_t>(config_.vocab_size)};
}

// GPT-2's token and position tables (the row of this position); Llama's token table alone.
void Decoder::embed(const OpSpec& op, int32_t token) {
  const int64_t C = op.attrs.in;
  const float* wpe = op.params.size() > 1 ? params_.value(op.params[1]).data() + position_ * C : nullptr;
  kernels::cpu::embedding_forward(reinterpret_cast<float*>(runner_->data(op.outputs[0])), &token,
                                  params_.value(op.params[0]).data(), wpe, 1, 1, C);
}

void Decoder::rotate(const OpSpec& op) {
  const models::OpAttrs& a = op.attrs;
  const kernels::cpu::RopeShape shape{1, 1, a.heads, a.in / a.heads, a.in, a.rope, position_};
  kernels::cpu::rope_forward(reinterpret_cast<float*>(runner_->data(op.outputs[0])),
                             reinterpret_cast<const float*>(runner_->data(op.inputs[0])), shape);
}

// This position's keys and values into the layer's cache, then the query against every position so far.
void Decoder::attend(const OpSpec& op) {
  const models::OpAttrs& a = op.attrs;
  const int64_t C = a.in, hs = C / a.heads, KV = a.kv_heads > 0 ? a.kv_heads : a.heads, kv_width = KV * hs;
  const auto* q = reinterpret_cast<const float*>(runner_->data(op.inputs[0]));
  const bool packed = op.inputs.size() == 1;  // GPT-2's [q | k | v]
  const float* k = packed ? q + C : reinterpret_cast<const float*>(runner_->data(op.inputs[1]));
  const float* v = packed ? q + 2 * C : reinterpret_cast<const float*>(runner_->data(op.inputs[2]));
  std::vector<float>& keys = keys_.at(static_cast<size_t>(op.layer));
  std::vector<float>& values = values_.at(static_cast<size_t>(op.layer));
  std::copy_n(k, kv_width, keys.begin() + position_ * kv_width);
  std::copy_n(v, kv_width, values.begin() + position_ * kv_width);
  kernels::cpu::attention_decode(reinterpret_cast<float*>(runner_->data(op.outputs[0])), q, keys.data(), values.data(),
                                 position_ + 1, a.heads, KV, hs);
}

}  // namespace ferry::ops
