// Decoder: a causal LM (GPT-2, the Llama family) one token at a time with a key/value cache, for sampling.
// It runs the forward ops of the model's own ModelSpec built for one token, on the CPU's fp32 ops, except
// that attention reads the keys and values of every earlier position from the cache and positions (GPT-2's
// table, the rotary angles) count from the cache's length: the model is defined once, by its builder.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/ops/cpu_runner.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"
#include "models/registry.h"

namespace ferry::ops {

class Decoder {
 public:
  // `params` holds the model's fp32 weights as build_model(config, ...) lays them out; it must outlive this.
  Decoder(const models::ModelConfig& config, models::ParameterStore& params);

  // Feeds `token` at the next position and returns the logits there over the vocabulary's V ids (not the
  // engine's padded rows), valid until the next call (they are the model's own output tensor). Throws when the cache is
  // full (capacity()).
  std::span<const float> step(int32_t token);
  int64_t position() const { return position_; }        // tokens fed since the start or the last reset()
  int64_t capacity() const { return config_.seq_len; }  // positions the model has
  void reset() { position_ = 0; }                       // forget the cache: the next token is at position 0

 private:
  void embed(const models::OpSpec& op, int32_t token);
  void rotate(const models::OpSpec& op);
  void attend(const models::OpSpec& op);

  models::ModelConfig config_;
  models::ModelSpec spec_;  // one sequence of one token
  models::ParameterStore& params_;
  std::unique_ptr<CpuRunner> runner_;
  std::vector<std::vector<float>> keys_, values_;  // per layer: (capacity, kv heads x head size)
  int logits_tensor_ = -1;                         // lm_head.out: (1, 1, the padded vocabulary), in fp32
  int64_t position_ = 0;
};

}  // namespace ferry::ops
