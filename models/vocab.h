// The vocabulary padded inside the engine: every table indexed by token id (the token embedding, the LM head,
// BERT's decoder bias) gets padded_vocab(V) rows, so the LM head's products have an aligned leading dimension
// (cuBLASLt's tensor-core kernels want multiples of 8, llm.c pads GPT-2's 50257 to 50304). The padded rows are
// zero from initialisation on, the loss never reads their logits, so their gradients stay zero; Hugging Face
// files, checkpoints, export and sampling see only the V real rows (ParamSpec::file_shape).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/model_spec.h"
#include "models/weight_init.h"

namespace ferry::models {

// The multiple the engine pads the vocabulary to; 1 turns the padding off (tests compare the two).
inline constexpr int64_t kVocabMultiple = 128;

// The rows a vocabulary of `vocab` tokens gets inside the engine: the one place that decides the padding.
constexpr int64_t padded_vocab(int64_t vocab, int64_t multiple = kVocabMultiple) {
  return (vocab + multiple - 1) / multiple * multiple;
}

// Per parameter, its real elements (ParamSpec::file_shape): the ones initialisation draws for; the rest, a
// padded vocabulary's rows, come after them (row-major) and are zero.
std::vector<int64_t> real_numels(const ModelSpec& spec);

// fill_initial_values over the real elements of each parameter (rules[i] for spec.params[i]): the padded rows
// draw nothing from the random stream, so every real element gets the value it has without padding, and are
// set to zero. An empty view is skipped.
void fill_real_values(const ModelSpec& spec, std::span<const InitRule> rules, std::span<const std::span<float>> values,
                      uint64_t seed);

// Elements [begin, begin + out.size()) of parameter `param` as stored in the engine, a piece of what
// fill_real_values gives it: the real ones from `initial` (made over real_numels), a padded vocabulary's zero.
void fill_real_range(const InitialValues& initial, std::span<const int64_t> real_numel, int param, int64_t begin,
                     std::span<float> out);

}  // namespace ferry::models
