// Parameter groups: the glob matcher and first-match resolution with its errors.
#include "engine/param_groups.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace ferry::engine {
namespace {

// The alternatives of a pattern, trimmed.
std::vector<std::string_view> alternatives(std::string_view pattern) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t bar = pattern.find('|', start);
    std::string_view alt = pattern.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    while (!alt.empty() && alt.front() == ' ') alt.remove_prefix(1);
    while (!alt.empty() && alt.back() == ' ') alt.remove_suffix(1);
    out.push_back(alt);
    if (bar == std::string_view::npos) return out;
    start = bar + 1;
  }
}

// Whether the set starting at glob[i] ('[') holds c; *next: the index after its ']'. Throws when unclosed.
bool in_set(std::string_view glob, size_t i, char c, size_t* next) {
  size_t j = i + 1;
  const bool negated = j < glob.size() && glob[j] == '!';
  if (negated) ++j;
  bool found = false;
  for (bool first = true; j < glob.size() && (first || glob[j] != ']'); first = false) {
    if (j + 2 < glob.size() && glob[j + 1] == '-' && glob[j + 2] != ']') {
      found = found || (glob[j] <= c && c <= glob[j + 2]);
      j += 3;
    } else {
      found = found || glob[j] == c;
      ++j;
    }
  }
  if (j >= glob.size()) throw std::invalid_argument(fmt::format("'{}': the '[' at character {} is never closed by ']'", glob, i + 1));
  *next = j + 1;
  return found != negated;
}

// One glob against the whole name; '*' backtracks to its last position only (enough for globs: linear in
// practice, quadratic at worst).
bool glob_matches(std::string_view glob, std::string_view name) {
  size_t g = 0, n = 0, star = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    size_t next = g + 1;
    if (g < glob.size() && glob[g] == '*') {
      star = g++, star_n = n;
      continue;
    }
    const bool one = g < glob.size() && (glob[g] == '?' || (glob[g] == '[' ? in_set(glob, g, name[n], &next) : glob[g] == name[n]));
    if (one) {
      g = next, ++n;
    } else if (star != std::string_view::npos) {
      g = star + 1, n = ++star_n;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

std::string some_names(const std::vector<std::string>& names) {
  // The first, one from the middle and the last: the prefixes a pattern must start with show in them.
  std::vector<std::string> picked;
  for (size_t i : {size_t(0), size_t(1), names.size() / 2, names.size() - 2, names.size() - 1})
    if (i < names.size() && (picked.empty() || picked.back() != names[i])) picked.push_back(names[i]);
  return fmt::format("{} ({} parameters in all)", fmt::join(picked, ", "), names.size());
}

std::string settings_text(const ParamGroup& g) {
  if (g.frozen) return "frozen";
  std::string s;
  if (g.lr_scale) s += fmt::format("lr x{:g}", *g.lr_scale);
  if (g.weight_decay) s += fmt::format("{}weight_decay {:g}", s.empty() ? "" : ", ", *g.weight_decay);
  return s.empty() ? "defaults" : s;
}

}  // namespace

void check_pattern(const std::string& pattern) {
  for (std::string_view alt : alternatives(pattern)) {
    if (alt.empty())
      throw std::invalid_argument(fmt::format("'{}' has an empty alternative; separate globs with a single '|'", pattern));
    size_t next = 0;
    for (size_t i = 0; i < alt.size(); ++i)
      if (alt[i] == '[') in_set(alt, i, ' ', &next), i = next - 1;
  }
}

bool pattern_matches(const std::string& pattern, const std::string& name) {
  for (std::string_view alt : alternatives(pattern))
    if (glob_matches(alt, name)) return true;
  return false;
}

std::vector<ParamSettings> resolve_param_groups(std::span<const ParamGroup> groups, const std::vector<std::string>& names,
                                                double default_weight_decay) {
  std::vector<ParamSettings> out(names.size(), ParamSettings{false, 1.0, default_weight_decay, -1});
  for (size_t g = 0; g < groups.size(); ++g) {
    const ParamGroup& group = groups[g];
    const std::string where = fmt::format("optim.groups[{}].params: '{}'", g, group.params);
    check_pattern(group.params);
    int matched = 0, taken = 0, taken_by = -1;
    for (size_t p = 0; p < names.size(); ++p) {
      if (!pattern_matches(group.params, names[p])) continue;
      ++matched;
      if (out[p].group >= 0) {
        taken_by = taken_by < 0 ? out[p].group : taken_by;
        continue;
      }
      ++taken;
      out[p] = {group.frozen, group.lr_scale.value_or(1.0), group.weight_decay.value_or(default_weight_decay), static_cast<int>(g)};
    }
    if (matched == 0)
      throw std::invalid_argument(fmt::format("{} matches no parameter; patterns are globs ('*', '?', '[0-5]', '|') over whole "
                                              "Hugging Face names such as {}",
                                              where, some_names(names)));
    if (taken == 0)
      throw std::invalid_argument(fmt::format("{} matches only parameters that earlier groups take (the first match wins, e.g. "
                                              "optim.groups[{}]); move it before them or narrow them",
                                              where, taken_by));
  }
  if (!names.empty() && std::all_of(out.begin(), out.end(), [](const ParamSettings& s) { return s.frozen; }))
    throw std::invalid_argument("optim.groups: every parameter is frozen; nothing would train. Unfreeze a group (e.g. the head)");
  return out;
}

std::string describe_param_groups(std::span<const ParamGroup> groups, std::span<const ParamSettings> settings,
                                  std::span<const int64_t> numel) {
  std::vector<int> tensors(groups.size(), 0);
  std::vector<int64_t> elements(groups.size(), 0);
  for (size_t p = 0; p < settings.size(); ++p)
    if (settings[p].group >= 0) ++tensors[settings[p].group], elements[settings[p].group] += numel[p];
  std::vector<std::string> parts;
  for (size_t g = 0; g < groups.size(); ++g)
    parts.push_back(fmt::format("'{}': {} tensors ({} parameters) {}", groups[g].params, tensors[g], elements[g], settings_text(groups[g])));
  return fmt::format("optim.groups: {}", fmt::join(parts, "; "));
}

}  // namespace ferry::engine
