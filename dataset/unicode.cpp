// The Unicode the tokenizers need, without ICU: UTF-8 in and out, and character classes by range.
#include "dataset/unicode.h"

namespace ferry::dataset {

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

bool is_number(char32_t c) {  // Nd, Nl and No: digits in every script, superscripts, fractions, numerals
  if (c >= '0' && c <= '9') return true;
  if (c < 0x80) return false;
  return c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE) || (c >= 0x660 && c <= 0x669) ||
         (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x7C0 && c <= 0x7C9) || (c >= 0x966 && c <= 0x96F) ||
         (c >= 0x9E6 && c <= 0x9EF) || (c >= 0xE50 && c <= 0xE59) || (c >= 0x1040 && c <= 0x1049) ||
         (c >= 0x2070 && c <= 0x2079 && c != 0x2071 && c != 0x2072 && c != 0x2073) || (c >= 0x2080 && c <= 0x2089) ||
         (c >= 0x2150 && c <= 0x2189) || (c >= 0x2460 && c <= 0x249B) || (c >= 0x24EA && c <= 0x24FF) ||
         (c >= 0x2776 && c <= 0x2793) || c == 0x3007 || (c >= 0x3021 && c <= 0x3029) || (c >= 0xFF10 && c <= 0xFF19);
}

bool is_symbol(char32_t c) {  // S* and what the letter default must not swallow: currency, math, arrows, emoji
  if (c < 0x80) return false;
  switch (c) {
    case 0xA2: case 0xA3: case 0xA4: case 0xA5: case 0xA6: case 0xA8: case 0xA9: case 0xAC: case 0xAE: case 0xAF:
    case 0xB0: case 0xB1: case 0xB4: case 0xB8: case 0xD7: case 0xF7: return true;
    default: break;
  }
  return (c >= 0x2190 && c <= 0x23FF) || (c >= 0x20A0 && c <= 0x20CF) || (c >= 0x2100 && c <= 0x214F && c != 0x2102 &&
         c != 0x2107 && !(c >= 0x210A && c <= 0x2113) && c != 0x2115 && !(c >= 0x2119 && c <= 0x211D) && c != 0x2124 &&
         c != 0x2126 && c != 0x2128 && !(c >= 0x212A && c <= 0x212D) && !(c >= 0x212F && c <= 0x2139) &&
         !(c >= 0x213C && c <= 0x213F) && !(c >= 0x2145 && c <= 0x2149) && c != 0x214E) ||
         (c >= 0x2500 && c <= 0x2775) || (c >= 0x2794 && c <= 0x2BFF) || (c >= 0x1F000 && c <= 0x1FAFF) ||
         (c >= 0xFE00 && c <= 0xFE0F) || c == 0x200D;
}

CharClass classify(char32_t c) {
  if (is_whitespace(c) || c == 0x0B || c == 0x0C || c == 0x85 || c == 0x2028 || c == 0x2029) return CharClass::Space;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
  if (is_number(c)) return CharClass::Number;
  if (c < 0x80 || is_punctuation(c) || is_symbol(c) || is_control(c) || (c >= 0x300 && c <= 0x36F)) return CharClass::Other;
  return CharClass::Letter;  // the rest of Unicode is, by far, letters
}

}  // namespace ferry::dataset
