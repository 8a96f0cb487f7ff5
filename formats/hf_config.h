// The config.json a Hugging Face model folder carries beside its weights, checked against the experiment's
// model section: weights of another shape, or made to compute something Ferry does not, are refused.
#pragma once

#include <filesystem>

#include "models/registry.h"

namespace ferry::formats {

// The config.json that goes with model.init_from: in the folder it names, or beside a model.safetensors or
// model.safetensors.index.json it names. Empty when there is none (a bare .safetensors file).
std::filesystem::path hf_config_path(const std::filesystem::path& init_from);

// Throws std::runtime_error when `model`'s config.json (if any) disagrees with the model section (naming the
// config.json key and value and the YAML key and value), is of another model_type, or asks for what Ferry's
// model cannot compute yet: an intermediate size other than 4 * hidden, another LayerNorm epsilon (GPT-2
// 1e-5, BERT 1e-12) or activation (GPT-2 gelu_new, BERT gelu).
void check_hf_config(const models::ModelConfig& model);

}  // namespace ferry::formats
