// Range checks for the subcommands' numeric options, as CLI11 validators that say the range in words.
// CLI11's own Range prints a double's maximum in full (309 digits) and lets nan through.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace ferry::cli {

// A decimal integer in [lo, hi]; `note` follows the range, e.g. "(0: all)". Give it to ->transform(), not
// ->check() (whose validators may not change the text): the text is rewritten in its plain decimal form,
// which CLI11 then converts, since it would read a leading 0 as octal, and wrap -1 or saturate 2^64 into an
// unsigned option.
inline CLI::Validator integer_in(int64_t lo, uint64_t hi, const std::string& note = "") {
  const std::string allowed = fmt::format("an integer in [{}, {}]{}", lo, hi, note.empty() ? "" : " " + note);
  return {[lo, hi, allowed](std::string& text) -> std::string {
            const bool negative = !text.empty() && text[0] == '-';
            const char* first = text.data() + (negative || (!text.empty() && text[0] == '+') ? 1 : 0);
            const char* last = text.data() + text.size();
            uint64_t magnitude = 0;
            const auto [end, ec] = std::from_chars(first, last, magnitude);
            const bool too_big = ec == std::errc::result_out_of_range;
            if (first == last || end != last || (ec != std::errc() && !too_big))
              return "'" + text + "' is not an integer; expected " + allowed;
            const bool below = negative ? too_big || (magnitude > 0 && (lo >= 0 || magnitude - 1 > uint64_t(-(lo + 1))))
                                        : lo > 0 && !too_big && magnitude < uint64_t(lo);
            if (below || (!negative && (too_big || magnitude > hi))) return text + " is out of range; expected " + allowed;
            text = (negative && magnitude > 0 ? "-" : "") + std::to_string(magnitude);
            return "";
          },
          fmt::format("[{}, {}]", lo, hi)};
}

// A finite number >= lo (nan and inf are numbers to CLI11 and to every comparison they fail).
inline CLI::Validator finite_at_least(double lo, const std::string& note = "") {
  const std::string allowed = fmt::format("a finite number >= {}{}", lo, note.empty() ? "" : " " + note);
  return {[lo, allowed](std::string& text) -> std::string {
            double value = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
            if (text.empty() || end != text.data() + text.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
              return "'" + text + "' is not a number; expected " + allowed;
            if (!std::isfinite(value)) return text + " is not a finite number; expected " + allowed;
            if (ec != std::errc() || value < lo) return text + " is out of range; expected " + allowed;
            return "";
          },
          fmt::format(">= {}", lo)};
}

}  // namespace ferry::cli
