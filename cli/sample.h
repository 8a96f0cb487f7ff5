// `ferry sample`: text from a trained GPT checkpoint, token by token (temperature, top-k), on the CPU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ferry::cli {

struct SampleOptions {
  std::filesystem::path checkpoint;  // a checkpoint folder, or a checkpoint dir (the newest is used)
  std::string prompt;
  int tokens = 200;
  double temperature = 0.8;  // 0: always the most likely token
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1;
};

// The prompt followed by the generated text. Deterministic for a seed.
std::string sample(const SampleOptions& options);

}  // namespace ferry::cli
