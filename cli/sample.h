// `ferry sample`: text from a trained GPT checkpoint, token by token (temperature, top-k), on the CPU.
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

// The prompt followed by the generated text. Deterministic for a seed. `on_text`, when given, hears the
// prompt, then each token's text as soon as it is generated (what `ferry sample` prints as it goes); when it
// returns false (stdout takes no more), generation stops there.
// `generated`, when given, receives the ids of the generated tokens (every one below model.vocab_size: the
// engine's padded vocabulary is never sampled).
std::string sample(const SampleOptions& options, const std::function<bool(std::string_view)>& on_text = {},
                   std::vector<int32_t>* generated = nullptr);

// Why `ferry sample` cannot continue text from this checkpoint; empty when it can.
std::string why_not_sampleable(const formats::TrainState& state);

}  // namespace ferry::cli
