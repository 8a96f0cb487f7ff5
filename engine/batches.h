// Batches: a run's training and validation batches as the model takes them: its data opened as data.* asks
// (data_request), and for BERT masked-LM batches, their [MASK] chosen and checked against the data.
#pragma once

#include <cstdint>

#include "dataset/data_source.h"
#include "dataset/dataset.h"
#include "engine/config.h"
#include "engine/progress.h"

namespace ferry::engine {

// data.path and its tokenizer as the data section gives them.
dataset::DataRequest data_request(const Config& cfg);

class Batches {
 public:
  // Opens the data (progress hears the token cache's lines); a token id the model cannot take is an error.
  Batches(const Config& cfg, Progress& progress);
  const dataset::TextDataset& data() const { return data_; }
  const dataset::DataSource& source() const { return source_; }
  // Training batch `index` (a step's micro-batch i is (step - 1) * train.grad_accum + i): its windows, and for
  // BERT its masks, drawn from (train.seed, index).
  dataset::Batch train(int64_t index) const;
  // Validation batch i of train.eval_batches: the same windows and masks at every evaluation.
  dataset::Batch val(int i) const;

 private:
  void choose_mask();
  int32_t random_below() const { return mask_is_last_ ? mask_id_ : cfg_.model.vocab_size; }
  const Config& cfg_;
  const dataset::DataSource source_;
  dataset::TextDataset data_;
  bool mlm_, mask_is_last_ = false;
  int32_t mask_id_ = -1;
};

}  // namespace ferry::engine
