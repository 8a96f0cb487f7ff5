// The training loop: data, the offload plan (policy, budget, checkpointing), the Executor running each
// step on the device, evaluation, progress, JSON-lines metrics, checkpoints and resume.
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/config.h"
#include "foundation/output_paths.h"

namespace ferry::formats {
struct StartingPoint;  // formats/export.h
}
namespace ferry::memory {
class HostBuckets;  // memory/host_buckets.h
}
namespace ferry::models {
struct ModelSpec;  // models/model_spec.h
}

namespace ferry::engine {

class Executor;  // engine/executor.h

struct TrainOptions {
  // JSON lines, one per step; empty: none, or metrics.jsonl in a run folder. Resuming, the file is cut back to
  // the checkpoint's step (the steps logged after it are trained, and logged, again), then appended to.
  std::filesystem::path metrics;
  std::filesystem::path save_cost_model;  // the cost model the run planned with, as an offload.cost_model file; empty: none
  std::FILE* progress = stderr;   // status line and messages; null: silent
  std::filesystem::path resume;   // a checkpoint folder, a checkpoint_dir or run folder, an experiment folder: continue from it
  bool resume_with_changed_data =
      false;                          // data whose size or CRC32C differ from the checkpoint's: a warning, not an error
  std::filesystem::path config_file;  // the experiment file the config came from: no output may be written over it
  // Without train.checkpoint_dir, a run writes into a run folder: a new run into the next one of this
  // experiment folder (runs/gpt-tiny/1, /2, ...), a resumed run into its checkpoint's. Empty: no checkpoints.
  std::filesystem::path experiment;
  bool overwrite_checkpoints = false;  // a train.checkpoint_dir holding another run's checkpoints: replace them
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT): finish the step, checkpoint, return
  int stop_after = 0;             // for tests: stop after this many steps of this call, as if killed
  std::filesystem::path trace;    // Chrome/Perfetto trace of the first trace_steps steps; empty: none
  int trace_steps = 2;
  std::string inject_fault;       // for tests: from step inject_fault_step on, executor tasks whose label
  int inject_fault_step = 1;      // contains inject_fault fail
  int64_t red_zone_bytes = 0;     // for tests: a red zone after every device tensor, checked after every op
  double d2h_link_gbps = -1;      // for tests: the host device's copies back at this rate, unknown to the plan; < 0: as planned
};

struct TrainSummary {
  int steps = 0;
  float train_loss = 0;       // mean over the last min(10, steps) steps
  float val_loss_start = 0;   // before the first step (NaN without a validation split)
  float val_loss = 0;         // after the last step (NaN without a validation split, or unrecorded)
  double tokens_per_s = 0;    // training tokens over training time (evaluation excluded)
  double wall_s = 0;
  std::vector<float> losses;  // per step
  int skipped_steps = 0;      // updates skipped for an inf/nan gradient
  bool interrupted = false;   // stopped early (stop flag or stop_after); the last checkpoint holds the state
  bool already_complete = false;  // resumed from a run's final checkpoint: nothing trained, nothing written
  std::filesystem::path last_checkpoint;
  std::filesystem::path checkpoint_dir;  // where the checkpoints went (train.checkpoint_dir or the run folder); empty: none
  bool run_folder = false;               // checkpoint_dir is a run folder (no train.checkpoint_dir)
  std::filesystem::path metrics;         // the metrics file written; empty: none
  // The offload plan and what it did.
  std::string policy;
  std::string plan;                // the schedule's label: "greedy (prefetch schedule, ...)"
  // Per tier, in offload::Tier's order (device, weights resident, streamed): parameters and bytes of weights.
  int64_t tier_params[3] = {0, 0, 0}, tier_bytes[3] = {0, 0, 0};
  int checkpointed_blocks = 0;
  int64_t arena_bytes = 0;         // the device arena: the plan's peak
  int64_t params = 0;              // the model's parameters
  int64_t host_bucket_bytes = 0;   // the host buckets' pinned pool: master, m, v, working copy, gradient landing
  int64_t measured_peak_device_bytes = 0;  // measured on the device: the highest arena byte written
  // Device memory held at the end (memory::DeviceAllocations): the arena and the ops' workspaces. On the host
  // device it is host memory that stands for the GPU's.
  int64_t device_bytes_held = 0;
  int64_t device_allocations_at_start_up = 0;    // device allocations while the run was set up
  int64_t device_allocations_after_start_up = 0;  // and afterwards: none, if nothing is allocated per step
  int64_t budget_bytes = 0;
  double predicted_step_s = 0;     // the Simulator's step time (x micro-batches)
  double median_step_s = 0;        // measured
  int64_t h2d_bytes = 0, d2h_bytes = 0;  // per step
  double stall_s = 0;              // over all steps of this call
};

// Every output (metrics, trace, cost model, checkpoints) is checked against every input and each other
// before anything is written (formats/output_paths.h).
TrainSummary train(const Config& config, const TrainOptions& options);

// What a run of `config` reads: data.path (and a shard's sidecar), the tokenizer's files and the text's cached
// tokens, model.init_from and offload.cost_model; for commands that must not write over them.
std::vector<PathUse> run_inputs(const Config& config);

// `ferry eval`: the validation loss of a model without a training step, on the device as training evaluates.
struct EvalOptions {
  std::filesystem::path checkpoint;  // weights from this checkpoint folder (or the newest in a dir); empty: the
                                     // config's own (model.init_from, else the initialisation of train.seed)
  std::FILE* progress = stderr;      // start-up lines; null: silent
};

struct EvalSummary {
  float val_loss = 0;    // mean over train.eval_batches validation batches
  int batches = 0;
  int64_t tokens = 0;    // validation tokens read (batch x seq each)
  std::string weights;   // where the weights came from
};

EvalSummary evaluate(const Config& config, const EvalOptions& options);

// A run's initial weights as train() sets them, for a benchmark that sets up its own Executor (ferry-bench step
// --device): the initialisation of train.seed, or model.init_from's weights, into the host buckets' masters and
// working copies, and the device tier's straight to the device a few MiB at a time. Then executor.upload_state().
// progress: where start-up lines go (model.init_from's tensors initialised instead); null: nowhere.
void initialize_weights(const Config& config, const models::ModelSpec& spec, memory::HostBuckets& host,
                        Executor& executor, std::FILE* progress);

// What a run of `config` starts from, for `ferry export --config`: its model, the seed of its initialisation,
// and its tokenizer as its checkpoints record it (a shard's sidecar is read; a text's tokens are not made).
formats::StartingPoint starting_point(const Config& config);

}  // namespace ferry::engine
