// Byte and GPT-2 BPE tokenizers. GPT-2 BPE: bytes map to printable unicode symbols (bytes_to_unicode),
// text is split by GPT-2's pre-tokenizer pattern (dataset/pretokenize.h), and each piece is merged pair by
// pair in merge-rank order.
#include "dataset/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "dataset/pretokenize.h"
#include "foundation/regular_file.h"

namespace ferry::dataset {
namespace {

// A tokenizer.json's model section (a vocab.json maps tokens to ids: none is an object).
bool tokenizer_json_model(const nlohmann::json& j) {
  return j.is_object() && j.contains("model") && j["model"].is_object();
}

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id));
    return s;
  }
  int vocab_size() const override { return 256; }
};

class Gpt2Bpe : public Tokenizer {
 public:
  // vocab: token -> id; merges: merges.txt's lines; the origins name them in errors.
  Gpt2Bpe(const nlohmann::json& vocab, std::istream& merges, const std::string& vocab_origin, const std::string& merges_origin)
      : byte_symbol_(bytes_to_unicode()) {
    if (!vocab.is_object()) throw std::runtime_error(vocab_origin + ": not a JSON object of token -> id");
    for (const auto& [token, id] : vocab.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw std::runtime_error(vocab_origin + ": the id of '" + token + "' is not a non-negative integer");
      ids_[token] = id.get<int32_t>();
      vocab_size_ = std::max(vocab_size_, id.get<int32_t>() + 1);
    }
    tokens_.resize(vocab_size_);
    for (const auto& [token, id] : ids_) tokens_[id] = token;
    std::string line;
    int rank = 0, line_no = 0;
    while (std::getline(merges, line)) {
      ++line_no;
      if (line.empty() || line.rfind("#version", 0) == 0) continue;
      const auto sp = line.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
        throw std::runtime_error(merges_origin + ":" + std::to_string(line_no) + ": expected two symbols separated by one space");
      ranks_[line] = rank++;
    }
    for (int b = 0; b < 256; ++b) symbol_byte_[byte_symbol_[b]] = static_cast<char>(b);
    for (int b = 0; b < 256; ++b)
      if (!ids_.contains(byte_symbol_[b]))
        throw std::runtime_error(vocab_origin + ": lacks the symbol of byte " + std::to_string(b) + " (not a byte-level BPE vocabulary)");
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out;
    for (std::string_view piece : split_pieces(text, SplitPattern::Gpt2))
      for (const std::string& sym : merge(piece)) {
        const auto it = ids_.find(sym);
        if (it == ids_.end()) throw std::runtime_error("bpe: symbol '" + sym + "' is not in the vocabulary");
        out.push_back(it->second);
      }
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size_) throw std::out_of_range("bpe: token id " + std::to_string(id) + " is outside the vocabulary");
      const std::string& tok = tokens_[id];
      for (size_t i = 0; i < tok.size();) {  // symbols are 1 or 2 UTF-8 bytes
        const size_t len = (static_cast<unsigned char>(tok[i]) & 0xE0) == 0xC0 ? 2 : 1;
        out.push_back(symbol_byte_.at(tok.substr(i, len)));
        i += len;
      }
    }
    return out;
  }

  int vocab_size() const override { return vocab_size_; }
  int32_t id_of(const std::string& token) const override {
    const auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  std::string token_of(int32_t id) const override { return id >= 0 && id < vocab_size_ ? tokens_[id] : std::string(); }
  int32_t eos_id() const override { return id_of("<|endoftext|>"); }

 private:
  // BPE on one piece: start from byte symbols, merge the lowest-ranked adjacent pair until none is left.
  std::vector<std::string> merge(std::string_view piece) const {
    std::vector<std::string> s;
    for (char ch : piece) s.push_back(byte_symbol_[static_cast<uint8_t>(ch)]);
    while (s.size() > 1) {
      int best = -1, best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const auto it = ranks_.find(s[i] + " " + s[i + 1]);
        if (it != ranks_.end() && it->second < best_rank) best_rank = it->second, best = static_cast<int>(i);
      }
      if (best < 0) break;
      // Merge every occurrence of that pair, left to right, as GPT-2's reference does.
      const std::string a = s[best], b = s[best + 1];
      std::vector<std::string> merged;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged.push_back(a + b);
          i += 2;
        } else {
          merged.push_back(s[i++]);
        }
      }
      s = std::move(merged);
    }
    return s;
  }

  std::vector<std::string> byte_symbol_;
  std::unordered_map<std::string, char> symbol_byte_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int> ranks_;
  int32_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt) {
  const nlohmann::json vocab = nlohmann::json::parse(read_regular_file(vocab_json, "the vocabulary"), nullptr, false);
  if (vocab.is_discarded()) throw std::runtime_error(vocab_json.string() + ": not a JSON object of token -> id");
  if (tokenizer_json_model(vocab)) throw std::runtime_error(renamed_tokenizer_json(vocab_json, "vocab.json"));
  std::istringstream merges(read_regular_file(merges_txt, "the merges"));
  return std::make_unique<Gpt2Bpe>(vocab, merges, vocab_json.string(), merges_txt.string());
}

bool is_tokenizer_json(const std::filesystem::path& file) {
  const std::string text = read_regular_file(file, "");
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') return false;  // a vocab.txt: not parsed
  return tokenizer_json_model(nlohmann::json::parse(text, nullptr, false));
}

std::string renamed_tokenizer_json(const std::filesystem::path& file, const std::string& expected) {
  const bool vocab_json = expected == "vocab.json";
  return fmt::format(
      "'{}' is a Hugging Face tokenizer.json under another name, not a {}; Ferry tells a tokenizer.json by its name: "
      "give "
      "it as tokenizer.json (rename it, or link tokenizer.json to it{}), or give the {} it was saved with",
      file.string(), expected, vocab_json ? "; it holds its merges" : "",
      vocab_json ? "vocab.json and merges.txt" : "vocab.txt");
}

std::unique_ptr<Tokenizer> gpt2_bpe_from_json(const nlohmann::json& vocab, const nlohmann::json& merges, const std::string& origin) {
  std::string lines;  // merges as merges.txt's lines: "a b" strings, or ["a", "b"] pairs (newer tokenizer.json files)
  for (const auto& m : merges) {
    if (m.is_string()) lines += m.get<std::string>() + "\n";
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) lines += m[0].get<std::string>() + " " + m[1].get<std::string>() + "\n";
    else throw std::runtime_error(origin + ": model.merges holds " + m.dump() + ", not a merge");
  }
  std::istringstream in(lines);
  return std::make_unique<Gpt2Bpe>(vocab, in, origin + " (model.vocab)", origin + " (model.merges)");
}

}  // namespace ferry::dataset
