// BERT's WordPiece tokenizer (vocab.txt, one token per line, id = line number), as BertTokenizer runs it:
// a basic pass (drop control characters, whitespace-split, lowercase and strip accents when uncased,
// split off punctuation and CJK ideographs), then greedy longest-match-first word pieces with "##" on
// continuations, [UNK] for a word that cannot be pieced (or longer than 100 characters).
// Unicode without ICU: lowercasing covers Latin-1, Latin Extended-A and the basic Greek and Cyrillic
// alphabets, accent stripping Latin-1 and Latin Extended-A; punctuation covers ASCII, Latin-1, General
// Punctuation, CJK symbols and fullwidth forms (dataset/unicode.cpp's tables say exactly which).
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "dataset/tokenizer.h"
#include "dataset/unicode.h"
#include "foundation/regular_file.h"

namespace ferry::dataset {
namespace {

// The base letter of an accented Latin letter (NFD, then drop the combining marks); 0: none.
char32_t strip_accent(char32_t c) {
  static const std::unordered_map<char32_t, char32_t> base = [] {
    std::unordered_map<char32_t, char32_t> m;
    const char* latin1 = "AAAAAA CEEEEIIII NOOOOO  UUUUY  aaaaaa ceeeeiiii nooooo  uuuuy y";  // U+00C0..U+00FF
    for (int i = 0; latin1[i]; ++i)
      if (latin1[i] != ' ') m[0xC0 + i] = static_cast<char32_t>(latin1[i]);
    const char* ext_a =  // U+0100..U+017F
        "AaAaAaCcCcCcCcDd  EeEeEeEeEeGgGgGgGgHh  IiIiIiIiI   JjKk LlLlLl    NnNnNn   OoOoOo  RrRrRrSsSsSsSsTtTt  UuUuUuUuUuUuWwYyYZzZzZz ";
    for (int i = 0; ext_a[i]; ++i)
      if (ext_a[i] != ' ') m[0x100 + i] = static_cast<char32_t>(ext_a[i]);
    return m;
  }();
  if (c >= 0x300 && c <= 0x36F) return 0xFFFFFFFF;  // a combining mark itself: dropped
  const auto it = base.find(c);
  return it == base.end() ? 0 : it->second;
}

class WordPiece final : public Tokenizer {
 public:
  // One token per line of `in` (vocab.txt's format); `origin` names it in errors.
  WordPiece(std::istream& in, const std::string& origin, bool lowercase) : lowercase_(lowercase) {
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) throw std::runtime_error(origin + ": line " + std::to_string(tokens_.size() + 1) + " is empty; a vocab.txt holds one token per line");
      if (!ids_.emplace(line, static_cast<int32_t>(tokens_.size())).second)
        throw std::runtime_error(origin + ": token '" + line + "' appears twice");
      tokens_.push_back(line);
    }
    const auto unk = ids_.find("[UNK]");
    if (unk == ids_.end()) throw std::runtime_error(origin + ": no [UNK] token; not a BERT vocab.txt");
    unk_ = unk->second;
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (const std::string& word : basic_split(text)) pieces(word, ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= static_cast<int32_t>(tokens_.size())) throw std::out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
      const std::string& t = tokens_[id];
      if (t.rfind("##", 0) == 0) out += t.substr(2);
      else out += (out.empty() ? "" : " ") + t;
    }
    return out;
  }

  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int32_t id_of(const std::string& token) const override {
    const auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  std::string token_of(int32_t id) const override {
    return id >= 0 && id < static_cast<int32_t>(tokens_.size()) ? tokens_[id] : std::string();
  }
  int32_t eos_id() const override { return id_of("[SEP]"); }  // BERT's end of a segment

 private:
  std::vector<std::string> basic_split(std::string_view text) const {
    std::vector<std::string> words;
    std::string word;
    auto flush = [&] {
      if (!word.empty()) words.push_back(std::move(word)), word.clear();
    };
    for (char32_t c : utf8_decode(text)) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) {
        flush();
        continue;
      }
      if (lowercase_) {
        c = to_lower(c);
        if (const char32_t b = strip_accent(c)) {
          if (b == 0xFFFFFFFF) continue;
          c = b;
        }
      }
      if (is_punctuation(c) || is_cjk(c)) {
        flush();
        std::string single;
        utf8_append(single, c);
        words.push_back(single);
        continue;
      }
      utf8_append(word, c);
    }
    flush();
    return words;
  }

  void pieces(const std::string& word, std::vector<int32_t>& ids) const {
    if (utf8_decode(word).size() > 100) return ids.push_back(unk_);
    std::vector<int32_t> found;
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      int32_t id = -1;
      while (end > start) {
        if ((static_cast<unsigned char>(word[end - 1]) & 0xC0) == 0x80 && end < word.size() &&
            (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) {  // never split inside a character
          --end;
          continue;
        }
        const std::string piece = (start > 0 ? "##" : "") + word.substr(start, end - start);
        if (const auto it = ids_.find(piece); it != ids_.end()) {
          id = it->second;
          break;
        }
        --end;
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
      }
      if (id < 0) return ids.push_back(unk_);  // the whole word is [UNK]
      found.push_back(id);
      start = end;
    }
    ids.insert(ids.end(), found.begin(), found.end());
  }

  bool lowercase_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  int32_t unk_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_wordpiece(const std::filesystem::path& vocab_txt, bool lowercase) {
  std::istringstream in(read_regular_file(vocab_txt, "the vocabulary"));
  try {
    return std::make_unique<WordPiece>(in, vocab_txt.string(), lowercase);
  } catch (const std::runtime_error&) {  // "token '    {' appears twice" would say nothing of what the file is
    if (is_tokenizer_json(vocab_txt)) throw std::runtime_error(renamed_tokenizer_json(vocab_txt, "vocab.txt"));
    throw;
  }
}

int32_t wordpiece_token_id(const std::filesystem::path& vocab_txt, const std::string& token) {
  return load_wordpiece(vocab_txt, true)->id_of(token);
}

std::unique_ptr<Tokenizer> wordpiece_from_json(const nlohmann::json& vocab, const std::string& origin, bool lowercase) {
  if (!vocab.is_object()) throw std::runtime_error(origin + ": model.vocab is not an object of token -> id");
  std::vector<std::string> by_id(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<size_t>() >= by_id.size() || !by_id[id.get<size_t>()].empty())
      throw std::runtime_error(origin + ": model.vocab's ids are not 0.." + std::to_string(by_id.size() - 1) + " each once ('" + token +
                               "' has " + id.dump() + ")");
    by_id[id.get<size_t>()] = token;
  }
  std::string lines;
  for (const std::string& t : by_id) lines += t + "\n";
  std::istringstream in(lines);
  return std::make_unique<WordPiece>(in, origin + " (model.vocab)", lowercase);
}

}  // namespace ferry::dataset
