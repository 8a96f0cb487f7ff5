// The BPE model of a Hugging Face tokenizer.json as the `tokenizers` library runs it: a word's characters
// (byte fallback to <0xNN> tokens, else the unknown token, fused when fuse_unk) merged lowest rank first,
// the leftmost of equal ranks first; with ignore_merges a word found whole in the vocabulary is one token.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry::dataset {

class HfBpe {
 public:
  // `model` is the file's model section (type BPE); `origin` names the file in errors.
  HfBpe(const nlohmann::json& model, const std::string& origin);
  void encode(std::string_view word, std::vector<int32_t>& out) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  std::vector<int32_t> initial_symbols(std::string_view word) const;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) -> (rank, merged id)
  std::array<int32_t, 256> byte_ids_{};                               // <0xNN>'s id, -1 when absent
  int32_t unk_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

}  // namespace ferry::dataset
