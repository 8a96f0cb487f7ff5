// TextDataset: byte tokens, split, and window sampling.
#include "dataset/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "dataset/token_shard.h"
#include "foundation/rng.h"

namespace ferry::dataset {
namespace {

void copy_window(const std::vector<int32_t>& src, int64_t start, int64_t T, Batch& out) {
  out.tokens.insert(out.tokens.end(), src.begin() + start, src.begin() + start + T);
  out.targets.insert(out.targets.end(), src.begin() + start + 1, src.begin() + start + T + 1);
}

// The file's tokens: a shard's as they are, text's one per byte.
std::vector<int32_t> read_tokens(const std::filesystem::path& path, DataFormat format) {
  if (reads_as_token_shard(path, format)) {  // pre-tokenised (ferry tokenize, llm.c's tools)
    try {
      return TokenShard(path).ids();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("data.path: " + std::string(e.what()) +
                               (format == DataFormat::Auto ? "; a *.bin data.path is read as a token shard: if it is text, set data.format: text" : ""));
    }
  }
  if (format == DataFormat::Auto && starts_with_shard_magic(path))
    throw std::runtime_error("data.path: '" + path.string() + "' starts like a token shard but is not named *.bin; "
                             "set data.format: shard to read it as one, or data.format: text to train on its bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("data.path: cannot open '" + path.string() + "': " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("data.path: reading '" + path.string() + "' failed: " + std::strerror(errno));
  std::vector<int32_t> all(text.size());
  for (size_t i = 0; i < text.size(); ++i) all[i] = static_cast<uint8_t>(text[i]);
  return all;
}

}  // namespace

TextDataset::TextDataset(const std::filesystem::path& path, double val_fraction, int64_t seq_len, DataFormat format) : T_(seq_len) {
  const std::vector<int32_t> all = read_tokens(path, format);
  for (int32_t t : all) max_token_ = std::max(max_token_, t);
  const auto n_val = static_cast<int64_t>(static_cast<double>(all.size()) * val_fraction);
  const auto n_train = static_cast<int64_t>(all.size()) - n_val;
  if (n_train < T_ + 1)
    throw std::runtime_error("data.path: '" + path.string() + "' has " + std::to_string(n_train) +
                             " training tokens, fewer than one sequence of " + std::to_string(T_ + 1));
  if (n_val > 0 && n_val < T_ + 1)
    throw std::runtime_error("data.val_fraction: the validation split of '" + path.string() + "' has " +
                             std::to_string(n_val) + " tokens, fewer than one sequence of " + std::to_string(T_ + 1) +
                             "; raise val_fraction or set it to 0");
  train_.assign(all.begin(), all.begin() + n_train);
  val_.assign(all.begin() + n_train, all.end());
}

Batch TextDataset::train_batch(uint64_t seed, int64_t index, int64_t B) const {
  Rng rng(seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(index + 1)));
  Batch b;
  const auto windows = static_cast<uint64_t>(train_tokens() - T_);
  for (int64_t i = 0; i < B; ++i) copy_window(train_, static_cast<int64_t>(rng.below(windows)), T_, b);
  return b;
}

Batch TextDataset::val_batch(int64_t index, int64_t count, int64_t B) const {
  if (val_.empty()) throw std::logic_error("val_batch: no validation split");
  Batch b;
  const int64_t windows = val_tokens() - T_;
  const int64_t total = count * B;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t k = index * B + i;
    copy_window(val_, total > 1 ? k * (windows - 1) / (total - 1) : 0, T_, b);
  }
  return b;
}

Batch masked_lm(const Batch& windows, uint64_t seed, int64_t index, int32_t mask_id, int32_t random_below) {
  Rng rng(seed ^ 0x9E3779B97F4A7C15ull ^ (0xBF58476D1CE4E5B9ull * static_cast<uint64_t>(index + 1)));
  Batch b;
  b.tokens = windows.tokens;
  b.targets.assign(windows.tokens.size(), -100);
  bool any = false;
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    const uint64_t choose = rng.below(100), how = rng.below(10), random = rng.below(static_cast<uint64_t>(random_below));
    if (choose >= 15) continue;
    any = true;
    b.targets[i] = windows.tokens[i];
    if (how < 8) b.tokens[i] = mask_id;
    else if (how == 8) b.tokens[i] = static_cast<int32_t>(random);
  }
  if (!any && !b.tokens.empty()) {  // a loss needs a target
    const size_t i = rng.below(b.tokens.size());
    b.targets[i] = windows.tokens[i];
    b.tokens[i] = mask_id;
  }
  return b;
}

bool TextDataset::holds(int32_t token) const {
  return std::find(train_.begin(), train_.end(), token) != train_.end() || std::find(val_.begin(), val_.end(), token) != val_.end();
}

}  // namespace ferry::dataset
