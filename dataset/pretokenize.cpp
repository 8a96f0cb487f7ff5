// The pre-tokenizer patterns written out as matchers over code points (no regex engine: the alternatives
// are tried in the pattern's order, each as greedy as the regex, with the backtracking it would do), and
// GPT-2's byte map.
#include "dataset/pretokenize.h"

#include <algorithm>

#include "dataset/unicode.h"

namespace ferry::dataset {
namespace {

// The text as code points, each with its class and byte offset (and the text's end after the last).
struct CodePoints {
  std::vector<size_t> at;
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  size_t size() const { return cp.size(); }
};

CodePoints code_points(std::string_view t) {
  CodePoints c;
  for (size_t i = 0; i < t.size();) {
    const auto b = static_cast<unsigned char>(t[i]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    const std::vector<char32_t> one = utf8_decode(t.substr(i, std::min(len, t.size() - i)));
    c.at.push_back(i);
    c.cp.push_back(one.size() == 1 ? one[0] : 0xFFFD);  // an invalid byte stands alone
    c.cls.push_back(classify(c.cp.back()));
    i += one.size() == 1 ? std::min(len, t.size() - i) : 1;
  }
  c.at.push_back(t.size());
  return c;
}

bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

// The end of the run of class `cls` from i.
size_t run_end(const CodePoints& c, size_t i, CharClass cls) {
  while (i < c.size() && c.cls[i] == cls) ++i;
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d at i (ASCII case ignored when `any_case`): its end, or i.
size_t contraction(const CodePoints& c, size_t i, bool any_case) {
  if (c.cp[i] != '\'') return i;
  for (std::string_view suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    bool match = i + suffix.size() < c.size();
    for (size_t k = 0; match && k < suffix.size(); ++k) {
      const char32_t ch = c.cp[i + 1 + k];
      match =
          ch == static_cast<char32_t>(suffix[k]) || (any_case && ch == static_cast<char32_t>(suffix[k] - 'a' + 'A'));
    }
    if (match) return i + 1 + suffix.size();
  }
  return i;
}

// A run of whitespace from i, as \s+(?!\S)|\s+ takes it: all of it at the end of the text, else all but its
// last character (which goes with what follows), else (one character before a non-space) that one.
size_t whitespace(const CodePoints& c, size_t i) {
  const size_t k = run_end(c, i, CharClass::Space);
  if (k == c.size() || k - i < 2) return k;
  return k - 1;
}

// GPT-2's alternatives after the contractions: an optional space before a run of letters, of digits or
// of other characters; else whitespace.
size_t gpt2_match(const CodePoints& c, size_t i) {
  if (const size_t end = contraction(c, i, false); end > i) return end;
  const size_t j = i + (c.cp[i] == ' ' && i + 1 < c.size() && c.cls[i + 1] != CharClass::Space ? 1 : 0);
  if (c.cls[j] != CharClass::Space) return run_end(c, j, c.cls[j]);
  return whitespace(c, i);
}

// Llama 3's (max_digits 3) and Qwen2's (1) alternatives, in the pattern's order.
size_t llama3_match(const CodePoints& c, size_t i, size_t max_digits) {
  const size_t n = c.size();
  if (const size_t end = contraction(c, i, true); end > i) return end;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls[i] == CharClass::Letter) return run_end(c, i, CharClass::Letter);
  if (c.cls[i] != CharClass::Number && !is_newline(c.cp[i]) && i + 1 < n && c.cls[i + 1] == CharClass::Letter)
    return run_end(c, i + 1, CharClass::Letter);
  // \p{N}{1,max_digits}
  if (c.cls[i] == CharClass::Number) return std::min(run_end(c, i, CharClass::Number), i + max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = i + (c.cp[i] == ' ' && i + 1 < n && c.cls[i + 1] == CharClass::Other ? 1 : 0);
  if (c.cls[j] == CharClass::Other) {
    size_t k = run_end(c, j, CharClass::Other);
    while (k < n && is_newline(c.cp[k])) ++k;
    return k;
  }
  // \s*[\r\n]+: up to the run's last newline, and that newline
  const size_t k = run_end(c, i, CharClass::Space);
  for (size_t last = k; last > i; --last)
    if (is_newline(c.cp[last - 1])) return last;
  return whitespace(c, i);
}

// Hugging Face's Digits(individual_digits): each number character alone, the stretches between whole.
size_t digits_match(const CodePoints& c, size_t i) {
  if (c.cls[i] == CharClass::Number) return i + 1;
  while (i < c.size() && c.cls[i] != CharClass::Number) ++i;
  return i;
}

void append_utf8(std::string& s, uint32_t cp) { utf8_append(s, static_cast<char32_t>(cp)); }

}  // namespace

std::vector<std::string_view> split_pieces(std::string_view text, SplitPattern pattern) {
  const CodePoints c = code_points(text);
  std::vector<std::string_view> out;
  for (size_t i = 0; i < c.size();) {
    size_t end = i;
    switch (pattern) {
      case SplitPattern::Gpt2: end = gpt2_match(c, i); break;
      case SplitPattern::Llama3: end = llama3_match(c, i, 3); break;
      case SplitPattern::Qwen2: end = llama3_match(c, i, 1); break;
      case SplitPattern::Digits: end = digits_match(c, i); break;
    }
    out.push_back(text.substr(c.at[i], c.at[end] - c.at[i]));
    i = end;
  }
  return out;
}

std::vector<std::string> bytes_to_unicode() {
  std::vector<std::string> map(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(map[b], printable ? b : 256 + n++);
  }
  return map;
}

}  // namespace ferry::dataset
