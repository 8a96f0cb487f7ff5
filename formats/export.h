// `ferry export`: a checkpoint's weights as a Hugging Face model folder (model.safetensors + config.json)
// that transformers' GPT2LMHeadModel.from_pretrained loads.
#pragma once

#include <filesystem>

namespace ferry::formats {

void export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out);

}  // namespace ferry::formats
