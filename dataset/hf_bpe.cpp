// HfBpe: the vocabulary and merges of a tokenizer.json's BPE model, and the merge loop of `tokenizers`'
// Word::merge_all (a heap of candidate pairs over a linked list of symbols: O(n log n) in a word's length,
// which matters where a whole text is one word, as in SentencePiece-style BPE).
#include "dataset/hf_bpe.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>
#include <tuple>

namespace ferry::dataset {
namespace {

using nlohmann::json;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
}

// A merge as its two symbols: "a b" (older files) or ["a", "b"].
std::pair<std::string, std::string> merge_pair(const json& m, const std::string& origin) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) return {m[0], m[1]};
  if (m.is_string()) {
    const std::string s = m;
    const size_t sp = s.find(' ');
    if (sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos)
      return {s.substr(0, sp), s.substr(sp + 1)};
  }
  throw std::runtime_error(origin + ": model.merges holds " + m.dump() + ", not a merge of two symbols");
}

// The model options Ferry does not reproduce, refused by name.
void check_options(const json& model, const std::string& origin) {
  const auto set = [&](const char* key) { return model.contains(key) && !model[key].is_null() && model[key] != ""; };
  if (set("dropout") && model["dropout"] != 0)
    throw std::runtime_error(
        fmt::format("{}: model.dropout {} (BPE dropout) is a training-time randomness Ferry does not reproduce; "
                    "set it to null",
                    origin, model["dropout"].dump()));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (set(key))
      throw std::runtime_error(
          fmt::format("{}: model.{} {} is not supported (Ferry reads the byte-level and SentencePiece-style "
                      "BPE of today's decoder models, which set none)",
                      origin, key, model[key].dump()));
}

}  // namespace

HfBpe::HfBpe(const json& model, const std::string& origin) {
  check_options(model, origin);
  const json& vocab = model.contains("vocab") ? model["vocab"] : json();
  if (!vocab.is_object()) throw std::runtime_error(origin + ": model.vocab is not an object of token -> id");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      throw std::runtime_error(origin + ": model.vocab gives '" + token + "' the id " + id.dump() +
                               ", not a non-negative integer");
    vocab_[token] = id.get<int32_t>();
  }
  const json& merges = model.contains("merges") ? model["merges"] : json::array();
  if (!merges.is_array()) throw std::runtime_error(origin + ": model.merges is not a list");
  int32_t rank = 0;
  for (const json& m : merges) {
    const auto [a, b] = merge_pair(m, origin);
    const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
      throw std::runtime_error(fmt::format("{}: model.merges merges '{}' and '{}', and '{}' is not in model.vocab",
                                           origin, a, b,
                                           ia == vocab_.end()   ? a
                                           : ib == vocab_.end() ? b
                                                                : a + b));
    merges_.try_emplace(pair_key(ia->second, ib->second), rank++, iab->second);
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto it = vocab_.find(model["unk_token"].get<std::string>());
    if (it == vocab_.end())
      throw std::runtime_error(origin + ": model.unk_token " + model["unk_token"].dump() + " is not in model.vocab");
    unk_ = it->second;
  }
  fuse_unk_ = model.value("fuse_unk", false), byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

// One symbol per character: its token, else (byte fallback) one <0xNN> per byte when all are in the
// vocabulary, else the unknown token, one per run of them with fuse_unk, none without an unknown token
// (as `tokenizers` does: a pending unknown goes in before the next known character, or at the end).
std::vector<int32_t> HfBpe::initial_symbols(std::string_view word) const {
  std::vector<int32_t> ids;
  int pending_unk = 0;  // unknown characters not yet written (fused: count as one)
  const auto flush_unk = [&] {
    for (; pending_unk > 0; --pending_unk) ids.push_back(unk_);
  };
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    const std::string ch(word.substr(i, len));
    i += len;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      flush_unk();
      ids.push_back(it->second);
      continue;
    }
    bool bytes_known = byte_fallback_;
    for (unsigned char b : ch) bytes_known = bytes_known && byte_ids_[b] >= 0;
    if (bytes_known) {
      for (unsigned char b : ch) ids.push_back(byte_ids_[b]);
      continue;
    }
    if (unk_ >= 0) {
      if (fuse_unk_ && pending_unk > 0) continue;
      if (!fuse_unk_) flush_unk();
      pending_unk = 1;
    }
  }
  flush_unk();
  return ids;
}

void HfBpe::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_)
    if (const auto it = vocab_.find(std::string(word)); it != vocab_.end()) return out.push_back(it->second);
  struct Symbol {
    int32_t id;
    int prev, next;
    bool gone;
  };
  std::vector<Symbol> s;
  for (int32_t id : initial_symbols(word))
    s.push_back({id, static_cast<int>(s.size()) - 1, static_cast<int>(s.size()) + 1, false});
  if (s.empty()) return;
  s.back().next = -1;
  using Candidate = std::tuple<int32_t, int, int32_t>;  // (rank, position of the left symbol, merged id): lowest first
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](int left) {
    if (left < 0 || s[left].next < 0) return;
    if (const auto it = merges_.find(pair_key(s[left].id, s[s[left].next].id)); it != merges_.end())
      heap.emplace(it->second.first, left, it->second.second);
  };
  for (int i = 0; i + 1 < static_cast<int>(s.size()); ++i) consider(i);
  while (!heap.empty()) {
    const auto [rank, left, merged] = heap.top();
    heap.pop();
    if (s[left].gone || s[left].next < 0) continue;
    const int right = s[left].next;
    const auto it = merges_.find(pair_key(s[left].id, s[right].id));
    if (it == merges_.end() || it->second.second != merged) continue;  // stale: a neighbour merged first
    s[left].id = merged, s[left].next = s[right].next, s[right].gone = true;
    if (s[left].next >= 0) s[s[left].next].prev = left;
    consider(s[left].prev);
    consider(left);
  }
  for (const Symbol& sym : s)
    if (!sym.gone) out.push_back(sym.id);
}

}  // namespace ferry::dataset
