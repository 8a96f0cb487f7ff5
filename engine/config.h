// engine::Config: a YAML experiment file, validated. Its keys, their ranges and defaults in words are one table,
// engine/config_schema.h; every error names the key, the value and what is allowed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/param_groups.h"
#include "memory/dtype.h"
#include "models/registry.h"

namespace ferry::engine {

struct DataConfig {
  std::filesystem::path path;  // resolved against the config file's folder
  std::string tokenizer = "byte";
  std::string format = "auto";  // auto: a *.bin path is a token shard, anything else text; or text, shard
  double val_fraction = 0.1;
  int mask_token_id = -1;  // BERT's [MASK]; -1: the vocabulary's [MASK] (the last id for the byte tokenizer)
  // Raw text with gpt2 or wordpiece is tokenised at start-up and cached (dataset/token_cache.h).
  bool tokenizer_given = false;          // data.tokenizer was written (gpt2/wordpiece then say what made a shard; byte describes text)
  std::filesystem::path vocab, merges;   // gpt2: vocab.json + merges.txt; wordpiece: vocab.txt; default: model.init_from's folder's
  std::string lowercase = "auto";        // wordpiece: true | false | auto (resolved: do_lower_case of tokenizer_config.json beside the vocab, else true)
  std::filesystem::path
      cache_dir;  // where text's tokens are cached; empty: the user's cache folder (foundation/cache_dir.h)
};

struct OptimConfig {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 disables clipping
  int warmup_steps = 0;
  std::string schedule = "cosine";  // cosine | constant
  double min_lr = -1;               // cosine floor; unset (-1) means lr / 10
  int cpu_threads = 0;              // threads of the CPU AdamW; 0: all cores
  std::string isa = "auto";         // CPU AdamW kernels: auto | scalar | avx2 | avx512
  std::string state = "exact";  // exact (fp32 master, m, v) | compact (bf16 weights, m, v; cpu_optim::CompactBucket)
  bool compact() const { return state == "compact"; }
  std::vector<ParamGroup> groups;   // by parameter name, first match wins (engine/param_groups.h)
};

struct TrainConfig {
  int batch_size = 8;
  int grad_accum = 1;
  int steps = 100;
  uint64_t seed = 1337;
  int log_every = 10;
  int eval_every = 0;  // 0: evaluate only at the start and the end
  int eval_batches = 8;
  int threads = 0;     // 0: all cores
  std::string activation_checkpointing = "auto";  // auto | true | false (planned by `ferry plan` today)
  int checkpoint_every = 0;                  // steps; 0: at the end and on interruption
  std::filesystem::path checkpoint_dir;      // empty: a run folder runs/<experiment>/<n> (cli/train.cpp)
  int keep_checkpoints = 3;
  int seq_len = 0;  // tokens per training sequence, at most model.seq_len (the position table's rows); 0: model.seq_len
  std::string precision = "bf16";     // bf16 | fp16 (dynamic loss scaling) | fp32: how device tensors are stored
  double loss_scale_init = 65536;     // fp16: the first loss scale (a power of two)
  int loss_scale_growth_interval = 1000;  // fp16: good steps before the scale doubles
};

struct OffloadConfig {
  int64_t bucket_bytes = 0;          // offload.bucket_mb; 0: auto (the default until the cost model measures the link)
  std::string policy = "greedy";     // resident | zero-offload | chunk-lru | greedy
  int64_t gpu_budget = 0;            // bytes; 0: not given (offload.gpu_budget: auto)
  std::filesystem::path cost_model;  // empty: measure the device (host or CUDA) at start-up
  std::string overlap = "backward";  // backward | delayed (ZeRO-Offload's delayed parameter update) | pipelined
  int sync_steps = 40;               // delayed: the first steps still update synchronously
};

// device.host: the host device (`device: cpu`), a simulated GPU on the CPU.
struct HostDeviceConfig {
  double link_gbps = 0;  // copies throttled to this many GB/s each way, like a PCIe link; 0: memcpy speed
};

// "8GiB", "48MiB", "1.5GB", "4096" (bytes): the sizes offload.gpu_budget and --budget take.
int64_t parse_bytes(const std::string& text);

struct Config {
  std::filesystem::path source;  // the YAML file
  models::ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  OffloadConfig offload;
  std::string device = "auto";  // auto (the GPU when one is visible) | cpu | cuda: `device: cpu`, or `device: {kind: cpu, host: {...}}`
  HostDeviceConfig host_device;  // device.host

  // Defaults that `ferry plan` and the trainer both need, resolved in one place so that they cannot disagree.
  // train.threads, where 0 means every core (std::thread::hardware_concurrency()).
  int threads() const;
  int sequence() const;  // the tokens of one training sequence: train.seq_len, else model.seq_len
  DType precision() const;  // train.precision as the storage dtype of the device's tensors
  // offload.bucket_mb in bytes, where auto means memory::BucketLayout::kDefaultBucketBytes.
  int64_t bucket_bytes() const;
};

// What must not change between a run and its resumption: the model, the data, the optimizer, the batch
// and step counts, the seed, the update rule (overlap) and the precision, as (key, value as text) pairs
// that checkpoints store so that a mismatch can name the key. (Logging, evaluation, the offload policy
// and budget may change: they change no number.)
std::vector<std::pair<std::string, std::string>> config_identity(const Config& config);
// The same as a stable hash.
std::string config_hash(const Config& config);

// Settings that are valid but likely not what was meant (optim.warmup_steps beyond train.steps), one line
// each, for `ferry train` and `ferry plan` to print as warnings.
std::vector<std::string> config_warnings(const Config& config);

// Loads `path`, applies `key=value` overrides (dotted keys, YAML values: "train.steps=10"), validates.
Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
// The same from YAML text; `origin` names it in errors, relative data paths resolve against `base_dir`.
Config parse_config(const std::string& yaml, const std::string& origin, const std::filesystem::path& base_dir,
                    const std::vector<std::string>& overrides = {});

}  // namespace ferry::engine
