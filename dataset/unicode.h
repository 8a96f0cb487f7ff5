// The Unicode the tokenizers need, without ICU: UTF-8 decoding and encoding, and character classes by
// code point range (exact for ASCII and Latin-1; the common blocks beyond; the rest of Unicode is taken
// as letters, which it mostly is).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::dataset {

std::vector<char32_t> utf8_decode(std::string_view s);  // invalid bytes become U+FFFD
void utf8_append(std::string& out, char32_t cp);

bool is_whitespace(char32_t c);   // BERT's: space, tab, newlines, and the Zs spaces
bool is_control(char32_t c);      // Cc and Cf, except tab and newlines
bool is_punctuation(char32_t c);  // BERT's: ASCII non-alphanumerics and Unicode P*
bool is_cjk(char32_t c);          // CJK ideographs
bool is_number(char32_t c);       // \p{N}
bool is_symbol(char32_t c);       // \p{S}, roughly

// BERT's uncased lowercasing, before accent stripping: ASCII, Latin-1, Latin Extended-A, and the basic
// Greek and Cyrillic alphabets (not their accented, archaic or extended letters).
char32_t to_lower(char32_t c);

// GPT-2's pre-tokenizer classes: \p{L}, \p{N}, \s, and everything else.
enum class CharClass { Letter, Number, Space, Other };
CharClass classify(char32_t c);

}  // namespace ferry::dataset
