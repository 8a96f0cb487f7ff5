// Datasets: text windows split into train and validation, deterministic batches, masked-LM batches.
#include <gtest/gtest.h>

#include <filesystem>

#include "dataset/dataset.h"
#include "test_helpers.h"

namespace ferry::dataset {
namespace {

const auto kText = testing::source_path("configs/data/fortunes.txt");

TEST(TextDataset, SplitsAndSamplesDeterministicWindows) {
  const TextDataset d(kText, 0.1, 16);
  EXPECT_EQ(d.train_tokens() + d.val_tokens(), static_cast<int64_t>(std::filesystem::file_size(kText)));
  const Batch a = d.train_batch(5, 3, 4), b = d.train_batch(5, 3, 4), c = d.train_batch(5, 4, 4);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
  ASSERT_EQ(a.tokens.size(), 64u);
  for (int row = 0; row < 4; ++row)
    for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(a.targets[row * 16 + t], a.tokens[row * 16 + t + 1]);
  const Batch v = d.val_batch(1, 2, 4);
  EXPECT_EQ(v.tokens.size(), 64u);
  EXPECT_THROW(TextDataset(kText, 0.1, 1 << 22), std::runtime_error);  // longer than the text
}

TEST(MaskedLm, ChoosesFifteenPercentAndMasksEightyOfThem) {
  const TextDataset d(kText, 0.1, 64);
  const Batch w = d.train_batch(3, 0, 64);  // 4096 tokens
  const int32_t mask_id = 256;
  const Batch b = masked_lm(w, 3, 0, mask_id, mask_id);
  EXPECT_EQ(masked_lm(w, 3, 0, mask_id, mask_id).tokens, b.tokens);  // a pure function of (seed, index)
  EXPECT_NE(masked_lm(w, 3, 1, mask_id, mask_id).targets, b.targets);
  int chosen = 0, masked = 0, kept = 0;
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    if (b.targets[i] == -100) {
      EXPECT_EQ(b.tokens[i], w.tokens[i]);  // not chosen: untouched
      continue;
    }
    ++chosen;
    EXPECT_EQ(b.targets[i], w.tokens[i]);  // the label is the original token
    EXPECT_LT(b.tokens[i], mask_id + 1);
    masked += b.tokens[i] == mask_id;
    kept += b.tokens[i] == w.tokens[i];
  }
  const double n = static_cast<double>(b.tokens.size());
  EXPECT_NEAR(chosen / n, 0.15, 0.02);
  EXPECT_NEAR(masked / double(chosen), 0.8, 0.05);
  EXPECT_NEAR(kept / double(chosen), 0.1, 0.05);  // a random replacement is sometimes the same token
  // Even a one-token batch has a target.
  Batch one;
  one.tokens = {65};
  EXPECT_EQ(masked_lm(one, 1, 0, mask_id, mask_id).targets, std::vector<int32_t>{65});
}

}  // namespace
}  // namespace ferry::dataset
