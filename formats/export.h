// `ferry export`: a model as a Hugging Face folder (model.safetensors or its shards, config.json and the
// tokenizer files) that transformers loads as GPT2LMHeadModel, BertForMaskedLM (and their base models),
// LlamaForCausalLM or Qwen2ForCausalLM (with generation_config.json): a checkpoint's
// weights, or those a run starts from (no step trained). A model from model.init_from round-trips: see
// formats/hf_source.h. Files already in the folder are never deleted.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "models/registry.h"

namespace ferry::formats {

struct ExportOptions {
  // The Hugging Face model the run started from: unset, the model.init_from its state.json records; an empty
  // path, none (the export then holds Ferry's tensors and a config.json of Hugging Face's defaults only).
  std::optional<std::filesystem::path> source;
  // A folder that holds files already: false refuses it; true replaces the files this export writes there
  // and keeps every other.
  bool overwrite = false;
  // The largest weights file: a model larger is written as shards (model-00001-of-0000N.safetensors) with
  // model.safetensors.index.json, as save_pretrained does at its max_shard_size of 5 GB.
  int64_t max_shard_bytes = 5'000'000'000;
};

struct ExportReport {
  std::filesystem::path folder;  // the checkpoint folder read (the newest, when given a checkpoint dir); empty: a starting point
  int64_t step = 0;
  bool verified = false;  // its checksums matched; false for a checkpoint of an earlier build (none recorded)
  std::filesystem::path source;          // the model whose untrained tensors, settings and files were carried over; empty: none
  std::vector<std::string> carried;      // those tensors, by their exported names
  std::vector<std::string> files;        // every file written, by its path in the export
  std::vector<std::string> carried_files;  // those of them copied from the source folder as they are (modules.json, ...)
  std::vector<std::string> left_out;     // the source folder's files not carried, each with why ("onnx/ (...)")
  std::vector<std::string> replaced;     // written files that replaced one of the same name (overwrite)
  std::vector<std::string> kept;         // what the folder held that this export did not write, kept as it was
  std::vector<std::string> initialised;  // a starting point's parameters init_from lacks (model.init_missing): the seed's
  std::string note;                      // what the export lacks, when it does (no tokenizer files, ...)
};

// `checkpoint` is a checkpoint folder or a checkpoint dir; its model.safetensors is checked against the
// checksum state.json records before anything is written.
ExportReport export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                               const ExportOptions& options = {});

// What a run starts from: the model (its init_from and init_missing), the seed of its initialisation, and the
// tokenizer that makes its tokens, as its checkpoints record it.
struct StartingPoint {
  models::ModelConfig model;
  uint64_t seed = 0;
  std::string tokenizer = "byte";  // byte | gpt2 | wordpiece | hf | unknown
  TrainState::Origin origin;       // its vocab, merges, lowercase, BOS and EOS (init_from: model.init_from)
};

// The weights a run of `start` trains from, without a step: model.init_from's tensors byte for byte as its
// files store them, the architecture's initialisation from the seed for those it lacks (model.init_missing)
// or for all without one. options.source is not used: the source is model.init_from.
ExportReport export_starting_point(const StartingPoint& start, const std::filesystem::path& out, const ExportOptions& options = {});

}  // namespace ferry::formats
