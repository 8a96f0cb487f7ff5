// Loading model weights by Hugging Face name from a safetensors file into a ParameterStore.
#pragma once

#include <filesystem>
#include <span>

#include "formats/safetensors.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::formats {

// Every parameter of the spec must be present with its exact shape; a missing, extra or misshapen tensor
// is an error naming it. Tensors that are not parameters in HF checkpoints (the tied lm_head.weight,
// GPT-2's attention mask buffers) are accepted and ignored.
// Into one fp32 view per parameter (spec.params order): a ParameterStore's, or the host buckets' masters.
void load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, std::span<const std::span<float>> values);
void load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, models::ParameterStore& store);

// The same from a path: a .safetensors file, a folder holding model.safetensors, or a sharded checkpoint
// (model.safetensors.index.json and the shards its weight_map names), as Hugging Face writes them.
void load_weights(const std::filesystem::path& path, const models::ModelSpec& spec, std::span<const std::span<float>> values);
void load_weights(const std::filesystem::path& path, const models::ModelSpec& spec, models::ParameterStore& store);

}  // namespace ferry::formats
