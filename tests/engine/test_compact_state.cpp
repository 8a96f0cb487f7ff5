// optim.state: compact end to end on the host device: every policy that updates on the CPU trains bitwise
// alike, a stopped run resumes bit-identically from a checkpoint that holds the bf16 state, `ferry export`
// writes the checkpoint's weights, it learns as the exact state does, its host buckets take 8 bytes a
// parameter, and the settings it cannot run with are refused naming the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "engine/config.h"
#include "engine/host_memory.h"
#include "engine/step_planning.h"
#include "engine/trainer.h"
#include "formats/export.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "offload/policies.h"
#include "test_helpers.h"

namespace ferry::engine {
namespace {

const auto kText = testing::source_path("configs/data/fortunes.txt");
const auto kCostModel = testing::source_path("configs/cost_models/h100-assumed.json");

// A small GPT whose parameters make several buckets of 0.25 MiB, on the compact state.
Config compact_config(const std::string& policy, int accum, int steps = 12) {
  Config c = parse_config(
      "model: {n_layer: 2, n_head: 2, n_embd: 128, seq_len: 16}\n"
      "data: {path: " +
          kText.string() +
          ", val_fraction: 0.05}\n"
          "optim: {lr: 3.0e-3, warmup_steps: 3, grad_clip: 1.0, state: compact}\n"
          "train: {batch_size: 4, steps: " +
          std::to_string(steps) +
          ", seed: 7, eval_batches: 1, threads: 2}\n"
          "offload: {bucket_mb: 0.25, cost_model: " +
          kCostModel.string() + ", policy: " + policy +
          "}\n"
          "device: cpu\n",
      "compact", ".");
  c.train.grad_accum = accum;
  return c;
}

// A budget that forces weights to travel: a little above what the model needs with every bucket offloaded.
int64_t tight_budget(const Config& c, double factor) {
  offload::CostModel cost = offload::CostModel::load(kCostModel);
  cost.fused_attention = false;
  const auto spec = models::build_model(c.model, c.train.batch_size, c.model.seq_len, c.precision());
  const offload::OffloadProblem p(spec, cost, c.offload.bucket_bytes, 1, {}, c.train.grad_accum);
  return static_cast<int64_t>(offload::minimum_device_bytes(p) * factor);
}

TrainSummary run(const Config& c, TrainOptions opt = {}) {
  opt.progress = nullptr;
  return train(c, opt);
}

// No policy holds the compact state on the device, so every plan updates every bucket with the same CPU
// AdamW on the same bf16 bytes: the losses are bitwise zero-offload's, with weights resident or travelling,
// with micro-batches summed, and with the update pipelined into the next step.
TEST(CompactState, EveryPolicyTrainsBitwiseAlike) {
  for (int accum : {1, 2}) {
    const TrainSummary reference = run(compact_config("zero-offload", accum));
    ASSERT_EQ(reference.losses.size(), 12u);
    EXPECT_EQ(reference.tier_params[0], 0);  // no device tier
    for (const char* policy : {"chunk-lru", "greedy"}) {
      for (const char* overlap : {"backward", "pipelined"}) {
        Config c = compact_config(policy, accum);
        c.offload.overlap = overlap;
        c.offload.gpu_budget = tight_budget(c, std::string(policy) == "chunk-lru" ? 2.0 : 1.5);
        const TrainSummary s = run(c);
        const std::string what = std::string(policy) + ", " + overlap + ", grad_accum " + std::to_string(accum);
        EXPECT_EQ(s.losses, reference.losses) << what;
        EXPECT_EQ(s.val_loss, reference.val_loss) << what;
        EXPECT_EQ(s.tier_params[0], 0) << what;
        EXPECT_GT(s.tier_params[2], 0) << what;  // weights streamed
      }
    }
    Config unbounded = compact_config("greedy", accum);  // budget unset: zero-offload's peak, no device tier
    const TrainSummary s = run(unbounded);
    EXPECT_EQ(s.losses, reference.losses);
    EXPECT_EQ(s.tier_params[0], 0);
  }
}

// A stopped run resumes bit-identically: the checkpoint holds the state itself (bf16 weights, m and v), and
// stochastic rounding's bits depend on the step, not on the process.
TEST(CompactState, AStoppedRunResumesBitIdenticallyFromBf16State) {
  const auto root = testing::scratch_path("compact_checkpoints");
  std::filesystem::remove_all(root);
  Config cfg = compact_config("greedy", 1);
  cfg.train.checkpoint_every = 4;
  cfg.train.checkpoint_dir = root / "straight";
  const TrainSummary straight = run(cfg);
  cfg.train.checkpoint_dir = root / "stopped";
  TrainOptions stop;
  stop.stop_after = 6;
  const TrainSummary first = run(cfg, stop);
  ASSERT_TRUE(first.interrupted);
  TrainOptions resume;
  resume.resume = root / "stopped";
  const TrainSummary second = run(cfg, resume);
  ASSERT_EQ(second.losses.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(second.losses[i], straight.losses[6 + i]) << "step " << 7 + i;
  const auto final_of = [&](const char* run_name, const char* file) {
    return root / run_name / "step-00000012" / file;
  };
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const auto a = formats::SafetensorsFile::open(final_of("straight", file));
    const auto b = formats::SafetensorsFile::open(final_of("stopped", file));
    for (const auto& name :
         {std::string("transformer.h.0.attn.c_attn.weight"), std::string("exp_avg.transformer.wte.weight")}) {
      const auto* e = a.find(name);
      if (!e) continue;  // (the name belongs to the other file)
      EXPECT_EQ(e->dtype, "BF16") << name;
      EXPECT_EQ(a.read_f32(name), b.read_f32(name)) << name;
    }
  }

  // `ferry export` writes the checkpoint's weights as they are.
  const auto out = root / "export";
  formats::export_checkpoint(root / "straight" / "step-00000012", out);
  const auto exported = formats::SafetensorsFile::open(out / "model.safetensors");
  const auto saved = formats::SafetensorsFile::open(final_of("straight", "model.safetensors"));
  for (const char* name : {"transformer.wte.weight", "transformer.h.1.mlp.c_fc.weight", "transformer.ln_f.bias"})
    EXPECT_EQ(exported.read_f32(name), saved.read_f32(name)) << name;
  std::filesystem::remove_all(root);
}

// Stochastic rounding keeps updates far below a bf16 ulp: 60 steps end within 2% of the exact state's
// validation loss on 16 batches (the margin Precision.TwoByteStorageLearnsLikeFp32 allows bf16 against fp32),
// and the numbers differ (it is another state).
TEST(CompactState, LearnsAsTheExactStateDoes) {
  Config compact = compact_config("greedy", 1, 60);
  compact.train.eval_batches = 16;
  Config exact = compact;
  exact.optim.state = "exact";
  const TrainSummary e = run(exact), c = run(compact);
  ASSERT_LT(e.val_loss, 0.8 * e.val_loss_start);
  EXPECT_NEAR(c.val_loss, e.val_loss, 0.02 * e.val_loss);
  EXPECT_NE(c.val_loss, e.val_loss);
}

// The host buckets of the compact state: 8 bytes a parameter (bf16 weights, m, v and gradients) against
// the exact state's 14, as the run reports them and as `ferry plan`'s estimate counts them.
TEST(CompactState, HostBucketsHoldEightBytesAParameter) {
  Config c = compact_config("greedy", 1, 1);
  const TrainSummary compact = run(c);
  c.optim.state = "exact";
  c.offload.policy = "zero-offload";  // AdamW on the CPU for every bucket: greedy's device tier keeps no host bytes
  const TrainSummary exact = run(c);
  const double per_param = static_cast<double>(compact.host_bucket_bytes) / static_cast<double>(compact.params);
  EXPECT_GE(per_param, 8.0);
  EXPECT_LT(per_param, 8.5);  // page padding of each region
  // The exact state with one micro-batch a step: fp32 master, m and v, and its gradients landing on its working copy.
  const double exact_per_param = static_cast<double>(exact.host_bucket_bytes) / static_cast<double>(exact.params);
  EXPECT_GE(exact_per_param, 14.0);
  EXPECT_LT(exact_per_param, 14.5);
}

TEST(CompactState, SettingsItCannotRunWithAreRefusedNamingTheFix) {
  const auto error_with = [](const std::string& extra) {
    return testing::error_of(
        [&] { parse_config("data: {path: " + kText.string() + "}\noptim: {state: compact}\n" + extra, "c", "."); });
  };
  EXPECT_NE(error_with("train: {precision: fp32}\n").find("set train.precision: bf16 or optim.state: exact"),
            std::string::npos);
  EXPECT_NE(error_with("offload: {policy: resident}\n").find("use offload.policy: greedy, zero-offload or chunk-lru"),
            std::string::npos);
  EXPECT_NE(error_with("offload: {overlap: delayed}\n").find("use offload.overlap: backward or pipelined"),
            std::string::npos);
  EXPECT_EQ(error_with(""), "");
  EXPECT_NE(error_with("optim: {state: half}\n"), "");
  // The exact state keeps the config hash of earlier builds; the compact state is part of it.
  Config exact = compact_config("greedy", 1);
  exact.optim.state = "exact";
  EXPECT_NE(config_hash(exact), config_hash(compact_config("greedy", 1)));
  for (const auto& [key, value] : config_identity(exact)) EXPECT_NE(key, "optim.state");
}

}  // namespace
}  // namespace ferry::engine
