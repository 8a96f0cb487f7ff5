// Config parsing and validation: defaults, overrides, and an error that names the key, the value and what
// is allowed for every kind of bad input. The shipped configs must all load.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include "engine/config.h"
#include "engine/config_schema.h"
#include "memory/bucket_layout.h"
#include "test_helpers.h"

namespace ferry::engine {
namespace {

const std::filesystem::path kConfigs = testing::source_path("configs");

Config parse(const std::string& yaml, std::vector<std::string> overrides = {}) {
  return parse_config(yaml, "test.yaml", kConfigs, overrides);
}

std::string error_of(const std::string& yaml, std::vector<std::string> overrides = {}) {
  try {
    parse(yaml, overrides);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kMinimal = "data: {path: data/fortunes.txt}\n";

TEST(Config, MinimalFileGetsDefaultsAndResolvesTheDataPath) {
  const Config c = parse(kMinimal);
  EXPECT_EQ(c.model.kind, "gpt2");
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.data.path, kConfigs / "data/fortunes.txt");
  EXPECT_FLOAT_EQ(c.optim.min_lr, c.optim.lr / 10);
}

TEST(Config, OverridesApplyBeforeValidation) {
  const Config c = parse(kMinimal, {"train.steps=7", "optim.betas=[0.8, 0.99]", "device=cpu", "model.n_layer=3"});
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_DOUBLE_EQ(c.optim.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optim.beta2, 0.99);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(parse(kMinimal, {"offload.bucket_mb=8"}).offload.bucket_bytes, 8 << 20);
  EXPECT_EQ(parse(kMinimal, {"offload.bucket_mb=auto"}).offload.bucket_bytes, 0);
  EXPECT_EQ(parse(kMinimal, {"offload.gpu_budget=6GiB"}).offload.gpu_budget, int64_t(6) << 30);
  EXPECT_EQ(parse(kMinimal, {"offload.gpu_budget=48MiB"}).offload.gpu_budget, 48 << 20);
  EXPECT_EQ(parse_bytes("1.5GB"), 1500000000);
  EXPECT_THROW(parse_bytes("8 gigs"), std::invalid_argument);
  EXPECT_NE(error_of(kMinimal, {"train.steps"}).find("expected key=value"), std::string::npos);
}

TEST(Config, ErrorsNameTheKeyTheValueAndWhatIsAllowed) {
  struct Case {
    std::string yaml, needle;
  };
  const std::vector<Case> cases{
      {kMinimal + "model: {n_layers: 2}\n", "model.n_layers: unknown key; model takes kind, n_layer"},
      {kMinimal + "modle: {}\n", "modle: unknown section"},
      {kMinimal + "train: {steps: ten}\n", "train.steps: 'ten' is not an integer; expected an integer >= 1"},
      {kMinimal + "train: {steps: 0}\n", "train.steps: 0 is out of range; expected an integer >= 1"},
      {kMinimal + "train: {batch_size: 2.5}\n", "train.batch_size: '2.5' is not an integer"},
      {kMinimal + "optim: {lr: -1}\n", "optim.lr: -1 is out of range; expected a learning rate in [0, 10]"},
      {kMinimal + "optim: {betas: [0.9]}\n", "optim.betas:"},
      {kMinimal + "optim: {schedule: linear}\n", "optim.schedule: 'linear' is not allowed; expected one of cosine | constant"},
      {kMinimal + "optim: {isa: avx1024}\n", "optim.isa: 'avx1024' is not allowed; expected one of auto | scalar | avx2 | avx512"},
      {kMinimal + "optim: {cpu_threads: -2}\n", "optim.cpu_threads: -2 is out of range"},
      {kMinimal + "offload: {bucket_mb: lots}\n", "offload.bucket_mb: 'lots' is not allowed; expected auto or MiB"},
      {kMinimal + "offload: {gpu_budget: lots}\n", "offload.gpu_budget: 'lots' is not a size; expected e.g. 8GiB"},
      {kMinimal + "offload: {policy: magic}\n", "offload.policy: 'magic' is not allowed; expected one of resident | zero-offload | chunk-lru | greedy"},
      {kMinimal + "offload: {cost_model: nowhere.json}\n", "offload.cost_model: '"},
      {kMinimal + "train: {activation_checkpointing: sometimes}\n", "train.activation_checkpointing: 'sometimes' is not allowed"},
      {kMinimal + "model: {init_from: no/such/model}\n", "model.init_from: '"},
      {kMinimal + "device: tpu\n", "device: 'tpu' is not allowed; expected one of auto | cpu | cuda"},
      {kMinimal + "model: {n_embd: 65, n_head: 4}\n", "model.n_embd: 65 is not a multiple of model.n_head (4)"},
      {kMinimal + "model: {vocab_size: 100}\n", "model.vocab_size: 100 is smaller than the byte tokenizer's 256"},
      {"data: {path: data/fortunes.txt, val_fraction: 0.9}\n", "data.val_fraction: 0.9 is out of range"},
      {"data: {path: data/fortunes.txt, tokenizer: wordpiece}\n", "data.vocab: missing; data.tokenizer: wordpiece on text needs its vocab.txt"},
      {"data: {path: data/fortunes.txt, tokenizer: gpt2, vocab: data/fortunes.txt}\n", "data.merges: missing; data.tokenizer: gpt2 on text needs merges.txt"},
      {"data: {path: data/fortunes.txt, vocab: data/fortunes.txt}\n", "data.vocab: the byte tokenizer has no vocabulary file"},
      {"data: {path: data/fortunes.txt, tokenizer: sentencepiece}\n", "data.tokenizer: 'sentencepiece' is not allowed; expected one of byte | gpt2 | wordpiece"},
      {kMinimal + "data: {val_fraction: 0.1}\n", "data: section given twice"},
      {"data: {path: data/fortunes.txt, path: x}\n", "data.path: given twice"},
      {"data: {path: nowhere.txt}\n", "data.path: '" + (kConfigs / "nowhere.txt").string() + "' does not exist"},
      {"model: {}\n", "data.path: missing"},
      {"model: [1, 2\n", "invalid YAML at line"},
      {"- a\n- b\n", "the top level must be a mapping"},
  };
  for (const auto& c : cases) {
    const std::string err = error_of(c.yaml);
    EXPECT_NE(err.find(c.needle), std::string::npos) << "yaml: " << c.yaml << "\nerror: " << err;
    EXPECT_EQ(err.rfind("test.yaml: ", 0), 0u) << err;
  }
}

TEST(Config, InitMissingListsPartsInitFromMayLack) {
  // A Hugging Face folder whose config.json agrees with the default model section but for what `extra` sets.
  const auto dir = testing::scratch_path("config_hf");
  std::filesystem::create_directories(dir);
  const auto with_config = [&](const std::string& extra) {
    std::ofstream(dir / "config.json") << "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64" << extra << "}";
    return kMinimal + "model: {init_from: " + dir.string() + ", init_missing: [head]}\n";
  };
  EXPECT_EQ(parse(with_config("")).model.init_missing, std::vector<std::string>{"head"});
  EXPECT_TRUE(parse(kMinimal).model.init_missing.empty());
  EXPECT_NE(error_of(kMinimal + "model: {init_from: " + dir.string() + ", init_missing: [head, tail]}\n")
                .find("model.init_missing[1]: 'tail' is not allowed; expected one of head"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal + "model: {init_missing: [head]}\n").find("model.init_missing: says what model.init_from may lack"),
            std::string::npos);
  // config.json beside the weights is checked against what the model section states.
  with_config(", \"n_head\": 12");
  const std::string err = error_of(kMinimal + "model: {init_from: " + dir.string() + ", n_head: 4}\n");
  EXPECT_NE(err.find("model.init_from: " + (dir / "config.json").string() + ": n_head is 12, and model.n_head is 4"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

TEST(Config, DeviceIsAKindOrAMappingWithHostSettings) {
  EXPECT_EQ(parse(kMinimal + "device: cpu\n").device, "cpu");
  const Config m = parse(kMinimal + "device: {kind: cpu, host: {link_gbps: 12.5}}\n");
  EXPECT_EQ(m.device, "cpu");
  EXPECT_DOUBLE_EQ(m.host_device.link_gbps, 12.5);
  // --set reaches into the mapping, and turns the short form into it.
  const Config o = parse(kMinimal + "device: cpu\n", {"device.host.link_gbps=8"});
  EXPECT_EQ(o.device, "cpu");
  EXPECT_DOUBLE_EQ(o.host_device.link_gbps, 8);
  EXPECT_DOUBLE_EQ(parse(kMinimal, {"device.host.link_gbps=4"}).host_device.link_gbps, 4);
  EXPECT_NE(error_of(kMinimal + "device: {kind: cpu, host: {link_gpbs: 8}}\n").find("device.host.link_gpbs: unknown key; device.host takes link_gbps"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal + "device: {kind: tpu}\n").find("device.kind: 'tpu' is not allowed"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"data.path.x=1"}).find("--set data.path.x=1: data.path is a key, not a section"),
            std::string::npos)
      << error_of(kMinimal, {"data.path.x=1"});
}

// --steps and --seed are overrides of train.steps and train.seed: when the file's train is a value, not a
// section, the error says so, with its line, and names no --set the user never typed.
TEST(Config, AnOverrideIntoAFilesValueNamesTheFilesLine) {
  const std::string err = error_of(kMinimal + "train: fast\n", {"train.steps=2"});
  EXPECT_NE(err.find("test.yaml: train (line 2) is the value 'fast', not a section of keys, so train.steps=2 (from "
                     "--set, --steps or "
                     "--seed) has nowhere to go; write train as a mapping of keys, e.g. train: {steps: 2}"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("--set train.steps"), std::string::npos) << err;
  EXPECT_NE(
      error_of(kMinimal + "optim: [1, 2]\n", {"optim.lr=1e-3"}).find("optim (line 2) is a list, not a section of keys"),
      std::string::npos)
      << error_of(kMinimal + "optim: [1, 2]\n", {"optim.lr=1e-3"});
}

TEST(Config, BertNeedsRoomForItsMaskToken) {
  EXPECT_EQ(parse(kMinimal, {"model.kind=bert", "model.vocab_size=257"}).model.kind, "bert");
  EXPECT_NE(error_of(kMinimal, {"model.kind=bert", "model.vocab_size=256"}).find("plus BERT's [MASK]; use at least 257"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.kind=t5"}).find("model.kind: 't5' is not allowed; expected one of gpt2 | bert"),
            std::string::npos);
}

TEST(Config, OffloadOverlapAndPrecision) {
  const Config c = parse(kMinimal, {"offload.overlap=delayed", "offload.sync_steps=5", "train.precision=fp16",
                                    "train.loss_scale_init=1024", "train.loss_scale_growth_interval=50"});
  EXPECT_EQ(c.offload.overlap, "delayed");
  EXPECT_EQ(c.offload.sync_steps, 5);
  EXPECT_EQ(c.train.precision, "fp16");
  EXPECT_EQ(c.train.loss_scale_init, 1024);
  EXPECT_EQ(c.train.loss_scale_growth_interval, 50);
  EXPECT_EQ(parse(kMinimal, {"offload.overlap=pipelined"}).offload.overlap, "pipelined");
  EXPECT_NE(error_of(kMinimal, {"offload.overlap=pipelind"})
                .find("offload.overlap: 'pipelind' is not allowed; expected one of backward | delayed | pipelined"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"train.loss_scale_init=1000"}).find("expected a power of two"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"train.precision=fp8"}).find("train.precision"), std::string::npos);
}

TEST(Config, ChecksAcrossKeysNameBothKeys) {
  EXPECT_NE(error_of(kMinimal, {"model.kind=bert", "model.vocab_size=257", "data.mask_token_id=257"})
                .find("data.mask_token_id: 257 is not below model.vocab_size 257"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"optim.lr=0.001", "optim.min_lr=0.01"}).find("optim.min_lr: 0.010000 is above optim.lr"),
            std::string::npos);
  // A token shard may have a vocabulary smaller than the byte tokenizer's (the shard's own tokenizer made it).
  EXPECT_NE(error_of(kMinimal, {"data.path=data/tokens.bin", "model.vocab_size=100"}).find("data.path: '"), std::string::npos);
}

// YAML's .nan and .inf decode as numbers that pass or fail range checks for the wrong reason: every
// floating-point key refuses them and names itself.
TEST(Config, EveryNumberRefusesNanAndInfinities) {
  const std::vector<std::string> keys{"optim.lr", "optim.min_lr", "optim.eps", "optim.weight_decay", "optim.grad_clip",
                                      "data.val_fraction", "device.host.link_gbps", "offload.bucket_mb",
                                      "train.loss_scale_init"};
  for (const std::string& key : keys)
    for (const char* value : {".nan", ".inf", "-.inf", ".NaN"}) {
      const std::string err = error_of(kMinimal, {key + "=" + value});
      EXPECT_NE(err.find("test.yaml: " + key + ": "), std::string::npos) << key << "=" << value << ": " << err;
      EXPECT_NE(err.find("expected"), std::string::npos) << err;
    }
  EXPECT_NE(error_of(kMinimal, {"optim.lr=.nan"}).find("optim.lr: .nan is not a finite number; expected a learning rate in [0, 10]"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"optim.grad_clip=.nan"}).find("optim.grad_clip: .nan is not a finite number"), std::string::npos);
  for (const char* betas : {"optim.betas=[.nan, 0.9]", "optim.betas=[0.9, .nan]"})
    EXPECT_NE(error_of(kMinimal, {betas}).find("optim.betas: "), std::string::npos) << betas;
}

// A value beyond its field's type is out of range (and says the largest allowed), not "not an integer".
TEST(Config, IntegersTooLargeAreOutOfRangeWithTheirBound) {
  EXPECT_NE(error_of(kMinimal, {"train.steps=3000000000"}).find("train.steps: 3000000000 is out of range; expected an integer >= 1 (at most 2147483647)"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"train.batch_size=2000000"}).find("train.batch_size: 2000000 is out of range; expected an integer in [1, 1048576]"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.n_layer=99999999999999999999"}).find("model.n_layer: 99999999999999999999 is out of range; expected an integer in [1, 1024]"),
            std::string::npos);
  EXPECT_EQ(parse(kMinimal, {"train.seed=18446744073709551615"}).train.seed, 18446744073709551615ull);
  EXPECT_NE(error_of(kMinimal, {"train.seed=18446744073709551616"}).find("train.seed: 18446744073709551616 is out of range; expected an integer >= 0 (at most 18446744073709551615)"),
            std::string::npos);
  // Below the range: no upper bound in the message.
  EXPECT_TRUE(error_of(kMinimal, {"train.seed=-1"}).ends_with("train.seed: -1 is out of range; expected an integer >= 0"))
      << error_of(kMinimal, {"train.seed=-1"});
  EXPECT_TRUE(error_of(kMinimal, {"train.steps=-2147483649"}).ends_with("train.steps: -2147483649 is out of range; expected an integer >= 1"))
      << error_of(kMinimal, {"train.steps=-2147483649"});
  EXPECT_EQ(parse(kMinimal, {"train.seed=-0"}).train.seed, 0u);
  EXPECT_NE(error_of(kMinimal, {"train.steps=1e3"}).find("train.steps: '1e3' is not an integer"), std::string::npos);
}

// A budget of 0 bytes, or one the bytes cannot hold, is an error naming the key and which end it is beyond,
// never "unset" or "not a size".
TEST(Config, BudgetsAreValidated) {
  for (const char* budget : {"0", "0B", "0.4", "0GiB", "1e-400MiB"}) {
    const std::string err = error_of(kMinimal, {std::string("offload.gpu_budget=") + budget});
    EXPECT_NE(err.find(std::string("offload.gpu_budget: '") + budget + "' is too small: a size is at least 1 byte"),
              std::string::npos)
        << budget << ": " << err;
  }
  for (const char* budget :
       {"9223372036854775808", "2e19", "10000000TB", "1e400", "8EiB", "9EiB", "8192PiB", "9.3EB"}) {
    const std::string err = error_of(kMinimal, {std::string("offload.gpu_budget=") + budget});
    EXPECT_NE(err.find(std::string("offload.gpu_budget: '") + budget +
                       "' is too large: a size is at most 2^63 - 1 bytes (just under 8 EiB)"),
              std::string::npos)
        << budget << ": " << err;
  }
  EXPECT_EQ(parse_bytes("7.99EiB"), int64_t(7.99 * 0x1p60));
  EXPECT_EQ(parse_bytes("2PiB"), int64_t(1) << 51);
  EXPECT_EQ(parse_bytes("9EB"), int64_t(9) * 1000000000000000000);
  for (const char* budget : {"nan", "inf", ".inf", "-1GiB", "+8GiB", " 8GiB", "0x10", "8 gigs", ""}) {
    const std::string err = error_of(kMinimal, {std::string("offload.gpu_budget='") + budget + "'"});
    EXPECT_NE(err.find("' is not a size; expected e.g. 8GiB"), std::string::npos) << budget << ": " << err;
  }
  EXPECT_EQ(parse(kMinimal, {"offload.gpu_budget=9223372036854775807"}).offload.gpu_budget, INT64_MAX);
  EXPECT_EQ(parse(kMinimal, {"offload.gpu_budget=1"}).offload.gpu_budget, 1);
  EXPECT_EQ(parse(kMinimal, {"offload.gpu_budget=1.5 GiB"}).offload.gpu_budget, int64_t(3) << 29);
  EXPECT_EQ(parse(kMinimal).offload.gpu_budget, 0);  // absent: unset
  EXPECT_THROW(parse_bytes("0"), std::invalid_argument);
  // auto is "not given" (0), which the run resolves; a size that does not parse says auto is allowed too.
  EXPECT_EQ(parse(kMinimal, {"offload.gpu_budget=6GiB", "offload.gpu_budget=auto"}).offload.gpu_budget, 0);
  EXPECT_NE(error_of(kMinimal, {"offload.gpu_budget=lots"}).find("offload.gpu_budget: 'lots' is not a size; expected e.g. 8GiB, 512MiB or 1.5GB; or auto"),
            std::string::npos) << error_of(kMinimal, {"offload.gpu_budget=lots"});
}

// An epsilon divides: one that fp32 rounds away (0, or 1e-50 as the kernels' float) made a weight
// without a gradient yet 0 / 0, a NaN blamed on the learning rate; AdamW's and LayerNorm's are floored alike.
TEST(Config, EpsilonsStayWhereFp32KeepsThem) {
  const std::string allowed = "expected a number >= 1e-30 (a smaller one vanishes in fp32, and 0 / 0 is NaN)";
  for (const char* eps : {"0", "1e-50", "9e-31"}) {
    EXPECT_TRUE(error_of(kMinimal, {std::string("optim.eps=") + eps})
                    .ends_with(std::string("optim.eps: ") + eps + " is out of range; " + allowed))
        << error_of(kMinimal, {std::string("optim.eps=") + eps});
    EXPECT_NE(error_of(kMinimal, {std::string("model.layer_norm_eps=") + eps})
                  .find(std::string("model.layer_norm_eps: ") + eps + " is out of range; "),
              std::string::npos);
  }
  EXPECT_NE(error_of(kMinimal, {"optim.eps=-1e-8"}).find("optim.eps: -1e-8 is out of range"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.layer_norm_eps=1e-50"})
                .find("expected a number in [1e-30, 1] (a smaller one vanishes in fp32"),
            std::string::npos)
      << error_of(kMinimal, {"model.layer_norm_eps=1e-50"});
  EXPECT_DOUBLE_EQ(parse(kMinimal, {"optim.eps=1e-30"}).optim.eps, 1e-30);
  EXPECT_DOUBLE_EQ(parse(kMinimal, {"optim.eps=2"}).optim.eps, 2);
  EXPECT_DOUBLE_EQ(parse(kMinimal, {"model.layer_norm_eps=1e-30"}).model.layer_norm_eps, 1e-30);
}

// Decoupled weight decay scales each weight by 1 - lr * weight_decay a step: at lr * weight_decay >= 1 every
// weight is zeroed or flipped whatever its gradient (lr 10, weight_decay 10 trained to a val loss of 45).
TEST(Config, WeightDecayTimesTheLearningRateStaysBelowOne) {
  EXPECT_NE(error_of(kMinimal, {"optim.lr=10", "optim.weight_decay=10"})
                .find("optim.weight_decay: 10 with optim.lr 10 multiplies every weight by 1 - 10 * 10 = -99 each step "
                      "(decoupled weight "
                      "decay), flipping the sign of it whatever its gradient; keep the learning rate times "
                      "weight_decay below 1"),
            std::string::npos)
      << error_of(kMinimal, {"optim.lr=10", "optim.weight_decay=10"});
  EXPECT_NE(error_of(kMinimal, {"optim.lr=0.5", "optim.weight_decay=2"})
                .find("= 0 each step (decoupled weight decay), zeroing it"),
            std::string::npos);
  EXPECT_NE(
      error_of(kMinimal, {"optim.lr=0.01",
                          "optim.groups=[{params: \"*.bias\", weight_decay: 0}, {params: \"*\", lr_scale: 1000}]"})
          .find("optim.groups[1].weight_decay: 0.1 with its learning rate 10 (optim.lr 0.01 times lr_scale 1000) "
                "multiplies"),
      std::string::npos)
      << error_of(kMinimal, {"optim.lr=0.01",
                             "optim.groups=[{params: \"*.bias\", weight_decay: 0}, {params: \"*\", lr_scale: 1000}]"});
  EXPECT_DOUBLE_EQ(parse(kMinimal, {"optim.lr=9", "optim.weight_decay=0.1"}).optim.weight_decay, 0.1);
  EXPECT_EQ(parse(kMinimal, {"optim.lr=0.01", "optim.groups=[{params: \"*\", lr_scale: 1000, weight_decay: 0}]"})
                .optim.groups.size(),
            1u);
}

// A warmup longer than the run is allowed (a short trial of a long run's settings) but warned of: the
// learning rate never reaches optim.lr.
TEST(Config, WarmupBeyondTheStepsIsWarnedOf) {
  const std::vector<std::string> warnings = config_warnings(parse(kMinimal, {"optim.warmup_steps=400", "train.steps=100", "optim.lr=0.001"}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "optim.warmup_steps: 400 is more than train.steps (100): the run ends inside the warmup, and the learning "
                         "rate never reaches optim.lr (0.001), only 0.00025 (25% of it) at the last step; lower optim.warmup_steps "
                         "to at most 100 or raise train.steps");
  EXPECT_TRUE(config_warnings(parse(kMinimal, {"optim.warmup_steps=100", "train.steps=100"})).empty());  // lr at the last step
  EXPECT_TRUE(config_warnings(parse(kMinimal)).empty());
}

TEST(Config, MaskTokenIdAppliesToBertOnly) {
  EXPECT_NE(error_of(kMinimal, {"data.mask_token_id=5"}).find("data.mask_token_id: applies to model.kind: bert only"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"data.mask_token_id=-1"}).find("data.mask_token_id: applies to model.kind: bert only"),
            std::string::npos);
  EXPECT_EQ(parse(kMinimal, {"model.kind=bert", "model.vocab_size=1000", "data.mask_token_id=4"}).data.mask_token_id, 4);
}

// The plan and the trainer read these two defaults from the config, so they agree.
TEST(Config, ThreadsAndBucketBytesResolveTheirDefaults) {
  const Config defaults = parse(kMinimal);
  EXPECT_EQ(defaults.threads(), static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(defaults.bucket_bytes(), memory::BucketLayout::kDefaultBucketBytes);
  const Config given = parse(kMinimal, {"train.threads=3", "offload.bucket_mb=8"});
  EXPECT_EQ(given.threads(), 3);
  EXPECT_EQ(given.bucket_bytes(), 8 << 20);
}

TEST(Config, EveryShippedConfigLoads) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_config(entry.path()));
    ++n;
  }
  EXPECT_GE(n, 2);
  EXPECT_THROW(load_config(kConfigs / "does-not-exist.yaml"), std::runtime_error);
}

// A Hugging Face folder (tests/data/make_hf_variant_reference.py: a BertModel with intermediate size 96,
// eps 1e-3, gelu_new, 3 token types, 40 positions) and a YAML that gives only the kind and init_from.
const std::string kVariantModel = "model: {kind: bert, init_from: " + testing::data_path("hf_bert_variant").string() + ", init_missing: [head]";

TEST(Config, InitFromConfigJsonGivesTheWholeModelSection) {
  const Config c = parse(kMinimal + kVariantModel + "}\ntrain: {seq_len: 32}\n");
  const models::ModelConfig& m = c.model;
  EXPECT_EQ(m.kind, "bert");
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.n_head, 4);
  EXPECT_EQ(m.n_embd, 32);
  EXPECT_EQ(m.vocab_size, 260);
  EXPECT_EQ(m.seq_len, 40);
  EXPECT_EQ(m.mlp_width(), 96);
  EXPECT_DOUBLE_EQ(m.norm_eps(), 1e-3);
  EXPECT_EQ(m.gelu(), "gelu_tanh");
  EXPECT_EQ(m.type_vocab_size, 3);
  EXPECT_EQ(c.sequence(), 32);
  // The kind too: a YAML with only init_from.
  const std::string only_init_from = "model: {init_from: " + testing::data_path("hf_bert_variant").string() + ", init_missing: [head]}\n";
  EXPECT_EQ(parse(kMinimal + only_init_from).model.kind, "bert");
  // Stating a value config.json also gives, equal, is allowed (from the file or --set).
  EXPECT_EQ(parse(kMinimal + kVariantModel + ", n_embd: 32, activation: gelu_tanh}\n", {"model.layer_norm_eps=0.001"}).model.n_embd, 32);
}

// The tokenizer files taken from model.init_from's folder, and the tokenizer_config.json beside data.vocab,
// are read only when they are regular files inside their folder; a FIFO anywhere a file is named is refused
// by name, never read (which would wait for a writer for ever).
TEST(Config, TokenizerFilesAreRegularFilesInsideTheirFolder) {
  namespace fs = std::filesystem;
  const fs::path root = testing::scratch_path("config_tokenizer_files"), dir = root / "model";
  fs::remove_all(root);
  fs::create_directories(dir);
  fs::copy_file(testing::data_path("hf_bert_variant") / "config.json", dir / "config.json");
  const std::string yaml = kMinimal + "model: {init_from: " + dir.string() + ", init_missing: [head]}\n";
  const auto fifo = [](const fs::path& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path; };
  fifo(dir / "vocab.txt");
  std::string err =
      testing::error_without_blocking(dir / "vocab.txt", [&] { parse(yaml, {"data.tokenizer=wordpiece"}); });
  EXPECT_NE(err.find("test.yaml: model.init_from: '" + (dir / "vocab.txt").string() +
                     "' is a FIFO (a named pipe), not a file"),
            std::string::npos)
      << err;
  fs::remove(dir / "vocab.txt");
  fs::copy_file(testing::data_path("hf_sentence_transformer") / "vocab.txt", root / "vocab.txt");
  fs::create_symlink(root / "vocab.txt", dir / "vocab.txt");
  err = error_of(yaml, {"data.tokenizer=wordpiece"});
  EXPECT_NE(err.find("model.init_from: '" + (dir / "vocab.txt").string() + "' is a link to '" +
                     (root / "vocab.txt").string() + "', outside the folder"),
            std::string::npos)
      << err;
  fs::remove(dir / "vocab.txt");
  fs::rename(root / "vocab.txt", dir / "vocab.txt");
  EXPECT_EQ(parse(yaml, {"data.tokenizer=wordpiece"}).data.vocab, dir / "vocab.txt");
  fifo(dir / "tokenizer_config.json");  // data.lowercase: auto reads it
  err = testing::error_without_blocking(dir / "tokenizer_config.json",
                                        [&] { parse(yaml, {"data.tokenizer=wordpiece"}); });
  EXPECT_NE(err.find("data.lowercase: auto reads the tokenizer_config.json beside data.vocab: '" +
                     (dir / "tokenizer_config.json").string() + "' is a FIFO (a named pipe), not a file"),
            std::string::npos)
      << err;
  EXPECT_EQ(parse(yaml, {"data.tokenizer=wordpiece", "data.lowercase=true"}).data.lowercase, "true");
  // Named by a key, or as the config file itself.
  EXPECT_NE(error_of(kMinimal, {"data.tokenizer=wordpiece", "data.vocab=" + (dir / "tokenizer_config.json").string()})
                .find("data.vocab: '" + (dir / "tokenizer_config.json").string() +
                      "' is a FIFO (a named pipe), not a file; name a regular file"),
            std::string::npos);
  err = testing::error_without_blocking(dir / "tokenizer_config.json",
                                        [&] { load_config(dir / "tokenizer_config.json"); });
  EXPECT_NE(err.find("the config file: '" + (dir / "tokenizer_config.json").string() + "' is a FIFO"),
            std::string::npos)
      << err;
  fs::remove_all(root);
}

// A tokenizer.json given as data.vocab under another name is named as what it is, with what to give instead
// (not "token '    {' appears twice", nor "data.merges: missing" for gpt2).
TEST(Config, ATokenizerJsonUnderAnotherNameIsRecognised) {
  namespace fs = std::filesystem;
  const fs::path dir = testing::scratch_path("config_renamed_tokenizer_json");
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(testing::data_path("hf_roundtrip/bert_pretraining/tokenizer.json"), dir / "bert-tokenizer.json");
  const std::string vocab = "data.vocab=" + (dir / "bert-tokenizer.json").string();
  for (const auto& [kind, expected, instead] :
       {std::tuple{"wordpiece", "vocab.txt", "vocab.txt"}, {"gpt2", "vocab.json", "vocab.json and merges.txt"}}) {
    const std::string err = error_of(kMinimal, {std::string("data.tokenizer=") + kind, vocab});
    EXPECT_NE(err.find(std::string("data.vocab: '") + (dir / "bert-tokenizer.json").string() +
                       "' is a Hugging Face tokenizer.json under another name, not a " + expected +
                       "; Ferry tells a tokenizer.json by its name: give it as tokenizer.json"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(std::string("or give the ") + instead + " it was saved with"), std::string::npos) << err;
  }
  fs::rename(dir / "bert-tokenizer.json", dir / "tokenizer.json");
  EXPECT_EQ(parse(kMinimal, {"data.tokenizer=wordpiece", "data.vocab=" + (dir / "tokenizer.json").string()})
                .data.vocab.filename(),
            "tokenizer.json");
  fs::remove_all(dir);
}

// data.tokenizer: hf reads a tokenizer.json under any name (no "renamed" error), from model.init_from's folder
// when data.vocab is not given; it holds its merges, so data.merges is refused.
TEST(Config, AnHfTokenizerIsATokenizerJsonFromDataVocabOrTheSourceFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = testing::scratch_path("config_hf_tokenizer"), model = dir / "model";
  fs::remove_all(dir);
  fs::create_directories(model);
  fs::copy_file(testing::data_path("hf_tokenizers/llama3/tokenizer.json"), dir / "llama3.json");
  EXPECT_EQ(parse(kMinimal, {"data.tokenizer=hf", "data.vocab=" + (dir / "llama3.json").string()}).data.vocab,
            dir / "llama3.json");
  EXPECT_NE(error_of(kMinimal, {"data.tokenizer=hf", "data.vocab=" + (dir / "llama3.json").string(),
                                "data.merges=" + testing::data_path("bpe_merges.txt").string()})
                .find("data.merges: a tokenizer.json holds its merges; remove the key"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"data.tokenizer=hf"})
                .find("data.vocab: missing; data.tokenizer: hf on text needs its tokenizer.json; or set "
                      "model.init_from"),
            std::string::npos);
  fs::copy_file(testing::data_path("hf_gpt2_variant") / "config.json", model / "config.json");
  fs::copy_file(testing::data_path("hf_tokenizers/llama3/tokenizer.json"), model / "tokenizer.json");
  const std::string yaml = kMinimal + "model: {init_from: " + model.string() + "}\n";
  EXPECT_EQ(parse(yaml, {"data.tokenizer=hf"}).data.vocab, model / "tokenizer.json");
  fs::remove_all(dir);
}

TEST(Config, AYamlValueConfigJsonContradictsIsAnErrorNamingBoth) {
  const std::string file = (testing::data_path("hf_bert_variant") / "config.json").string();
  struct Case {
    std::string yaml;
    std::vector<std::string> overrides;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {kVariantModel + ", n_embd: 64}\n", {}, "model.init_from: " + file + ": hidden_size is 32, and model.n_embd is 64"},
           {kVariantModel + "}\n", {"model.layer_norm_eps=1e-12"}, "layer_norm_eps is 0.001, and model.layer_norm_eps is 1e-12"},
           {kVariantModel + ", activation: gelu}\n", {}, "hidden_act is \"gelu_new\", and model.activation is gelu"},
           {kVariantModel + ", intermediate_size: 128}\n", {}, "intermediate_size is 96, and model.intermediate_size is 128"},
           {kVariantModel + ", seq_len: 512}\n", {}, "max_position_embeddings is 40, and model.seq_len is 512"},
           {"model: {kind: gpt2, init_from: " + testing::data_path("hf_bert_variant").string() + "}\n", {},
            "model_type is \"bert\", and model.kind is gpt2"},
       }) {
    const std::string err = error_of(kMinimal + c.yaml, c.overrides);
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
  // Checks across keys see the filled section: train.seq_len beyond config.json's 40 positions.
  EXPECT_NE(error_of(kMinimal + kVariantModel + "}\ntrain: {seq_len: 64}\n").find("train.seq_len: 64 is beyond model.seq_len 40"),
            std::string::npos);
}

TEST(Config, TheModelsNumericChoicesAreKeysOfTheirOwn) {
  const Config c = parse(kMinimal + "model: {kind: bert, vocab_size: 300, intermediate_size: 100, layer_norm_eps: 1e-6, activation: gelu_tanh, "
                                    "type_vocab_size: 1}\n");
  EXPECT_EQ(c.model.mlp_width(), 100);
  EXPECT_DOUBLE_EQ(c.model.norm_eps(), 1e-6);
  EXPECT_EQ(c.model.gelu(), "gelu_tanh");
  EXPECT_EQ(c.model.type_vocab_size, 1);
  const models::ModelConfig gpt = parse(kMinimal).model;  // unset: what GPT-2 always computed with
  EXPECT_EQ(gpt.mlp_width(), 4 * gpt.n_embd);
  EXPECT_DOUBLE_EQ(gpt.norm_eps(), 1e-5);
  EXPECT_EQ(gpt.gelu(), "gelu_tanh");
  const models::ModelConfig bert = parse(kMinimal + "model: {kind: bert, vocab_size: 300}\n").model;
  EXPECT_DOUBLE_EQ(bert.norm_eps(), 1e-12);
  EXPECT_EQ(bert.gelu(), "gelu");
  struct Case {
    std::string yaml, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"model: {activation: relu}\n", "model.activation: 'relu' is not allowed; expected one of gelu | gelu_tanh"},
           {"model: {layer_norm_eps: 0}\n", "model.layer_norm_eps: 0 is out of range; expected a number in [1e-30, 1]"},
           {"model: {intermediate_size: 0}\n", "model.intermediate_size: 0 is out of range"},
           {"model: {type_vocab_size: 3}\n", "model.type_vocab_size: applies to model.kind: bert only"},
       }) {
    const std::string err = error_of(kMinimal + c.yaml);
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
}

// model.kind llama: its keys (Hugging Face's names), applying to it alone, and the errors that say the fix.
TEST(Config, LlamaKeysAndTheirErrors) {
  const Config c = parse(kMinimal +
                         "model: {kind: llama, n_head: 8, num_key_value_heads: 2, n_embd: 64, intermediate_size: 96, "
                         "rms_norm_eps: 1e-5, rope_theta: 500000, tie_word_embeddings: true, attention_bias: true, "
                         "rope_scaling: {rope_type: llama3, factor: 32, original_max_position_embeddings: 4096}}\n");
  EXPECT_EQ(c.model.kv_heads(), 2);
  EXPECT_DOUBLE_EQ(c.model.norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000);
  EXPECT_EQ(c.model.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.model.rope_scaling.factor, 32);
  EXPECT_DOUBLE_EQ(c.model.rope_scaling.high_freq_factor, 4);  // Llama 3's default where unstated
  EXPECT_EQ(c.model.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_TRUE(c.model.tie_word_embeddings && c.model.attention_bias);
  const models::ModelConfig plain = parse(kMinimal + "model: {kind: llama}\n").model;
  EXPECT_EQ(plain.kv_heads(), plain.n_head);
  EXPECT_DOUBLE_EQ(plain.norm_eps(), 1e-6);  // LlamaConfig's default
  EXPECT_EQ(plain.rope().factor, 0.0f);      // rope_type default: no scaling
  EXPECT_NE(config_hash(parse(kMinimal + "model: {kind: llama, rope_theta: 500000}\n")),
            config_hash(parse(kMinimal + "model: {kind: llama}\n")));
  struct Case {
    std::string yaml, needle;
  };
  for (const Case& e : std::vector<Case>{
           {"model: {kind: llama, n_head: 4, num_key_value_heads: 3}\n",
            "model.num_key_value_heads: 3 does not divide model.n_head (4); each key/value head serves a whole number "
            "of query heads: "
            "set a divisor of 4"},
           {"model: {kind: llama, n_head: 4, n_embd: 36}\n", "model.n_embd: the head size 36 / 4 = 9 is odd"},
           {"model: {num_key_value_heads: 2}\n",
            "model.num_key_value_heads: applies to model.kind: llama only (this is gpt2); remove the key"},
           {"model: {kind: bert, vocab_size: 300, rope_scaling: {factor: 2}}\n",
            "model.rope_scaling.factor: applies to model.kind: llama only"},
           {"model: {kind: llama, layer_norm_eps: 1e-5}\n",
            "model.layer_norm_eps: applies to model.kind: gpt2 or bert only (this is llama)"},
           {"model: {kind: llama, activation: gelu}\n", "model.activation: applies to model.kind: gpt2 or bert only"},
           {"model: {kind: llama, rope_scaling: {rope_type: yarn}}\n",
            "model.rope_scaling.rope_type: 'yarn' is not allowed; expected one of default | llama3"},
       }) {
    const std::string err = error_of(kMinimal + e.yaml);
    EXPECT_NE(err.find(e.needle), std::string::npos) << err;
  }
}

// Configs that do not name the new choices build the model they built before, and keep their hash: the
// parameter count of the old shapes, and no new identity key.
TEST(Config, ShippedConfigsKeepTheirModelAndTheirHash) {
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const Config c = load_config(entry.path());
    if (c.model.kind == "llama") continue;  // new with its choices: nothing older to keep
    const int64_t V = c.model.vocab_size, P = c.model.seq_len, C = c.model.n_embd, L = c.model.n_layer;
    const int64_t blocks = L * (12 * C * C + 13 * C);
    const int64_t old_count = c.model.kind == "bert" ? V * C + P * C + 4 * C + blocks + V + C * C + 3 * C : V * C + P * C + blocks + 2 * C;
    EXPECT_EQ(models::build_model(c.model, 1, 1).param_count(), old_count);
    for (const auto& [key, value] : config_identity(c))
      for (const char* added : {"model.intermediate_size", "model.layer_norm_eps", "model.activation", "model.type_vocab_size"})
        EXPECT_NE(key, added);
  }
  // A choice that differs from the old one is part of the identity: a checkpoint of the other refuses to resume.
  const Config plain = parse(kMinimal);
  for (const char* set : {"model.intermediate_size=100", "model.layer_norm_eps=1e-6", "model.activation=gelu"})
    EXPECT_NE(config_hash(parse(kMinimal, {set})), config_hash(plain)) << set;
  EXPECT_EQ(config_hash(parse(kMinimal, {"model.intermediate_size=256", "model.layer_norm_eps=1e-5", "model.activation=gelu_tanh"})),
            config_hash(plain));
}

// The table is the only list of keys: every key it documents is read (a value of the wrong shape is an error
// naming that key), and the help text and docs/config.md show every one.
TEST(ConfigSchema, EveryKeyInTheTableIsReadCheckedAndDocumented) {
  const std::string text = config_keys_text(), markdown = config_markdown();
  int read = 0;
  for (const ConfigKey& key : config_keys()) {
    SCOPED_TRACE(key.name);
    EXPECT_FALSE(key.type.empty() || key.allowed.empty() || key.default_value.empty() || key.meaning.empty());
    EXPECT_NE(markdown.find("| `" + key.name + "` | " + key.type + " | "), std::string::npos);
    const std::string section = key.name.substr(0, key.name.find('.'));
    EXPECT_NE(text.find("  " + (key.name == section ? key.name : key.name.substr(section.size() + 1)) + " ("), std::string::npos);
    if (key.name.starts_with("optim.groups[]")) continue;  // an entry's keys: below
    const std::string err = error_of(kMinimal, {key.name + "=[[1]]"});
    EXPECT_EQ(err.rfind("test.yaml: " + key.name, 0), 0u) << err;
    ++read;
  }
  EXPECT_GT(read, 50);
  for (const char* entry : {"params: [1]", "frozen: [1]", "lr_scale: [1]", "weight_decay: [1]"}) {
    const std::string err = error_of(kMinimal + "optim: {groups: [{params: \"cls.*\", " + entry + "}]}\n");
    EXPECT_EQ(err.rfind("test.yaml: optim.groups[0]." + std::string(entry).substr(0, std::string(entry).find(':')) + ": ", 0), 0u) << err;
  }
}

TEST(ConfigSchema, DefaultsComeFromTheConfigStructs) {
  const auto default_of = [](const std::string& name) {
    for (const ConfigKey& key : config_keys())
      if (key.name == name) return key.default_value;
    return std::string("(no such key)");
  };
  EXPECT_EQ(default_of("optim.lr"), "0.0003");
  EXPECT_EQ(default_of("optim.eps"), "1e-8");
  EXPECT_EQ(default_of("optim.betas"), "[0.9, 0.95]");
  EXPECT_EQ(default_of("train.seed"), "1337");
  EXPECT_EQ(default_of("model.layer_norm_eps"), "gpt2 1e-5, bert 1e-12");
  EXPECT_EQ(default_of("offload.gpu_budget"), "auto");
  EXPECT_EQ(default_of("device"), "auto");
}

}  // namespace
}  // namespace ferry::engine
