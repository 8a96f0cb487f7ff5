// NFC by the algorithm of UAX #15: each code point decomposed canonically (Hangul syllables by arithmetic), runs
// of combining marks put in order of their class, then each mark composed with the last starter unless blocked.
#include "dataset/nfc.h"

#include <algorithm>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "dataset/nfc_tables.h"
#include "dataset/unicode.h"

namespace ferry::dataset {
namespace {

using nfc_tables::CanonicalDecomposition;
using nfc_tables::CombiningClassRange;

// Hangul syllables: S = SBase + (L * VCount + V) * TCount + T, from the jamo L, V and (optional) T.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

std::span<const CanonicalDecomposition> decompositions() {
  return {nfc_tables::kDecompositions, nfc_tables::kDecompositionCount};
}

const CanonicalDecomposition* decomposition_of(char32_t c) {
  const auto table = decompositions();
  const auto it = std::lower_bound(table.begin(), table.end(), c,
                                   [](const CanonicalDecomposition& d, char32_t x) { return d.code_point < x; });
  return it != table.end() && it->code_point == c ? &*it : nullptr;
}

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;  // nothing below the combining diacritics has a class
  const std::span<const CombiningClassRange> table{nfc_tables::kCombiningClasses, nfc_tables::kCombiningClassCount};
  const auto after = std::upper_bound(table.begin(), table.end(), c,
                                      [](char32_t x, const CombiningClassRange& r) { return x < r.first; });
  return after == table.begin() || c > std::prev(after)->last ? 0 : std::prev(after)->combining_class;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const CanonicalDecomposition* d = decomposition_of(c);
  if (!d) return out.push_back(c);
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// The primary composite of a pair, by the pair.
const std::unordered_map<uint64_t, char32_t>& composites() {
  static const std::unordered_map<uint64_t, char32_t> map = [] {
    std::unordered_map<uint64_t, char32_t> m;
    for (const CanonicalDecomposition& d : decompositions())
      if (d.composes) m[(uint64_t(d.first) << 32) | d.second] = d.code_point;
    return m;
  }();
  return map;
}

std::optional<char32_t> compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = composites().find((uint64_t(a) << 32) | b);
  return it == composites().end() ? std::nullopt : std::optional(it->second);
}

// Each run of combining marks sorted by class, marks of one class kept in their order.
void reorder(std::vector<char32_t>& s) {
  for (size_t i = 0; i < s.size();) {
    if (combining_class(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < s.size() && combining_class(s[end]) != 0) ++end;
    std::stable_sort(s.begin() + i, s.begin() + end,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
}

// Canonical composition: a character joins the last starter when nothing between them blocks it (a
// character of its class or higher, or a starter).
std::vector<char32_t> composed(const std::vector<char32_t>& s) {
  std::vector<char32_t> out;
  size_t starter = 0;
  int last_class = -1;  // of the last character kept; -1: none yet
  for (char32_t c : s) {
    const int cls = combining_class(c);
    const bool can_join = !out.empty() && combining_class(out[starter]) == 0 && (last_class < cls || last_class == 0);
    if (can_join) {
      if (const std::optional<char32_t> joined = compose(out[starter], c)) {
        out[starter] = *joined;
        continue;
      }
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out.push_back(c);
  }
  return out;
}

// The code points of valid UTF-8; nullopt for anything else.
std::optional<std::vector<char32_t>> code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t n = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return std::nullopt;
    char32_t c = n == 1 ? lead : lead & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return std::nullopt;
      c = (c << 6) | (b & 0x3F);
    }
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;  // overlong, surrogates
    out.push_back(c);
    i += n;
  }
  return out;
}

}  // namespace

std::string nfc(std::string_view utf8) {
  if (std::all_of(utf8.begin(), utf8.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(utf8);  // ASCII is its own NFC
  const std::optional<std::vector<char32_t>> cps = code_points(utf8);
  if (!cps) return std::string(utf8);
  std::vector<char32_t> decomposed;
  decomposed.reserve(cps->size());
  for (char32_t c : *cps) decompose(c, decomposed);
  reorder(decomposed);
  std::string out;
  out.reserve(utf8.size());
  for (char32_t c : composed(decomposed)) utf8_append(out, c);
  return out;
}

}  // namespace ferry::dataset
