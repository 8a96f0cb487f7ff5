// `ferry export`: a checkpoint's weights as a Hugging Face model folder (model.safetensors, config.json and
// the tokenizer files) that transformers loads as GPT2LMHeadModel or BertForMaskedLM (and their base models).
// A run that started from model.init_from round-trips: see formats/hf_source.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry::formats {

struct ExportOptions {
  // The Hugging Face model the run started from: unset, the model.init_from its state.json records; an empty
  // path, none (the export then holds Ferry's tensors and a config.json of Hugging Face's defaults only).
  std::optional<std::filesystem::path> source;
};

struct ExportedCheckpoint {
  std::filesystem::path folder;  // the checkpoint folder read (the newest, when given a checkpoint dir)
  int64_t step = 0;
  bool verified = false;  // its checksums matched; false for a checkpoint of an earlier build (none recorded)
  std::filesystem::path source;          // the model whose untrained tensors and settings were carried over; empty: none
  std::vector<std::string> carried;      // those tensors, by their exported names
  std::vector<std::string> files;        // the files written
  std::string note;                      // what the export lacks, when it does (no tokenizer files, ...)
};

// `checkpoint` is a checkpoint folder or a checkpoint dir; its model.safetensors is checked against the
// checksum state.json records before anything is written.
ExportedCheckpoint export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                                     const ExportOptions& options = {});

}  // namespace ferry::formats
