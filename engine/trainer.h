// The training loop: data, forward/backward over the model's op list, clipping, AdamW, evaluation,
// progress and JSON-lines metrics. Runs on the CPU (the host path) for now.
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "engine/config.h"

namespace ferry::engine {

struct TrainOptions {
  std::filesystem::path metrics;  // JSON lines, one per step; empty: none (appended to when resuming)
  std::FILE* progress = stderr;   // status line and messages; null: silent
  std::filesystem::path resume;   // a checkpoint folder or a checkpoint_dir: continue from it
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT): finish the step, checkpoint, return
  int stop_after = 0;             // for tests: stop after this many steps of this call, as if killed
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
  bool interrupted = false;   // stopped early (stop flag or stop_after); the last checkpoint holds the state
  std::filesystem::path last_checkpoint;
};

TrainSummary train(const Config& config, const TrainOptions& options);

}  // namespace ferry::engine
