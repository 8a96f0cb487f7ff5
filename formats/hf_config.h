// The config.json a Hugging Face model folder carries beside its weights, read into the experiment's model
// section: it gives the shape and numeric choices, the YAML overrides only what it states, and what Ferry's
// models do not compute is refused by name.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/registry.h"

namespace ferry::formats {

// The config.json that goes with model.init_from: in the folder it names, or beside a model.safetensors or
// model.safetensors.index.json it names. Empty when there is none (a bare .safetensors file).
std::filesystem::path hf_config_path(const std::filesystem::path& init_from);

// Fills `model` from its init_from's config.json, if there is one (GPT2Config or BertConfig keys: layers,
// heads, hidden, intermediate size, LayerNorm epsilon, activation, positions, vocabulary, token types;
// LlamaConfig's, MistralConfig's and Qwen2Config's: key/value heads, RMSNorm epsilon, rope_theta and
// rope_scaling (transformers 4) or rope_parameters (5), tied head, attention bias; model_type sets the kind). `stated`
// lists the model-section keys the YAML gives ("n_layer", "seq_len",
// ...): those keep their value, and those that differ from config.json's are one error naming, for each, the
// config.json key and value, the YAML key and value, and the fix. Keys config.json lacks keep the model
// section's value.
// Throws std::runtime_error for a file that is not a JSON object, a value of the wrong type or out of
// range, another model_type, and what Ferry's models cannot compute (an activation other than GELU's two
// forms, position_embedding_type other than absolute, a decoder or cross-attention, an untied LM head,
// GPT-2's attention without 1/sqrt(head) scaling or scaled by layer index; for the Llama family an activation
// other than silu, rope types other than default and llama3, mixture-of-experts keys, a sliding window
// shorter than model.seq_len, MLP biases, a head_dim other than hidden_size / num_attention_heads).
void apply_hf_config(models::ModelConfig& model, const std::vector<std::string>& stated);

// The Hugging Face name of a model.activation, for config.json: gelu, or gelu_new for gelu_tanh.
std::string hf_activation_name(const std::string& activation);

}  // namespace ferry::formats
