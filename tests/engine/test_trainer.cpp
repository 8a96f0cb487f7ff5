// The training loop end to end on the CPU: a short run learns, the same seed gives bitwise the same
// losses, metrics are JSON lines with the promised keys, a stopped run resumes, checkpoints cli::sample and export.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/config.h"
#include "dataset/dataset.h"
#include "formats/export.h"
#include "formats/safetensors.h"
#include "dataset/token_shard.h"
#include "models/registry.h"
#include "cli/sample.h"
#include "engine/trainer.h"
#include "memory/arena.h"
#include "models/cpu_runner.h"
#include "models/gpt2.h"
#include "test_helpers.h"

namespace ferry::engine {
namespace {

const auto kText = testing::source_path("configs/data/fortunes.txt");

Config tiny_config(int steps, uint64_t seed) {
  return parse_config("model: {n_layer: 1, n_head: 2, n_embd: 32, seq_len: 32}\n"
                      "data: {path: " + kText.string() + ", val_fraction: 0.05}\n"
                      "optim: {lr: 3.0e-3, warmup_steps: 5}\n"
                      "train: {batch_size: 4, steps: " + std::to_string(steps) + ", seed: " + std::to_string(seed) +
                      ", eval_every: 10, eval_batches: 2, threads: 2}\n",
                      "tiny", ".");
}

TEST(Trainer, LearnsAndWritesMetrics) {
  const auto metrics = testing::scratch_path("metrics.jsonl");
  TrainOptions opt;
  opt.metrics = metrics;
  opt.progress = nullptr;
  const TrainSummary s = train(tiny_config(40, 1), opt);
  EXPECT_EQ(s.steps, 40);
  EXPECT_LT(s.val_loss, 0.75 * s.val_loss_start);  // from ln(256) = 5.55 to byte statistics at least
  EXPECT_GT(s.tokens_per_s, 0);

  std::ifstream in(metrics);
  std::string line;
  int n = 0, with_val = 0;
  ASSERT_TRUE(std::getline(in, line));  // step 0's validation loss (Trainer.MetricsStartWithStepZerosValidationLoss)
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    ++n;
    EXPECT_EQ(j["step"], n);
    for (const char* key : {"loss", "lr", "tokens_per_s", "elapsed_s"}) EXPECT_TRUE(j.contains(key)) << key;
    if (j.contains("val_loss")) ++with_val;
  }
  EXPECT_EQ(n, 40);
  EXPECT_EQ(with_val, 4);  // steps 10, 20, 30, 40
  std::filesystem::remove(metrics);
}

TEST(Trainer, SameSeedSameLossesBitwise) {
  TrainOptions opt;
  opt.progress = nullptr;
  const TrainSummary a = train(tiny_config(6, 7), opt);
  const TrainSummary b = train(tiny_config(6, 7), opt);
  const TrainSummary c = train(tiny_config(6, 8), opt);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_NE(a.losses, c.losses);
}

TEST(Trainer, EveryAdamWPathTrainsBitwiseAlike) {
  unsetenv("FERRY_CPU_ISA");
  TrainOptions opt;
  opt.progress = nullptr;
  Config cfg = tiny_config(4, 3);
  cfg.optim.isa = "scalar";
  const TrainSummary scalar = train(cfg, opt);
  for (const char* isa : {"avx2", "avx512"}) {
    cfg.optim.isa = isa;
    try {
      EXPECT_EQ(train(cfg, opt).losses, scalar.losses) << isa;
    } catch (const std::runtime_error& e) {
      std::printf("%s: not run (%s)\n", isa, e.what());  // the CPU lacks it
    }
  }
}

TEST(Checkpoints, AStoppedRunResumesBitIdentically) {
  const auto root = testing::scratch_path("checkpoints");
  std::filesystem::remove_all(root);
  TrainOptions quiet;
  quiet.progress = nullptr;
  Config cfg = tiny_config(12, 5);
  cfg.train.checkpoint_every = 4;
  cfg.train.keep_checkpoints = 2;
  cfg.train.checkpoint_dir = root / "straight";
  const TrainSummary straight = train(cfg, quiet);
  ASSERT_EQ(straight.losses.size(), 12u);
  // step-8 and the final step-12 remain (keep 2); step-4 was removed.
  EXPECT_TRUE(std::filesystem::exists(root / "straight" / "step-00000012" / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(root / "straight" / "step-00000008"));
  EXPECT_FALSE(std::filesystem::exists(root / "straight" / "step-00000004"));

  cfg.train.checkpoint_dir = root / "stopped";
  TrainOptions stop = quiet;
  stop.stop_after = 6;  // as if killed right after step 6 was checkpointed
  const TrainSummary first = train(cfg, stop);
  EXPECT_TRUE(first.interrupted);
  ASSERT_EQ(first.losses.size(), 6u);
  TrainOptions resume = quiet;
  resume.resume = root / "stopped";
  const TrainSummary second = train(cfg, resume);
  ASSERT_EQ(second.losses.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(first.losses[i], straight.losses[i]) << "step " << i + 1;
    EXPECT_EQ(second.losses[i], straight.losses[6 + i]) << "step " << 7 + i;
  }

  // Another model, or a damaged file: clear errors.
  Config other = cfg;
  other.model.n_embd = 64;
  try {
    train(other, resume);
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
  const auto model_file = root / "stopped" / "step-00000012" / "model.safetensors";
  std::filesystem::resize_file(model_file, std::filesystem::file_size(model_file) / 2);
  EXPECT_THROW(train(cfg, resume), std::runtime_error);
  std::filesystem::remove_all(root);
}

TEST(Sample, ContinuesAPromptFromACheckpointDeterministically) {
  const auto root = testing::scratch_path("sample");
  std::filesystem::remove_all(root);
  TrainOptions quiet;
  quiet.progress = nullptr;
  Config cfg = tiny_config(30, 2);
  cfg.train.checkpoint_dir = root;
  train(cfg, quiet);
  cli::SampleOptions o;
  o.checkpoint = root;
  o.prompt = "The ";
  o.tokens = 40;
  o.seed = 9;
  const std::string a = cli::sample(o), b = cli::sample(o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 4u + 40u);
  EXPECT_EQ(a.rfind("The ", 0), 0u);
  o.seed = 10;
  EXPECT_NE(cli::sample(o), a);
  o.temperature = 0;  // greedy decoding ignores the seed
  const std::string g1 = cli::sample(o);
  o.seed = 11;
  EXPECT_EQ(cli::sample(o), g1);
  o.prompt = std::string(100, 'x');  // longer than the context (32): only the last 32 bytes condition
  EXPECT_EQ(cli::sample(o).size(), 140u);
  o.checkpoint = root / "nothing-here";
  EXPECT_THROW(cli::sample(o), std::runtime_error);

  // Export as a Hugging Face folder, then start a new run from it: it begins where the first one ended.
  formats::export_checkpoint(root, root / "hf");
  EXPECT_TRUE(std::filesystem::exists(root / "hf" / "config.json"));
  Config again = tiny_config(1, 2);
  again.model.init_from = root / "hf";
  const TrainSummary resumed_weights = train(again, quiet);
  const TrainSummary fresh = train(tiny_config(1, 2), quiet);
  EXPECT_LT(resumed_weights.val_loss_start, fresh.val_loss_start - 1.0f);
  std::filesystem::remove_all(root);
}

TEST(Trainer, CudaDeviceIsAClearErrorOnTheCpuBuild) {
  Config cfg = tiny_config(1, 1);
  cfg.device = "cuda";
  TrainOptions opt;
  opt.progress = nullptr;
  try {
    train(cfg, opt);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("device: cuda"), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry::engine

namespace ferry::engine {
namespace {

TEST(DefaultExperiment, ValidationLossEndsAtLeast40PercentBelowItsStart) {
  // The README's first command: configs/gpt-tiny.yaml as shipped (about two minutes on 2 cores).
  TrainOptions opt;
  opt.progress = nullptr;
  const TrainSummary s = train(load_config(testing::source_path("configs/gpt-tiny.yaml")), opt);
  std::printf("gpt-tiny: val loss %.4f -> %.4f in %.1f s, %.0f tokens/s\n", s.val_loss_start, s.val_loss, s.wall_s,
              s.tokens_per_s);
  EXPECT_LE(s.val_loss, 0.6f * s.val_loss_start);
}

}  // namespace
}  // namespace ferry::engine

// Bad input that only the data or the weights reveal: a [MASK] id the data uses, weights that are not
// finite (the loss says where they came from, not "lower optim.lr"; sample warns).
namespace ferry::engine {
namespace {

// A model's weights under their Hugging Face names, with one value replaced by `poison`.
void write_weights_with(const std::filesystem::path& file, const models::ModelConfig& model, float poison) {
  const models::ModelSpec spec = models::build_model(model, 1, model.seq_len);
  models::ParameterStore params(spec.params);
  models::init_model(model, spec, params, 1);
  params.value(2)[5] = poison;
  std::vector<formats::SafetensorsTensorRef> refs;
  for (int p = 0; p < params.count(); ++p) refs.push_back({spec.params[p].name, spec.params[p].shape, params.value(p).data()});
  formats::write_safetensors(file, refs);
}

std::string train_error(const Config& cfg, const TrainOptions& opt) {
  try {
    train(cfg, opt);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Trainer, NanWeightsAtTheStartAreBlamedOnTheirSourceNotTheLearningRate) {
  const auto root = testing::scratch_path("nan_weights");
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  TrainOptions quiet;
  quiet.progress = nullptr;
  Config cfg = tiny_config(3, 1);
  cfg.model.init_from = root / "nan.safetensors";
  write_weights_with(cfg.model.init_from, cfg.model, std::numeric_limits<float>::quiet_NaN());
  std::string err = train_error(cfg, quiet);
  EXPECT_NE(err.find("step 1: the loss is nan because the weights were not finite before training began (tensor "), std::string::npos) << err;
  EXPECT_NE(err.find("model.init_from, '" + cfg.model.init_from.string() + "'"), std::string::npos) << err;
  EXPECT_EQ(err.find("lower optim.lr"), std::string::npos) << err;

  // The same from a checkpoint resumed.
  cfg = tiny_config(3, 1);
  cfg.train.checkpoint_dir = root / "run";
  TrainOptions stop = quiet;
  stop.stop_after = 1;
  train(cfg, stop);
  write_weights_with(root / "run" / "step-00000001" / "model.safetensors", cfg.model, std::numeric_limits<float>::infinity());
  TrainOptions resume = quiet;
  resume.resume = root / "run";
  err = train_error(cfg, resume);
  EXPECT_NE(err.find("step 2: the loss is nan because the weights were not finite before training began (tensor "), std::string::npos) << err;
  EXPECT_NE(err.find("holds inf); they come from the checkpoint resumed"), std::string::npos) << err;

  // sample: the text of a checkpoint that is not finite comes with a warning naming the tensor.
  cli::SampleOptions o;
  o.checkpoint = root / "run";
  o.tokens = 3;
  ::testing::internal::CaptureStderr();
  cli::sample(o);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("ferry: warning: '"), std::string::npos) << warning;
  EXPECT_NE(warning.find("holds inf (element 5): the weights are not finite"), std::string::npos) << warning;
  std::filesystem::remove_all(root);
}

TEST(Trainer, BertMaskTokenIdThatTheDataUsesIsAnError) {
  TrainOptions quiet;
  quiet.progress = nullptr;
  Config cfg = tiny_config(1, 1);
  cfg.model.kind = "bert";
  cfg.model.vocab_size = 257;
  cfg.data.mask_token_id = 'e';  // a byte of the text
  EXPECT_NE(train_error(cfg, quiet).find("data.mask_token_id: 101 occurs in data.path '" + kText.string() + "' as a real token"),
            std::string::npos);
  cfg.data.mask_token_id = 256;  // no byte
  EXPECT_EQ(train_error(cfg, quiet), "(no error)");

  // A token shard: the id is looked for among its tokens.
  const auto shard = testing::scratch_path("mask_collision.bin");
  std::vector<int32_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 300);
  dataset::write_token_shard(shard, tokens);
  cfg.data.path = shard;
  cfg.model.vocab_size = 320;
  cfg.data.mask_token_id = 263;  // above a byte: only the tokens can hold it
  EXPECT_NE(train_error(cfg, quiet).find("data.mask_token_id: 263 occurs in data.path '" + shard.string() + "'"), std::string::npos);
  std::filesystem::remove(shard);
}

}  // namespace
}  // namespace ferry::engine

namespace ferry::engine {
namespace {

std::vector<nlohmann::json> metric_lines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(Trainer, MetricsStartWithStepZerosValidationLoss) {
  // The console prints step 0's validation loss; a learning curve drawn from the file starts there too,
  // once: a resumed run appends after it.
  const auto root = testing::scratch_path("step_zero");
  const auto metrics = root / "metrics.jsonl";
  std::filesystem::create_directories(root);
  Config cfg = tiny_config(4, 3);
  cfg.train.checkpoint_dir = root / "ckpt";
  TrainOptions opt;
  opt.progress = nullptr;
  opt.metrics = metrics;
  opt.stop_after = 2;
  const TrainSummary first = train(cfg, opt);
  opt.stop_after = 0;
  opt.resume = root / "ckpt";
  train(cfg, opt);
  const auto lines = metric_lines(metrics);
  ASSERT_EQ(lines.size(), 5u);  // step 0, then steps 1-2, then 3-4 resumed
  EXPECT_EQ(lines[0]["step"], 0);
  EXPECT_EQ(lines[0]["val_loss"].get<float>(), first.val_loss_start);
  EXPECT_FALSE(lines[0].contains("loss"));
  for (int i = 1; i < 5; ++i) EXPECT_EQ(lines[i]["step"], i);
  std::filesystem::remove_all(root);
}

TEST(Trainer, AMetricsWriteThatFailsIsAnErrorNamingTheFile) {
  TrainOptions opt;
  opt.progress = nullptr;
  opt.metrics = "/dev/full";  // every write fails as on a full disk
  try {
    train(tiny_config(2, 1), opt);
    ADD_FAILURE() << "a run whose metrics could not be written succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics: writing '/dev/full' failed: No space left on device"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ferry::engine
