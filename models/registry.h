// The model registry: the shape a config names (model.kind: gpt2 | bert) as a ModelSpec, and its
// initial weights. Every caller builds models through here, so a new kind is added in one place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::models {

// The `model:` section of an experiment: the architecture and its shape.
struct ModelConfig {
  std::string kind = "gpt2";
  int n_layer = 2;
  int n_head = 4;
  int n_embd = 64;
  int vocab_size = 256;
  int seq_len = 64;
  std::filesystem::path init_from;  // Hugging Face weights to start from (file, folder or sharded index)
};

// The op list of one step on `batch` sequences of `seq` tokens, its tensors stored in `precision`.
ModelSpec build_model(const ModelConfig& model, int64_t batch, int64_t seq, DType precision = DType::F32);
// The architecture's own initialisation (GPT-2's or BERT's), deterministic in `seed`, into one fp32 view per
// parameter (spec.params order): a ParameterStore's, or the host buckets' master weights.
void init_model(const ModelConfig& model, const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed);
void init_model(const ModelConfig& model, const ModelSpec& spec, ParameterStore& params, uint64_t seed);

}  // namespace ferry::models
