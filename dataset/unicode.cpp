// The Unicode the tokenizers need, without ICU: UTF-8 in and out, and character classes and lowercasing
// as tables of code-point ranges, each checked sorted and disjoint at compile time.
#include "dataset/unicode.h"

#include <algorithm>
#include <span>

namespace ferry::dataset {
namespace {

struct CodePointRange {
  char32_t first, last;  // inclusive
};

// Uppercase letters [first, last] and the lowercase of `first`. `step` 2: only every other code point is
// uppercase, the one after it its lowercase (Latin Extended-A interleaves its pairs).
struct UppercaseRange {
  char32_t first, last;
  char32_t step;
  char32_t lowercase_of_first;
};

// The entry of a sorted, disjoint table whose [first, last] holds c; nullptr if none.
template <class Entry>
const Entry* find_range(std::span<const Entry> table, char32_t c) {
  const auto after = std::upper_bound(table.begin(), table.end(), c, [](char32_t x, const Entry& e) { return x < e.first; });
  if (after == table.begin() || c > std::prev(after)->last) return nullptr;
  return &*std::prev(after);
}

// What find_range's binary search relies on.
template <class Entry>
constexpr bool sorted_and_disjoint(std::span<const Entry> table) {
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].first > table[i].last || (i > 0 && table[i - 1].last >= table[i].first)) return false;
  return true;
}

// BERT's _is_whitespace: space, tab, newlines and the Zs spaces.
constexpr CodePointRange kWhitespace[] = {
    {0x09, 0x0A}, {0x0D, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

// Cc and Cf, less tab and newlines, which BERT counts as whitespace.
constexpr CodePointRange kControl[] = {
    {0x00, 0x08}, {0x0B, 0x0C}, {0x0E, 0x1F}, {0x7F, 0x9F},
    {0xAD, 0xAD},                                          // soft hyphen
    {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064},  // zero-width and bidi format characters
    {0xFEFF, 0xFEFF},                                      // byte order mark
};

// BERT's _is_punctuation: every ASCII non-alphanumeric, then P* of Latin-1, General Punctuation (the
// whole of U+2030..U+205E, which takes in the Sm U+2044 and U+2052), CJK Symbols and Punctuation, and
// fullwidth forms (U+3030, U+303D and U+FF5F..U+FF65 are P* but not in the table).
constexpr CodePointRange kPunctuation[] = {
    {0x21, 0x2F}, {0x3A, 0x40}, {0x5B, 0x60}, {0x7B, 0x7E},                        // ASCII
    {0xA1, 0xA1}, {0xA7, 0xA7}, {0xAB, 0xAB}, {0xB6, 0xB7}, {0xBB, 0xBB}, {0xBF, 0xBF},  // Latin-1
    {0x2010, 0x2027}, {0x2030, 0x205E},                                            // General Punctuation
    {0x3001, 0x3003}, {0x3008, 0x3011}, {0x3014, 0x301F},                          // CJK
    {0xFF01, 0xFF03}, {0xFF05, 0xFF0A}, {0xFF0C, 0xFF0F}, {0xFF1A, 0xFF1B}, {0xFF1F, 0xFF20},  // fullwidth
    {0xFF3B, 0xFF3D}, {0xFF3F, 0xFF3F}, {0xFF5B, 0xFF5B}, {0xFF5D, 0xFF5D},
};

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks and their extensions A to E, and the
// compatibility ideographs.
constexpr CodePointRange kCjk[] = {
    {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xF900, 0xFAFF}, {0x20000, 0x2A6DF}, {0x2A700, 0x2CEAF}, {0x2F800, 0x2FA1F},
};

// \p{N} where text has it: ASCII and Latin-1 exactly, then the common scripts' digits, super- and
// subscripts, number forms, enclosed and dingbat numerals, Chinese numerals and fullwidth digits.
constexpr CodePointRange kNumber[] = {
    {0x30, 0x39}, {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE},
    {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9}, {0x966, 0x96F}, {0x9E6, 0x9EF}, {0xE50, 0xE59}, {0x1040, 0x1049},
    {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF},
    {0x2776, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0xFF10, 0xFF19},
};

// \p{S} beyond ASCII (classify takes ASCII whole), and what the letter default must not swallow:
// Latin-1's symbols exactly, currency, the Letterlike Symbols that are not letters, arrows, math,
// technical, box drawing to dingbats, arrows and math again, emoji, variation selectors and the ZWJ.
constexpr CodePointRange kSymbol[] = {
    {0xA2, 0xA6}, {0xA8, 0xA9}, {0xAC, 0xAC}, {0xAE, 0xB1}, {0xB4, 0xB4}, {0xB8, 0xB8}, {0xD7, 0xD7}, {0xF7, 0xF7},
    {0x200D, 0x200D}, {0x20A0, 0x20CF},
    {0x2100, 0x2101}, {0x2103, 0x2106}, {0x2108, 0x2109}, {0x2114, 0x2114}, {0x2116, 0x2118}, {0x211E, 0x2123},
    {0x2125, 0x2125}, {0x2127, 0x2127}, {0x2129, 0x2129}, {0x212E, 0x212E}, {0x213A, 0x213B}, {0x2140, 0x2144},
    {0x214A, 0x214D}, {0x214F, 0x214F},
    {0x2190, 0x23FF}, {0x2500, 0x2775}, {0x2794, 0x2BFF}, {0xFE00, 0xFE0F}, {0x1F000, 0x1FAFF},
};

// Simple lowercase of ASCII, Latin-1, Latin Extended-A and the basic Greek and Cyrillic alphabets.
constexpr UppercaseRange kUppercase[] = {
    {'A', 'Z', 1, 'a'},
    {0xC0, 0xD6, 1, 0xE0}, {0xD8, 0xDE, 1, 0xF8},  // Latin-1, around ×
    {0x100, 0x12E, 2, 0x101},
    {0x130, 0x130, 1, 'i'},  // İ lowercases to i + a combining dot, which accent stripping drops
    {0x132, 0x136, 2, 0x133}, {0x139, 0x147, 2, 0x13A}, {0x14A, 0x176, 2, 0x14B},
    {0x178, 0x178, 1, 0xFF},  // Ÿ, whose lowercase is in Latin-1
    {0x179, 0x17D, 2, 0x17A},
    {0x391, 0x3A1, 1, 0x3B1}, {0x3A3, 0x3AB, 1, 0x3C3},  // Greek, around the unassigned U+03A2
    {0x400, 0x40F, 1, 0x450}, {0x410, 0x42F, 1, 0x430},  // Cyrillic
};

static_assert(sorted_and_disjoint<CodePointRange>(kWhitespace) && sorted_and_disjoint<CodePointRange>(kControl) &&
              sorted_and_disjoint<CodePointRange>(kPunctuation) && sorted_and_disjoint<CodePointRange>(kCjk) &&
              sorted_and_disjoint<CodePointRange>(kNumber) && sorted_and_disjoint<CodePointRange>(kSymbol) &&
              sorted_and_disjoint<UppercaseRange>(kUppercase));

bool in_table(std::span<const CodePointRange> table, char32_t c) { return find_range(table, c) != nullptr; }

}  // namespace

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

bool is_whitespace(char32_t c) { return in_table(kWhitespace, c); }
bool is_control(char32_t c) { return in_table(kControl, c); }
bool is_punctuation(char32_t c) { return in_table(kPunctuation, c); }
bool is_cjk(char32_t c) { return in_table(kCjk, c); }
bool is_number(char32_t c) { return in_table(kNumber, c); }
bool is_symbol(char32_t c) { return in_table(kSymbol, c); }

char32_t to_lower(char32_t c) {
  const UppercaseRange* r = find_range<UppercaseRange>(kUppercase, c);
  if (r == nullptr || (c - r->first) % r->step != 0) return c;
  return r->lowercase_of_first + (c - r->first);
}

CharClass classify(char32_t c) {
  if (is_whitespace(c) || c == 0x0B || c == 0x0C || c == 0x85 || c == 0x2028 || c == 0x2029) return CharClass::Space;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
  if (is_number(c)) return CharClass::Number;
  if (c < 0x80 || is_punctuation(c) || is_symbol(c) || is_control(c) || (c >= 0x300 && c <= 0x36F)) return CharClass::Other;
  return CharClass::Letter;  // the rest of Unicode is, by far, letters
}

}  // namespace ferry::dataset
