// Loading model weights by Hugging Face name from a safetensors file into a ParameterStore: the layouts
// people ship (GPT2LMHeadModel, GPT2Model, BertForMaskedLM, BertForPreTraining, BertModel, LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, LlamaModel) all load.
#pragma once

#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::formats {

struct LoadOptions {
  std::vector<std::string> init_missing;  // entries of models::kInitMissingParts (model.init_missing)
  // Where a parameter whose view is empty goes (its values live elsewhere: the device tier, on the device only),
  // handed its values read as fp32; unset, such a parameter is not read.
  std::function<void(int param, std::span<const float> values)> store{};
};

// Every parameter of the spec must be present with its exact shape, unless it belongs to a part named in
// options.init_missing; a missing, extra or misshapen tensor is an error naming it. Names are matched with or
// without the base model's prefix ('transformer.', 'bert.', 'model.'): a checkpoint holding both forms of one tensor
// is an error naming both. Tensors that are not parameters in HF checkpoints (the tied lm_head.weight,
// GPT-2's attention mask buffers, BERT's pooler and next-sentence head) are accepted and ignored.
// Only the tensors found are written; returns the names of the parameters that were not (each allowed by
// options.init_missing), so their views keep what they held.
// Into one fp32 view per parameter (spec.params order): a ParameterStore's, or the host buckets' masters.
std::vector<std::string> load_weights(const SafetensorsFile& file, const models::ModelSpec& spec,
                                      std::span<const std::span<float>> values, const LoadOptions& options = {});
std::vector<std::string> load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, models::ParameterStore& store,
                                      const LoadOptions& options = {});

// The parameter of `spec` a checkpoint's tensor name is (with or without the base model's prefix, old
// LayerNorm names); empty when it is none (a pooler, a buffer, a tied copy).
std::string parameter_of(const std::string& checkpoint_name, const models::ModelSpec& spec);

// The weights files a path names, as Hugging Face writes them: a .safetensors file; a folder's
// model.safetensors, or the shards its model.safetensors.index.json lists; or such an index itself. Each
// file of a folder is checked as formats/model_folder.h says (a regular file that stays inside it); `what`
// names the path in errors ("model.init_from", "--source").
struct WeightFiles {
  std::filesystem::path folder;  // where its config.json and tokenizer files are; empty for a bare file of another name
  std::vector<std::filesystem::path> files;
};
WeightFiles weight_files(const std::filesystem::path& path, const std::string& what);

// load_weights from a path (weight_files; errors name it as model.init_from), one file in memory at a time.
std::vector<std::string> load_weights(const std::filesystem::path& path, const models::ModelSpec& spec,
                                      std::span<const std::span<float>> values, const LoadOptions& options = {});
std::vector<std::string> load_weights(const std::filesystem::path& path, const models::ModelSpec& spec,
                                      models::ParameterStore& store, const LoadOptions& options = {});

}  // namespace ferry::formats
