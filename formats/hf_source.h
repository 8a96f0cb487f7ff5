// What `ferry export` carries over from the Hugging Face folder a run started from (model.init_from), so the
// export round-trips: the tensors Ferry does not train (BERT's pooler, the next-sentence head, buffers), the
// tokenizer files, config.json with every setting Ferry does not change (dropout among them), and the
// folder's other files (sentence-transformers' modules, a model card).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include <nlohmann/json_fwd.hpp>

namespace ferry::formats {

// A model's weight files: one .safetensors file, a folder's model.safetensors, or the shards of its
// model.safetensors.index.json (formats/weights.h: weight_files), opened. `what` names it in errors:
// "model.init_from", or "--source" when the export names another.
struct HfWeights {
  std::filesystem::path folder;  // where its config.json and tokenizer files are; empty for a bare file of another name
  std::string what;
  std::vector<SafetensorsFile> files;
};
HfWeights open_hf_weights(const std::filesystem::path& init_from, const std::string& what);

// The source's tensors that are no parameter of `spec`, named as the export names them (the base model's
// prefix added where the source has none: 'pooler.dense.weight' -> 'bert.pooler.dense.weight'), their bytes
// as the source stores them. A tied copy (lm_head.weight, cls.predictions.decoder.*) is written as the
// exported tensor it is tied to: `exported` holds the model's tensors, by their names, to take it from.
std::vector<SafetensorsTensorRef> carried_tensors(const HfWeights& source, const models::ModelSpec& spec,
                                                  const std::vector<SafetensorsTensorRef>& exported);

// A file of the export other than the weights.
struct ExportFile {
  std::string name, bytes;
};
// The tokenizer files the export ships (names Hugging Face's AutoTokenizer reads): the source folder's, when
// the run's vocabulary is the source's own (or unknown); else the run's vocabulary (`vocab`, `merges`; a
// tokenizer.json under whatever name the run read it) with a tokenizer_config.json written for it. A
// tokenizer_config.json is written whenever none is copied: for a tokenizer.json (hf), one naming
// PreTrainedTokenizerFast, which transformers runs as the file says (a named class such as LlamaTokenizer
// rebuilds its own pipeline), over the settings of the tokenizer_config.json beside the run's file (its chat
// template, ...) with the run's BOS and EOS. `note` says why there are none (the byte tokenizer) or what is
// missing.
struct TokenizerOrigin {
  std::string kind;  // byte | gpt2 | wordpiece | hf | unknown: what made the run's tokens
  std::filesystem::path source_folder, vocab, merges;
  bool lowercase = true;
  std::string source_key = "model.init_from";  // what names source_folder, in errors
  std::optional<std::string> bos_token, eos_token;  // hf: the run's ("": none; unset: not recorded)
};
std::vector<ExportFile> tokenizer_files(const TokenizerOrigin& origin, const models::ModelConfig& model, std::string* note);
// For an hf run with a tokenizer of its own (not the source's, whose ids the source's files already name) and
// its BOS and EOS recorded: config.json's bos_token_id and eos_token_id (null: none) are their ids in the
// exported tokenizer.json (`files`: tokenizer_files'), and so are those of a generation_config.json among
// `carried`, so that generate() stops at the run's EOS.
void set_special_token_ids(const TokenizerOrigin& origin, const std::vector<ExportFile>& files, nlohmann::json& config,
                           std::vector<ExportFile>& carried);
// Every file name tokenizer_files may write (carried_files leaves them to it).
const std::vector<std::string>& tokenizer_file_names();

// The source folder's files that Ferry does not write, by their paths in it (sentence-transformers'
// modules.json, sentence_bert_config.json, config_sentence_transformers.json, 1_Pooling/config.json, a
// README.md, ...), read to be copied as they are. Not carried, each in `left_out` as "name (why)": the model's
// weights in other formats (pytorch_model.bin, tf_model.h5, onnx/, openvino/: model.safetensors replaces them),
// Ferry's checkpoints, hidden entries (.git), links out of the folder or to no regular file (a snapshot of
// the Hugging Face cache may link into the model's blobs/), and whatever is not a regular file. `skip`: a
// folder inside the source not to read (the export's own).
std::vector<ExportFile> carried_files(const std::filesystem::path& folder, const std::filesystem::path& skip,
                                      std::vector<std::string>* left_out);

// config.json: the source's (`source` an object; null: none) with Ferry's model keys (`ferry`: the shape,
// architectures, dtype) written over it, and the source's dropout and special token ids kept. Without a
// source, `ferry` with Hugging Face's default dropout (0.1): Ferry trains without dropout, and a model
// fine-tuned further in transformers gets the regularisation its architecture normally has.
nlohmann::json round_trip_config(const nlohmann::json& source, const nlohmann::json& ferry);

}  // namespace ferry::formats
