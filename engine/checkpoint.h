// Training checkpoints: the weights (Hugging Face names) and AdamW's moments as safetensors, plus a small
// state file; written to a temporary folder, fsynced, then renamed into place, keeping the newest K.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "engine/config.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::engine {

struct TrainState {
  int64_t step = 0;             // training steps done (the data position follows from it)
  int64_t optimizer_steps = 0;  // updates applied (AdamW's bias correction counts these)
  double val_loss_start = 0;
  std::string config_hash;      // of everything that must match to resume
  ModelConfig model;            // the shape, so that `ferry sample` and `ferry export` need no config file
  std::string tokenizer = "byte";
};

// The state file of a checkpoint folder (or of the newest in a checkpoint dir), and that folder.
std::pair<TrainState, std::filesystem::path> read_checkpoint_state(const std::filesystem::path& path);

// What must not change between a run and its resumption: the model, the data, the optimizer, the batch
// and step counts, the seed. (Logging and evaluation settings may change.)
std::string config_hash(const Config& config);

// Writes root/step-NNNNNNNN and removes all but the newest `keep`. Returns the folder written.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, const models::ModelSpec& spec,
                                      const models::ParameterStore& params, std::span<const float> m,
                                      std::span<const float> v, const TrainState& state, int keep);

// `path` is a checkpoint folder, or a root holding step-* folders (the newest is taken). Restores the
// weights and moments in place; a checkpoint of another model or config, or a damaged file, is an error.
TrainState load_checkpoint(const std::filesystem::path& path, const models::ModelSpec& spec,
                           models::ParameterStore& params, std::span<float> m, std::span<float> v,
                           const std::string& expected_config_hash);

}  // namespace ferry::engine
