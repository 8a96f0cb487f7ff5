// Training checkpoints: the weights (Hugging Face names) and AdamW's moments as safetensors, plus a small
// state file; written to a temporary folder, fsynced, then renamed into place, keeping the newest K.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "models/registry.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::formats {

struct TrainState {
  int64_t step = 0;             // training steps done (the data position follows from it)
  int64_t optimizer_steps = 0;  // updates applied (AdamW's bias correction counts these)
  double val_loss_start = 0;
  double loss_scale = 1;        // fp16's dynamic loss scale, and the good steps toward its next growth
  int loss_scale_good_steps = 0;
  std::string config_hash;      // of everything that must match to resume
  models::ModelConfig model;            // the shape, so that `ferry sample` and `ferry export` need no config file
  std::string tokenizer = "byte";
  // offload.overlap: delayed: the last step's update, not applied yet. Its gradients travel in the
  // ParameterStore's grads (saved as pending_update.safetensors), so a resumed run applies it exactly
  // as the uninterrupted run does.
  struct PendingUpdate {
    int64_t adam_step = 0;
    double lr = 0;
    double grad_norm = 0;
    float grad_scale = 1;
    bool skipped = false;
  };
  std::optional<PendingUpdate> pending;
};

// The state file of a checkpoint folder (or of the newest in a checkpoint dir), and that folder.
std::pair<TrainState, std::filesystem::path> read_checkpoint_state(const std::filesystem::path& path);


// Writes root/step-NNNNNNNN and removes all but the newest `keep`. Returns the folder written. With
// state.pending, the pending update's gradients are params' grads.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, const models::ModelSpec& spec,
                                      const models::ParameterStore& params, std::span<const float> m,
                                      std::span<const float> v, const TrainState& state, int keep);

// `path` is a checkpoint folder, or a root holding step-* folders (the newest is taken). Restores the
// weights and moments in place (and a pending update's gradients into params' grads); a checkpoint of
// another model or config, or a damaged file, is an error.
TrainState load_checkpoint(const std::filesystem::path& path, const models::ModelSpec& spec,
                           models::ParameterStore& params, std::span<float> m, std::span<float> v,
                           const std::string& expected_config_hash);

}  // namespace ferry::formats
