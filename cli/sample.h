// `ferry sample`: text from a trained GPT-2 or Llama checkpoint, token by token (temperature, top-k), on the CPU
// with a key/value cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::formats {
struct TrainState;
}

namespace ferry::cli {

struct SampleOptions {
  std::filesystem::path checkpoint;  // a checkpoint folder, or a checkpoint dir (the newest is used)
  std::string prompt;
  int tokens = 200;
  double temperature = 0.8;  // 0: always the most likely token
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1;
};

// The prompt followed by the generated text, both through the run's tokenizer (the files its checkpoint
// records; the prompt after the tokenizer's BOS, if it has one, as the run's documents began). Deterministic for
// a seed. Generation ends after `tokens`, or at the tokenizer's end of a document (EOS; the byte tokenizer has
// none). `on_text`, when given, hears the prompt, then the text of the tokens as soon as they are generated (a
// character split over several tokens once it is whole: what `ferry sample` prints as it goes); when it
// returns false (stdout takes no more), generation stops there.
// `generated`, when given, receives the ids of the generated tokens, EOS included (every one below
// model.vocab_size and the tokenizer's vocabulary: the engine's padded vocabulary is never sampled).
std::string sample(const SampleOptions& options, const std::function<bool(std::string_view)>& on_text = {},
                   std::vector<int32_t>* generated = nullptr);

// Why `ferry sample` cannot continue text from this checkpoint; empty when it can.
std::string why_not_sampleable(const formats::TrainState& state);

}  // namespace ferry::cli
