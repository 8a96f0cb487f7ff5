// `ferry export`: a checkpoint's weights as a Hugging Face model folder (model.safetensors + config.json)
// that transformers' GPT2LMHeadModel.from_pretrained loads.
#pragma once

#include <cstdint>
#include <filesystem>

namespace ferry::formats {

struct ExportedCheckpoint {
  std::filesystem::path folder;  // the checkpoint folder read (the newest, when given a checkpoint dir)
  int64_t step = 0;
  bool verified = false;  // its checksums matched; false for a checkpoint of an earlier build (none recorded)
};

// `checkpoint` is a checkpoint folder or a checkpoint dir; its model.safetensors is checked against the
// checksum state.json records before anything is written.
ExportedCheckpoint export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out);

}  // namespace ferry::formats
