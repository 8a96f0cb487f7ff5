// The training loop: data, forward/backward over the model's op list, clipping, AdamW, evaluation,
// progress and JSON-lines metrics. Runs on the CPU (the host path) for now.
#pragma once

#include <cstdio>
#include <filesystem>
#include <vector>

#include "engine/config.h"

namespace ferry::engine {

struct TrainOptions {
  std::filesystem::path metrics;  // JSON lines, one per step; empty: none
  std::FILE* progress = stderr;   // status line and messages; null: silent
};

struct TrainSummary {
  int steps = 0;
  float train_loss = 0;       // mean over the last min(10, steps) steps
  float val_loss_start = 0;   // before the first step (NaN without a validation split)
  float val_loss = 0;         // after the last step (NaN without a validation split)
  double tokens_per_s = 0;    // training tokens over training time (evaluation excluded)
  double wall_s = 0;
  std::vector<float> losses;  // per step
  int skipped_steps = 0;      // updates skipped for an inf/nan gradient
};

TrainSummary train(const Config& config, const TrainOptions& options);

}  // namespace ferry::engine
