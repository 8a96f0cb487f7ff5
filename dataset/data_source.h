// Where a run's tokens come from (data.path as a token shard, a text tokenised through the token cache, or
// a text's bytes) and what is known of their tokenizer, and BERT's [MASK] id chosen from that vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "dataset/token_cache.h"

namespace ferry::dataset {

struct DataRequest {
  std::filesystem::path path;
  DataFormat format = DataFormat::Auto;
  TokenizerFiles tokenizer;       // data.tokenizer and its files
  bool tokenizer_given = false;   // data.tokenizer was written (gpt2/wordpiece/hf also say what made a shard)
  std::filesystem::path cache_dir;  // empty: default_token_cache_dir()
};

struct DataSource {
  std::filesystem::path path;  // what TextDataset reads, as `format`
  DataFormat format = DataFormat::Auto;
  bool known = false;          // info describes the tokens (false: a shard with no sidecar and no data.tokenizer)
  ShardInfo info;              // the tokenizer, its files, its vocabulary size and [MASK]
  std::shared_ptr<const Tokenizer> vocabulary;  // loaded when its files are at hand (to name the token of an id)
  std::string origin;          // the vocabulary file (or the sidecar, or the shard) that errors name
  std::string tokenizer_name() const { return known ? info.tokenizer.kind : "unknown"; }
};

// Tokenises a text or JSONL with gpt2/wordpiece/hf through the token cache (reporting on `report`; JSONL with
// the byte tokenizer is an error: it has no EOS to join documents); reads a shard's sidecar: a data.tokenizer
// gpt2, wordpiece or hf that contradicts it is an error naming both; byte (what the
// shipped configs say for their text) does not describe a shard (`report` says so when the sidecar differs).
DataSource open_data_source(const DataRequest& request, const ReportFn& report = {});

// BERT's [MASK] for this data: `given` (data.mask_token_id, -1 when not given), else the vocabulary's [MASK],
// else, for the byte tokenizer, the last id of the model's vocabulary. Errors (with what to set): a
// WordPiece vocabulary without [MASK]; a given id that is one of the vocabulary's real tokens or a byte of
// the byte tokenizer; a last id that is a real byte; a shard of unknown tokenizer holding ids beyond the
// bytes (not byte-level, so the last id may be a real token).
int32_t bert_mask_id(const DataSource& data, int32_t given, int model_vocab, int32_t max_data_token);

}  // namespace ferry::dataset
