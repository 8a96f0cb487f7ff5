// Batches: the run's data opened, BERT's [MASK] chosen, and each batch drawn from the run's seed and its index.
#include "engine/batches.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ferry::engine {

// data.path and its tokenizer as the data section gives them.
dataset::DataRequest data_request(const Config& cfg) {
  const DataConfig& d = cfg.data;
  return {d.path,
          dataset::parse_data_format(d.format),
          {d.tokenizer, d.vocab, d.merges, d.lowercase != "false"},
          d.tokenizer_given,
          d.cache_dir};
}

Batches::Batches(const Config& cfg, Progress& progress)
    : cfg_(cfg), source_(dataset::open_data_source(data_request(cfg),
                                                   [&progress](const std::string& line) { progress.message(line); })),
      data_(source_.path, cfg.data.val_fraction, cfg.sequence(), source_.format), mlm_(cfg.model.kind == "bert") {
  if (mlm_) choose_mask();
  if (data_.max_token() >= (mask_is_last_ ? mask_id_ : cfg.model.vocab_size))
    throw std::runtime_error("data.path: '" + cfg.data.path.string() + "' holds token id " +
                             std::to_string(data_.max_token()) +
                             (mask_is_last_ ? ", which BERT needs below model.vocab_size - 1 (the last id is [MASK]); "
                                              "raise model.vocab_size or set data.mask_token_id"
                                            : ", beyond model.vocab_size " + std::to_string(cfg.model.vocab_size)));
}

dataset::Batch Batches::train(int64_t index) const {
  dataset::Batch b = data_.train_batch(cfg_.train.seed, index, cfg_.train.batch_size);
  return mlm_ ? dataset::masked_lm(b, cfg_.train.seed, index, mask_id_, random_below()) : b;
}

dataset::Batch Batches::val(int i) const {
  dataset::Batch b = data_.val_batch(i, cfg_.train.eval_batches, cfg_.train.batch_size);
  return mlm_ ? dataset::masked_lm(b, cfg_.train.seed ^ 0x5EEDull, i, mask_id_, random_below()) : b;
}

// [MASK]: data.mask_token_id, else the vocabulary's, else (byte-level) the last id, which the data then must
// not use and random replacements leave out.
void Batches::choose_mask() {
  const int32_t given = cfg_.data.mask_token_id;
  // A [MASK] that is also a data token would make masked positions and real ones the same input.
  if (given >= 0 && data_.holds(given))
    throw std::runtime_error(
        fmt::format("data.mask_token_id: {} occurs in data.path '{}' as a real token, so the model could not tell "
                    "[MASK] from it; set it "
                    "to the vocabulary's [MASK] (ferry tokenize prints it), an id the data never uses, or remove it to "
                    "use the vocabulary's",
                    given, cfg_.data.path.string()));
  mask_id_ = dataset::bert_mask_id(source_, given, cfg_.model.vocab_size, data_.max_token());
  mask_is_last_ = given < 0 && mask_id_ == cfg_.model.vocab_size - 1 && source_.info.mask_token_id != mask_id_;
  if (mask_id_ >= cfg_.model.vocab_size)
    throw std::runtime_error(
        fmt::format("data.mask_token_id: the vocabulary {}'s [MASK] is {}, not below model.vocab_size {}; set "
                    "model.vocab_size to the vocabulary's size ({})",
                    source_.origin, mask_id_, cfg_.model.vocab_size, source_.info.vocab_size));
}

}  // namespace ferry::engine
