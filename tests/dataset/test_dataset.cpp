// Datasets: text windows split into train and validation, deterministic batches, masked-LM batches; what
// data.path is (data.format, the name, never the magic alone), damaged shards, a failed shard write.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "full_disk.h"
#include "dataset/dataset.h"
#include "dataset/token_shard.h"
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
  EXPECT_NE(d.train_batch(6, 3, 4).tokens, a.tokens);  // the run's seed picks the windows too
  ASSERT_EQ(a.tokens.size(), 64u);
  for (int row = 0; row < 4; ++row)
    for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(a.targets[row * 16 + t], a.tokens[row * 16 + t + 1]);
  const Batch v = d.val_batch(1, 2, 4);
  EXPECT_EQ(v.tokens.size(), 64u);
  EXPECT_THROW(TextDataset(kText, 0.1, 1 << 22), std::runtime_error);  // longer than the text
}

// Training draws every window of its split, the last one (which ends on the split's last token) too: a text of
// T + 3 bytes has 3 windows, starting at bytes 0, 1 and 2.
TEST(TextDataset, TrainingDrawsEveryWindowUpToTheLast) {
  const int64_t T = 8;
  const auto path = testing::scratch_path("three_windows.txt");
  std::ofstream(path, std::ios::binary) << "abcdefghijk";  // T + 3 bytes
  const TextDataset d(path, 0.0, T);
  std::set<int32_t> first_tokens;
  for (int64_t index = 0; index < 64; ++index) first_tokens.insert(d.train_batch(1, index, 1).tokens.at(0));
  EXPECT_EQ(first_tokens, (std::set<int32_t>{'a', 'b', 'c'}));
  std::filesystem::remove(path);
}

// Evaluation's windows, `count` batches of B: spread over the whole validation split, from its first token to
// its last target, and no window read twice (batch i must not repeat rows of batch i - 1).
TEST(TextDataset, ValidationBatchesSpanTheSplitWithoutRepeatingAWindow) {
  const int64_t T = 16, B = 4, count = 3;
  const TextDataset d(kText, 0.1, T);
  const std::string text = testing::file_text(kText);
  const auto split = static_cast<size_t>(d.train_tokens());
  std::set<std::vector<int32_t>> windows;
  for (int64_t index = 0; index < count; ++index) {
    const Batch v = d.val_batch(index, count, B);
    for (int64_t row = 0; row < B; ++row)
      windows.insert(std::vector<int32_t>(v.tokens.begin() + row * T, v.tokens.begin() + (row + 1) * T));
    if (index == 0) {
      EXPECT_EQ(v.tokens[0], static_cast<uint8_t>(text[split])) << "the first window starts the split";
    }
    if (index == count - 1) {
      EXPECT_EQ(v.targets.back(), static_cast<uint8_t>(text.back())) << "the last ends it";
    }
  }
  EXPECT_EQ(windows.size(), static_cast<size_t>(count * B));
}

// 32768 tokens: the binomial spread of the fractions is 0.002 for the 15% chosen and 0.006 for the 80% masked,
// so the tolerances (3 of those) tell 15% from 16% and 80% from 70%.
TEST(MaskedLm, ChoosesFifteenPercentAndMasksEightyOfThem) {
  const TextDataset d(kText, 0.1, 64);
  const Batch w = d.train_batch(3, 0, 512);
  const int32_t mask_id = 256;
  const Batch b = masked_lm(w, 3, 0, mask_id, mask_id);
  EXPECT_EQ(masked_lm(w, 3, 0, mask_id, mask_id).tokens, b.tokens);  // a pure function of (seed, index)
  EXPECT_NE(masked_lm(w, 3, 1, mask_id, mask_id).targets, b.targets);
  EXPECT_NE(masked_lm(w, 4, 0, mask_id, mask_id).targets, b.targets);  // and of the seed
  std::set<int32_t> replacements;  // the 10% replaced at random: drawn over the whole vocabulary
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
    if (b.tokens[i] != mask_id && b.tokens[i] != w.tokens[i]) replacements.insert(b.tokens[i]);
  }
  const double n = static_cast<double>(b.tokens.size());
  EXPECT_NEAR(chosen / n, 0.15, 0.006);
  EXPECT_NEAR(masked / double(chosen), 0.8, 0.018);
  EXPECT_NEAR(kept / double(chosen), 0.1, 0.013);  // a random replacement is sometimes the same token
  EXPECT_GT(replacements.size(), 200u) << "of " << mask_id << " ids";  // ~490 draws: 224 distinct here (218 expected)
  // Even a one-token batch has a target.
  Batch one;
  one.tokens = {65};
  EXPECT_EQ(masked_lm(one, 1, 0, mask_id, mask_id).targets, std::vector<int32_t>{65});
}

}  // namespace
}  // namespace ferry::dataset

namespace ferry::dataset {
namespace {

// A shard of `n` tokens at `path`, with header field `field` (0 magic, 1 version, 2 count) set to `value`.
void write_damaged_shard(const std::filesystem::path& path, int n, int field, int32_t value) {
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = i % 200;
  write_token_shard(path, tokens);
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(4 * field);
  f.write(reinterpret_cast<const char*>(&value), 4);
}

std::string error_of(const std::filesystem::path& path, DataFormat format) {
  try {
    TextDataset(path, 0.1, 16, format);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TextDataset, AShardWithADamagedHeaderIsAnErrorNamingTheFileAndField) {
  const auto dir = testing::scratch_path("damaged_shards");
  std::filesystem::create_directories(dir);
  write_damaged_shard(dir / "magic.bin", 1000, 0, kShardMagic + 1);  // used to be trained on as 4024 bytes of text
  write_damaged_shard(dir / "version.bin", 1000, 1, 2);
  write_damaged_shard(dir / "count.bin", 1000, 2, 999);
  const std::string magic = error_of(dir / "magic.bin", DataFormat::Auto);
  EXPECT_NE(magic.find("'" + (dir / "magic.bin").string() + "': not a valid token shard: header field 'magic' (int32 at byte 0) is 20240521"),
            std::string::npos) << magic;
  EXPECT_NE(magic.find("set data.format: text"), std::string::npos) << magic;
  EXPECT_NE(error_of(dir / "version.bin", DataFormat::Auto).find("header field 'version'"), std::string::npos);
  EXPECT_NE(error_of(dir / "count.bin", DataFormat::Auto).find("header field 'token count' (int32 at byte 8) is 999 but the file holds 1000"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(TextDataset, DataFormatNotTheMagicDecidesWhatAFileIs) {
  const auto dir = testing::scratch_path("formats");
  std::filesystem::create_directories(dir);
  std::vector<int32_t> tokens(1000);
  for (int i = 0; i < 1000; ++i) tokens[i] = 300 + i % 7;  // beyond bytes: only a shard read gives these
  write_token_shard(dir / "tokens.tok", tokens);
  EXPECT_NE(error_of(dir / "tokens.tok", DataFormat::Auto).find("starts like a token shard but is not named *.bin"), std::string::npos);
  EXPECT_EQ(TextDataset(dir / "tokens.tok", 0.1, 16, DataFormat::Shard).max_token(), 306);
  const TextDataset as_text(dir / "tokens.tok", 0.1, 16, DataFormat::Text);  // what the user said
  EXPECT_EQ(as_text.train_tokens() + as_text.val_tokens(), 1024 + 2000);
  EXPECT_LT(as_text.max_token(), 256);
  std::filesystem::copy_file(kText, dir / "text.bin");  // a .bin of text: an error, not text by luck
  EXPECT_NE(error_of(dir / "text.bin", DataFormat::Auto).find("header field 'magic'"), std::string::npos);
  EXPECT_EQ(TextDataset(dir / "text.bin", 0.1, 16, DataFormat::Text).train_tokens() +
                TextDataset(dir / "text.bin", 0.1, 16, DataFormat::Text).val_tokens(),
            static_cast<int64_t>(std::filesystem::file_size(kText)));
  std::filesystem::remove_all(dir);
}

TEST(TokenShard, AFailedWriteLeavesNoTemporaryAndNamesTheError) {
  const auto path = testing::scratch_path("full.bin");
  const std::vector<int32_t> tokens(4096, 7);
  std::string error;
  {
    const testing::FileSizeLimit full_disk(2048);
    try {
      write_token_shard(path, tokens);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("token shard: cannot write '" + path.string() + "': writing its temporary failed: File too large"), std::string::npos)
      << error;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

}  // namespace
}  // namespace ferry::dataset
