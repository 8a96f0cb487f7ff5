// The character tables of dataset/unicode.h against Python's unicodedata (tests/data/unicode_reference.json,
// from make_unicode_reference.py) over every code point of the blocks each table claims. Where a table
// knowingly differs from Unicode the code points are listed here, so closing a gap fails too.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "dataset/nfc.h"
#include "dataset/unicode.h"
#include "test_helpers.h"

namespace ferry::dataset {
namespace {

struct CodePoint {
  std::string category;  // general category, e.g. "Lu"
  char32_t lowercase;
  bool white_space;
};

struct Reference {
  std::map<std::string, std::pair<char32_t, char32_t>> blocks;
  std::map<char32_t, CodePoint> code_points;

  std::vector<char32_t> in_blocks(const std::vector<std::string>& names) const {
    std::vector<char32_t> out;
    for (const auto& name : names)
      for (char32_t c = blocks.at(name).first; c <= blocks.at(name).second; ++c) out.push_back(c);
    return out;
  }
};

const Reference& reference() {
  static const Reference r = [] {
    std::ifstream in(testing::data_path("unicode_reference.json"));
    const auto j = nlohmann::json::parse(in);
    Reference ref;
    for (const auto& [name, span] : j.at("blocks").items()) ref.blocks[name] = {span.at(0), span.at(1)};
    for (const auto& row : j.at("code_points"))
      ref.code_points[row.at(0).get<char32_t>()] = {row.at(1), row.at(2).get<char32_t>(), row.at(3).get<int>() != 0};
    return ref;
  }();
  return r;
}

bool in(const std::set<char32_t>& set, char32_t c) { return set.count(c) != 0; }

std::set<char32_t> span(char32_t first, char32_t last) {
  std::set<char32_t> s;
  for (char32_t c = first; c <= last; ++c) s.insert(c);
  return s;
}

// Checks f(c) == expected(c) for every c of `code_points` but those in `gaps`, where it must differ.
template <class F, class Expected>
void check(const char* what, const std::vector<char32_t>& code_points, F f, Expected expected,
           const std::set<char32_t>& gaps = {}) {
  for (char32_t c : code_points)
    EXPECT_EQ(f(c) == expected(c), !in(gaps, c))
        << what << " of U+" << std::hex << std::uppercase << static_cast<uint32_t>(c) << " ("
        << reference().code_points.at(c).category << ")" << (in(gaps, c) ? ": a listed gap, closed?" : ": differs from the reference");
}

// The blocks the README says BERT's classes cover.
const std::vector<std::string> kBertBlocks{"Basic Latin", "Latin-1 Supplement", "General Punctuation",
                                           "CJK Symbols and Punctuation", "Halfwidth and Fullwidth Forms"};

const std::string& category(char32_t c) { return reference().code_points.at(c).category; }

TEST(Unicode, ReferenceCoversEveryBlock) {
  size_t n = 0;
  for (const auto& [name, span] : reference().blocks) n += span.second - span.first + 1;
  EXPECT_EQ(reference().code_points.size(), n);
}

// BERT's _is_whitespace: tab, newlines, space, and the Zs spaces.
TEST(Unicode, WhitespaceIsBerts) {
  const auto all = reference().in_blocks(kBertBlocks);
  check("is_whitespace", all, is_whitespace,
        [](char32_t c) { return c == '\t' || c == '\n' || c == '\r' || category(c) == "Zs"; });
}

// BERT's _is_control: Cc and Cf but tab and newlines. The isolates and the deprecated format controls
// (U+2066..U+206F) are Cf but not in the table.
TEST(Unicode, ControlIsBertsBarTheIsolates) {
  const auto all = reference().in_blocks(kBertBlocks);
  check(
      "is_control", all, is_control,
      [](char32_t c) { return c != '\t' && c != '\n' && c != '\r' && (category(c) == "Cc" || category(c) == "Cf"); },
      span(0x2066, 0x206F));
}

// BERT's _is_punctuation: printable ASCII that is not alphanumeric, and P*. The table takes the Sm
// U+2044 and U+2052 inside General Punctuation, and misses U+3030, U+303D and U+FF5F..U+FF65.
TEST(Unicode, PunctuationIsBertsOverItsBlocks) {
  const auto all = reference().in_blocks(kBertBlocks);
  auto gaps = span(0xFF5F, 0xFF65);
  gaps.insert({0x2044, 0x2052, 0x3030, 0x303D});
  check(
      "is_punctuation", all, is_punctuation,
      [](char32_t c) { return (c > ' ' && c < 0x7F && !std::isalnum(static_cast<int>(c))) || category(c)[0] == 'P'; },
      gaps);
}

// GPT-2's pre-tokenizer classes are exact for ASCII and Latin-1: \p{L}, \p{N}, \s (White_Space), the rest.
TEST(Unicode, ClassifyIsExactForAsciiAndLatin1) {
  check("classify", reference().in_blocks({"Basic Latin", "Latin-1 Supplement"}), classify, [](char32_t c) {
    if (reference().code_points.at(c).white_space) return CharClass::Space;
    if (category(c)[0] == 'L') return CharClass::Letter;
    return category(c)[0] == 'N' ? CharClass::Number : CharClass::Other;
  });
}

// is_symbol leaves ASCII to classify, which takes all of it that is not a letter, digit or space as Other.
TEST(Unicode, NumbersAndSymbolsAreExactForLatin1) {
  check("is_number", reference().in_blocks({"Basic Latin", "Latin-1 Supplement"}), is_number,
        [](char32_t c) { return category(c)[0] == 'N'; });
  check("is_symbol", reference().in_blocks({"Latin-1 Supplement"}), is_symbol, [](char32_t c) { return category(c)[0] == 'S'; });
}

// Lowercasing covers the Latin blocks and the basic Greek and Cyrillic alphabets; Greek's archaic and
// accented capitals and symbols, and Cyrillic's historic and extended letters, are left as they are.
TEST(Unicode, LowercaseCoversLatinAndTheBasicGreekAndCyrillicAlphabets) {
  const auto all = reference().in_blocks({"Basic Latin", "Latin-1 Supplement", "Latin Extended-A", "Greek and Coptic", "Cyrillic"});
  const auto uncovered = [](char32_t c) { return (c >= 0x370 && c <= 0x390) || (c >= 0x3CF && c <= 0x3FF) || c >= 0x460; };
  std::set<char32_t> gaps;
  for (char32_t c : all)
    if (uncovered(c) && reference().code_points.at(c).lowercase != c) gaps.insert(c);
  check("to_lower", all, to_lower, [](char32_t c) { return reference().code_points.at(c).lowercase; }, gaps);
  for (char32_t c : gaps) EXPECT_EQ(to_lower(c), c) << "U+" << std::hex << static_cast<uint32_t>(c);
}

}  // namespace
}  // namespace ferry::dataset

namespace ferry::dataset {
namespace {

// NFC against Python's unicodedata.normalize (dataset/make_nfc_tables.py): every primary composite from its
// decomposition, every decomposable code point as it is (singletons and composition exclusions decompose),
// Hangul syllables and jamo, combining marks in shuffled orders, a mark with no starter before it.
TEST(Nfc, MatchesUnicodedataOnTheReference) {
  std::ifstream in(testing::data_path("nfc_reference.json"));
  const nlohmann::json ref = nlohmann::json::parse(in);
  ASSERT_GE(ref["cases"].size(), 7u);
  for (const auto& c : ref["cases"]) {
    const std::string text = c[0], want = c[1];
    const std::string got = nfc(text);
    if (got == want) continue;
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    ADD_FAILURE() << "NFC differs from byte " << at << " of " << want.size() << ": got '"
                  << got.substr(at > 8 ? at - 8 : 0, 24) << "', want '" << want.substr(at > 8 ? at - 8 : 0, 24)
                  << "' (input starting '" << text.substr(0, 40) << "')";
  }
  EXPECT_EQ(nfc("caf\xFF e\xCC\x81"), "caf\xFF e\xCC\x81") << "invalid UTF-8 is left as it is";
}

}  // namespace
}  // namespace ferry::dataset
