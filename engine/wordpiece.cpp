// BERT's WordPiece tokenizer (vocab.txt, one token per line, id = line number), as BertTokenizer runs it:
// a basic pass (drop control characters, whitespace-split, lowercase and strip accents when uncased,
// split off punctuation and CJK ideographs), then greedy longest-match-first word pieces with "##" on
// continuations, [UNK] for a word that cannot be pieced (or longer than 100 characters).
// Unicode without ICU: lowercasing and accent stripping cover Latin-1, Latin Extended-A, Greek and
// Cyrillic; punctuation covers ASCII, Latin-1, General Punctuation, CJK symbols and fullwidth forms.
#include <fstream>
#include <stdexcept>
#include <unordered_map>

#include "engine/tokenizer.h"

namespace ferry::engine {
namespace {

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {  // invalid byte: U+FFFD, as Python's errors="replace"
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18)), out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_control(char32_t c) {  // Cc and Cf, except the whitespace controls
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return c < 0x20 || (c >= 0x7F && c < 0xA0) || c == 0xAD || (c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF;
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (c) {
    case 0xA1: case 0xA7: case 0xAB: case 0xB6: case 0xB7: case 0xBB: case 0xBF: return true;
    default: break;
  }
  return (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205E) || (c >= 0x3001 && c <= 0x3003) ||
         (c >= 0x3008 && c <= 0x3011) || (c >= 0x3014 && c <= 0x301F) || (c >= 0xFF01 && c <= 0xFF0F && c != 0xFF04 && c != 0xFF0B) ||
         (c >= 0xFF1A && c <= 0xFF20 && c != 0xFF1C && c != 0xFF1D && c != 0xFF1E) || (c >= 0xFF3B && c <= 0xFF3F && c != 0xFF3E) ||
         c == 0xFF5B || c == 0xFF5D;
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x130) return 'i';   // İ lowercases to i + a combining dot, which accent stripping drops
  if (c == 0x178) return 0xFF;  // Ÿ
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;  // Latin-1
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149 && c != 0x17F) {  // Latin Extended-A pairs
    const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;  // Greek
  if (c >= 0x410 && c <= 0x42F) return c + 32;                // Cyrillic
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

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
  WordPiece(const std::filesystem::path& vocab_txt, bool lowercase) : lowercase_(lowercase) {
    std::ifstream in(vocab_txt);
    if (!in) throw std::runtime_error("--vocab: cannot read '" + vocab_txt.string() + "'");
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) throw std::runtime_error(vocab_txt.string() + ": line " + std::to_string(tokens_.size() + 1) + " is empty; a vocab.txt holds one token per line");
      if (!ids_.emplace(line, static_cast<int32_t>(tokens_.size())).second)
        throw std::runtime_error(vocab_txt.string() + ": token '" + line + "' appears twice");
      tokens_.push_back(line);
    }
    const auto unk = ids_.find("[UNK]");
    if (unk == ids_.end()) throw std::runtime_error(vocab_txt.string() + ": no [UNK] token; not a BERT vocab.txt");
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
  int32_t id_of(const std::string& token) const {
    const auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }

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
  return std::make_unique<WordPiece>(vocab_txt, lowercase);
}

int32_t wordpiece_token_id(const std::filesystem::path& vocab_txt, const std::string& token) {
  return WordPiece(vocab_txt, true).id_of(token);
}

}  // namespace ferry::engine
