// A run's batches (engine/batches.h): each training batch's windows and, for BERT, its masks drawn from the run's
// seed and the batch's own index, validation batches the same at every evaluation, GPT's batches unmasked.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "engine/batches.h"
#include "engine/config.h"
#include "test_helpers.h"

namespace ferry::engine {
namespace {

// Which positions of a batch are masked-LM targets.
std::vector<bool> targeted(const dataset::Batch& b) {
  std::vector<bool> t(b.targets.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = b.targets[i] != -100;
  return t;
}

TEST(Batches, EachBertBatchIsMaskedByTheSeedAndItsOwnIndex) {
  Progress quiet(nullptr);
  const Config cfg = load_config(testing::source_path("configs/bert-tiny.yaml"));
  const Batches batches(cfg, quiet);
  const dataset::Batch first = batches.train(0), again = batches.train(0), second = batches.train(1);
  EXPECT_EQ(first.tokens, again.tokens);
  EXPECT_EQ(first.targets, again.targets);
  // The windows differ from batch to batch, and so must the masked positions: a mask drawn without the batch's
  // index would put the same positions under [MASK] in every batch.
  EXPECT_NE(targeted(first), targeted(second));
  // The same windows as a GPT's batch of that index (data_.train_batch), masked: the targets are its tokens.
  const dataset::Batch windows = batches.data().train_batch(cfg.train.seed, 1, cfg.train.batch_size);
  int targets = 0;
  for (size_t i = 0; i < second.targets.size(); ++i) {
    if (second.targets[i] == -100) continue;
    EXPECT_EQ(second.targets[i], windows.tokens[i]) << i;
    ++targets;
  }
  EXPECT_GT(targets, 0);
  Config other_seed = cfg;
  other_seed.train.seed += 1;
  EXPECT_NE(targeted(Batches(other_seed, quiet).train(1)), targeted(second));
  // Validation: the same batch at every evaluation, and each of its batches masked apart.
  EXPECT_EQ(batches.val(0).targets, batches.val(0).targets);
  EXPECT_NE(targeted(batches.val(0)), targeted(batches.val(1)));
}

TEST(Batches, AGptBatchIsItsWindowsUnmasked) {
  Progress quiet(nullptr);
  const Config cfg = load_config(testing::source_path("configs/gpt-tiny.yaml"));
  const Batches batches(cfg, quiet);
  const dataset::Batch b = batches.train(3),
                       windows = batches.data().train_batch(cfg.train.seed, 3, cfg.train.batch_size);
  EXPECT_EQ(b.tokens, windows.tokens);
  EXPECT_EQ(b.targets, windows.targets);
}

}  // namespace
}  // namespace ferry::engine
