// TextDataset: a text file as byte tokens, or a pre-tokenised shard, split into train and validation and
// sampled into batches.
// Batches are a pure function of (seed, split, index), so a run is reproducible and resumable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "dataset/token_shard.h"

namespace ferry::dataset {

struct Batch {
  std::vector<int32_t> tokens;          // (B, T)
  std::vector<int32_t> targets;         // (B, T): tokens shifted by one (GPT); masked-LM labels, -100 elsewhere (BERT)
  std::vector<int32_t> attention_mask;  // (B, T): 1 a real token, 0 padding; empty: no padding
};

// BERT's masked-LM batch from token windows: each position is chosen with probability 15%; a chosen
// token becomes mask_id (80%), a random token below random_below (10%) or stays (10%), and its label is
// the original token; every other label is -100. At least one position per batch is chosen. A pure
// function of (seed, index), like the windows.
Batch masked_lm(const Batch& windows, uint64_t seed, int64_t index, int32_t mask_id, int32_t random_below);

class TextDataset {
 public:
  // Reads `path`: a token shard or text (byte tokenizer), as `format` and the file's name say (data.format);
  // the last val_fraction of it is the validation split.
  TextDataset(const std::filesystem::path& path, double val_fraction, int64_t seq_len, DataFormat format = DataFormat::Auto);

  int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
  // Whether `token` occurs anywhere in the data (either split).
  bool holds(int32_t token) const;
  int64_t val_tokens() const { return static_cast<int64_t>(val_.size()); }
  int32_t max_token() const { return max_token_; }

  // Training batch number `index`: B windows at offsets drawn from (seed, index).
  Batch train_batch(uint64_t seed, int64_t index, int64_t B) const;
  // Validation batch number `index`: B windows at fixed, evenly spread offsets.
  Batch val_batch(int64_t index, int64_t count, int64_t B) const;

 private:
  std::vector<int32_t> train_, val_;
  int64_t T_;
  int32_t max_token_ = 0;
};

}  // namespace ferry::dataset
