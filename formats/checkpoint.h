// Training checkpoints: the weights (Hugging Face names) and AdamW's moments as safetensors, plus a state
// file that records every other file's size and CRC32C; written to a temporary folder, fsynced, then
// renamed into place. Which folders a run owns, and rotation, are checkpoint_dir.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "foundation/crc32c.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "memory/tensor_view.h"
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
    // Parameters the step updated itself (the device tier beside the CPU's delayed AdamW): the pending
    // update leaves them out, and a run resumes it only with a plan whose device tier holds the same ones.
    std::vector<std::string> updated_in_step{};
  };
  std::optional<PendingUpdate> pending;
  // Checkpoints of earlier builds lack these (an empty run_id, config and files).
  std::string run_id{};  // the run that wrote it (its checkpoint dir's ferry-run.json names the same run)
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // the last validation loss evaluated; NaN: none
  std::vector<std::pair<std::string, std::string>> config{};    // the settings config_hash covers: key, value
  std::map<std::string, FileChecksum> files{};                  // the folder's other files; filled when saved
  // Where the run's model and tokenizer came from, for `ferry export`'s round trip: model.init_from (the
  // source's tensors Ferry does not train, its config.json and tokenizer files) and the vocabulary's files.
  // Empty when not known (a run from scratch, a shard nothing describes, a checkpoint of an earlier build).
  struct Origin {
    std::filesystem::path init_from, vocab, merges;
    bool lowercase = true;  // WordPiece's case rule
    // A tokenizer.json's (data.tokenizer: hf) tokens put before a text and after a document, as the run's
    // tokenizer chose them ("": it puts none), for the export's tokenizer_config.json. Unset: not an hf
    // run, or a checkpoint of an earlier build.
    std::optional<std::string> bos_token, eos_token;
  };
  Origin origin{};
  // The files the run's tokens came from (data.path, its cached tokens, the tokenizer's files), as they were
  // when the checkpoint was written: a resumed run's must match. Empty in checkpoints of earlier builds.
  struct DataFile {
    std::string role;            // "data.path", "the token cache", "data.vocab", "data.merges"
    std::filesystem::path path;  // absolute
    FileChecksum sum;
  };
  std::vector<DataFile> data{};
};

// What a resumed run must match: the settings behind the config hash, and its step count.
struct ResumeCheck {
  std::string config_hash;
  std::vector<std::pair<std::string, std::string>> config;  // key, value as text (engine::config_identity)
  int64_t steps = 0;                                        // train.steps: a checkpoint beyond it is refused
};

// The checkpoint folder `path` names: itself when it holds state.json, else the newest checkpoint of a
// checkpoint dir or run folder (the one its ferry-run.json lists last; in a dir of an earlier build, the
// highest step-NNNNNNNN holding a state.json), else that of an experiment's newest run folder holding one
// (runs/gpt-tiny: the highest-numbered). An error when there is none.
std::filesystem::path find_checkpoint(const std::filesystem::path& path);

// state.json's text, parsed and range-checked (every field, nested ones included) and checked against
// its own CRC32C; `origin` names it in errors, which name the field, its value and what is allowed.
TrainState parse_train_state(const std::string& text, const std::string& origin);

// The state file of a checkpoint folder (or of the newest in a checkpoint dir), and that folder.
std::pair<TrainState, std::filesystem::path> read_checkpoint_state(const std::filesystem::path& path);

// Checks `file` of the checkpoint folder `dir` against the size and CRC32C its state.json records; a
// mismatch is an error naming the file. Returns false, checking nothing, for a checkpoint of an earlier
// build (it records no checksums).
bool verify_checkpoint_file(const std::filesystem::path& dir, const TrainState& state, const std::string& file);

// The weights of the checkpoint folder `dir` for `spec`: model.safetensors checked against state.json's
// checksum, and against the shape (large enough for spec's parameters before they are allocated), then
// loaded. *verified is false for a checkpoint of an earlier build (no checksums to check against).
models::ParameterStore read_checkpoint_weights(const std::filesystem::path& dir, const TrainState& state,
                                               const models::ModelSpec& spec, bool* verified);
// The same checks, then the file itself (its bytes are the only copy: `ferry export` writes from them).
SafetensorsFile open_checkpoint_weights(const std::filesystem::path& dir, const TrainState& state, const models::ModelSpec& spec,
                                        bool* verified);

// A model's training state as one view per parameter (spec.params order): its weights, AdamW's m and v, and
// a pending delayed update's gradients. The engine gives views into its host buckets, so that a checkpoint
// is written from, and read into, the training state itself, with no gathered copy of the model. Each is
// written in its own dtype and read into its view's (exact where the dtypes match; a bf16 file widens).
// A view without data is a parameter whose state lives elsewhere (the device tier, on the device only): its
// weights, m and v are written from `fetch`, which fills a transient fp32 buffer (one tensor at a time), and read
// through `store`; its pending gradients are written as zeros (the device tier updates in the step itself, so the
// pending update has none of its gradients) and not read.
struct ParameterViews {
  enum class Part { Weights, M, V };
  std::vector<memory::TensorView> weights, m, v;  // fp32, or bf16 (optim.state: compact)
  std::vector<memory::TensorView> pending;        // each in the dtype its gradients landed in (fp32, bf16, fp16)
  std::function<void(Part, int param, std::span<float> out)> fetch{};
  std::function<void(Part, int param, std::span<const float> values)> store{};
};
using StateToWrite = ParameterViews;
using StateToRead = ParameterViews;

// Views of a ParameterStore's values, flat m and v laid out like them, and its grads as the pending gradients.
StateToWrite views_of(const models::ParameterStore& params, std::span<const float> m, std::span<const float> v);
StateToRead views_of(models::ParameterStore& params, std::span<float> m, std::span<float> v);

// Writes a checkpoint's files into the existing, empty folder `dir`, each fsynced, state.json last with the
// others' checksums. With state.pending, also the pending update's gradients. Returns every file written,
// state.json included, with its size and CRC32C.
std::map<std::string, FileChecksum> write_checkpoint_files(const std::filesystem::path& dir,
                                                           const models::ModelSpec& spec, const StateToWrite& from,
                                                           TrainState state);

// Reads the checkpoint folder `dir` (whose state is `state`) into the parts of `into` that are not empty:
// weights, m and v together, and the pending gradients (state.pending), each file checked against its
// checksum first.
void read_checkpoint_into(const std::filesystem::path& dir, const TrainState& state, const models::ModelSpec& spec,
                          const StateToRead& into);

// Writes root/step-NNNNNNNN as the checkpoint of a new run (CheckpointDir's rules: a root holding another
// run's checkpoints is refused) and keeps the newest `keep` of that run. Returns the folder written.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, const models::ModelSpec& spec,
                                      const models::ParameterStore& params, std::span<const float> m,
                                      std::span<const float> v, const TrainState& state, int keep);

// A checkpoint whose settings differ from `expected` (each differing key named with both values), or whose
// step is beyond expected.steps, is an error.
void check_resumable(const TrainState& state, const std::filesystem::path& dir, const ResumeCheck& expected);

// The files of `recorded` (a checkpoint's data) that differ in size or CRC32C from this run's file of the
// same role in `now`, each in words (both paths, sizes and checksums); empty when all match or none is
// recorded (a checkpoint of an earlier build).
std::vector<std::string> changed_data(const std::vector<TrainState::DataFile>& recorded,
                                      const std::vector<TrainState::DataFile>& now);

// `path` is a checkpoint folder, or a checkpoint dir (its newest is taken). Checks it against `expected`
// (a differing setting is named with both values) and every file against its checksum, then restores
// the weights and moments in place (and a pending update's gradients into params' grads). Returns the
// state and the folder read.
std::pair<TrainState, std::filesystem::path> load_checkpoint(const std::filesystem::path& path, const models::ModelSpec& spec,
                                                             models::ParameterStore& params, std::span<float> m,
                                                             std::span<float> v, const ResumeCheck& expected);

// fsync of a file or a folder: a checkpoint is complete on disk before it is renamed into place.
void sync_to_disk(const std::filesystem::path& path, bool directory);

}  // namespace ferry::formats
