// Hugging Face tokenizer.json files of today's decoder models, as the `tokenizers` library runs them: added
// tokens matched first and never split, then the normalizer (Prepend, Replace, NFC), the pre-tokenizer
// (Split with Llama 3's or Qwen2's pattern, Digits, ByteLevel), the BPE model (dataset/hf_bpe.h) and, back,
// the decoder (ByteLevel, or Replace/ByteFallback/Fuse/Strip). BOS and EOS from the post-processor and the
// tokenizer_config.json beside the file. What the file sets otherwise is refused by name.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "dataset/hf_bpe.h"
#include "dataset/nfc.h"
#include "dataset/pretokenize.h"
#include "dataset/tokenizer.h"
#include "dataset/unicode.h"
#include "foundation/regular_file.h"

namespace ferry::dataset {
namespace {

using nlohmann::json;

// The Split patterns of the published files, by what they are.
const std::pair<std::string_view, SplitPattern> kSplitPatterns[] = {
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     SplitPattern::Llama3},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     SplitPattern::Qwen2},
    {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", SplitPattern::Gpt2},
};

// An added token; lstrip and rstrip: the whitespace before and after it is part of the match; single_word: it
// matches only where no word character touches it.
struct AddedToken {
  std::string content;
  int32_t id;
  bool lstrip = false, rstrip = false, single_word = false;
};

// Prepend `prepend` (non-empty text only), replace every `from` with `to`, or (nfc) compose to NFC.
struct NormalizeStep {
  std::string prepend, from, to;
  bool nfc = false;
};

// Before splitting by `split` (if any), a space put before each piece that lacks one (ByteLevel's
// add_prefix_space, which applies to every piece of the steps before it).
struct PreStep {
  std::optional<SplitPattern> split;
  bool prefix_space = false;
  // Metaspace (SentencePiece-style files converted with legacy: false): spaces become `metaspace` ("▁"),
  // which goes before a piece that lacks it (always; first: the text's first piece only), and, with
  // metaspace_split, starts each piece.
  std::string metaspace;
  enum class Prepend { Always, First, Never } prepend = Prepend::Never;
  bool metaspace_split = false;
};

PreStep split_step(std::optional<SplitPattern> split, bool prefix_space = false) {
  PreStep step;
  step.split = split, step.prefix_space = prefix_space;
  return step;
}

// Metaspace's prepend_scheme (older files: add_prefix_space).
PreStep::Prepend prepend_scheme(const json& p, const std::string& origin) {
  const std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
  if (scheme == "always") return PreStep::Prepend::Always;
  if (scheme == "first") return PreStep::Prepend::First;
  if (scheme == "never") return PreStep::Prepend::Never;
  throw std::runtime_error(origin + ": pre_tokenizer Metaspace's prepend_scheme is '" + scheme +
                           "', not always, first or never");
}

struct DecodeStep {
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip } kind;
  std::string from, to;        // Replace
  size_t start = 0, stop = 0;  // Strip: characters `from` taken off each token's start and end
};

std::string type_of(const json& j) { return j.is_object() ? j.value("type", "?") : "?"; }

std::runtime_error unsupported(const std::string& origin, const std::string& part, const std::string& what,
                               const std::string& reads) {
  return std::runtime_error(
      fmt::format("{}: {} {} is not one Ferry reproduces (it reads {}); Ferry's tokenizers are those of "
                  "GPT-2, BERT and today's decoder models (Llama 2/3, Mistral, Qwen2, SmolLM2)",
                  origin, part, what, reads));
}

std::string string_pattern(const json& step, const std::string& origin, const std::string& part) {
  const json& p = step.value("pattern", json::object());
  if (!p.contains("String") || !p["String"].is_string())
    throw unsupported(origin, part, "Replace of " + p.dump(), "Replace of a string, not of a regex");
  return p["String"];
}

void parse_normalizer(const json& n, const std::string& origin, std::vector<NormalizeStep>& steps) {
  const std::string type = type_of(n);
  if (n.is_null()) return;
  if (type == "NFC") {
    steps.push_back({"", "", "", true});
  } else if (type == "Sequence") {
    for (const json& each : n.value("normalizers", json::array())) parse_normalizer(each, origin, steps);
  } else if (type == "Prepend") {
    steps.push_back({n.value("prepend", ""), "", ""});
  } else if (type == "Replace") {
    steps.push_back({"", string_pattern(n, origin, "normalizer"), n.value("content", "")});
  } else {
    throw unsupported(origin, "normalizer", type, "Prepend, Replace of a string, NFC and sequences of them");
  }
}

void parse_pre_tokenizer(const json& p, const std::string& origin, std::vector<PreStep>& steps, bool& byte_level) {
  const std::string type = type_of(p);
  if (p.is_null()) return;
  if (byte_level) throw unsupported(origin, "pre_tokenizer", type + " after ByteLevel", "ByteLevel last");
  if (type == "Sequence") {
    for (const json& each : p.value("pretokenizers", json::array()))
      parse_pre_tokenizer(each, origin, steps, byte_level);
  } else if (type == "ByteLevel") {
    byte_level = true;
    steps.push_back(split_step(p.value("use_regex", true) ? std::optional(SplitPattern::Gpt2) : std::nullopt,
                               p.value("add_prefix_space", false)));
  } else if (type == "Metaspace") {
    PreStep step;
    step.metaspace = p.value("replacement", "\u2581"), step.prepend = prepend_scheme(p, origin),
    step.metaspace_split = p.value("split", true);
    steps.push_back(step);
  } else if (type == "Digits" && p.value("individual_digits", false)) {
    steps.push_back(split_step(SplitPattern::Digits));
  } else if (type == "Split") {
    const json& pattern = p.value("pattern", json::object());
    const std::string regex = pattern.value("Regex", "");
    const auto known = std::find_if(std::begin(kSplitPatterns), std::end(kSplitPatterns),
                                    [&](const auto& k) { return k.first == regex; });
    if (known == std::end(kSplitPatterns) || p.value("behavior", "") != "Isolated" || p.value("invert", false))
      throw unsupported(origin, "pre_tokenizer", "Split " + pattern.dump() + " (" + p.value("behavior", "?") + ")",
                        "Split with the regex of Llama 3, Qwen2 or GPT-2, Isolated, not inverted");
    steps.push_back(split_step(known->second));
  } else {
    throw unsupported(origin, "pre_tokenizer", type + (type == "Digits" ? " without individual_digits" : ""),
                      "Split, Digits(individual_digits), ByteLevel, Metaspace and sequences of them");
  }
}

void parse_decoder(const json& d, const std::string& origin, std::vector<DecodeStep>& steps) {
  const std::string type = type_of(d);
  if (d.is_null()) return;
  if (type == "Sequence") {
    for (const json& each : d.value("decoders", json::array())) parse_decoder(each, origin, steps);
  } else if (type == "ByteLevel") {
    steps.push_back({DecodeStep::ByteLevel, "", ""});
  } else if (type == "Replace") {
    steps.push_back({DecodeStep::Replace, string_pattern(d, origin, "decoder"), d.value("content", "")});
  } else if (type == "ByteFallback") {
    steps.push_back({DecodeStep::ByteFallback, "", ""});
  } else if (type == "Fuse") {
    steps.push_back({DecodeStep::Fuse, "", ""});
  } else if (type == "Strip") {
    steps.push_back(
        {DecodeStep::Strip, d.value("content", " "), "", d.value("start", size_t(0)), d.value("stop", size_t(0))});
  } else {
    throw unsupported(origin, "decoder", type, "ByteLevel, Replace, ByteFallback, Fuse, Strip and sequences of them");
  }
}

// The special tokens a TemplateProcessing puts before and after a single sequence ($A).
void parse_post_processor(const json& p, const std::string& origin, std::vector<int32_t>& before,
                          std::vector<int32_t>& after) {
  const std::string type = type_of(p);
  if (p.is_null() || type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& each : p.value("processors", json::array())) parse_post_processor(each, origin, before, after);
    return;
  }
  if (type != "TemplateProcessing")
    throw unsupported(origin, "post_processor", type, "TemplateProcessing, ByteLevel and sequences of them");
  bool seen_sequence = false;
  for (const json& piece : p.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = piece.value("SpecialToken", json::object()).value("id", "");
    const json& special = p.value("special_tokens", json::object());
    if (!special.contains(name))
      throw std::runtime_error(origin + ": post_processor puts '" + name + "', which its special_tokens lack");
    for (const json& id : special[name].value("ids", json::array()))
      (seen_sequence ? after : before).push_back(id.get<int32_t>());
  }
}

std::vector<AddedToken> parse_added_tokens(const json& list, bool normalized) {
  std::vector<AddedToken> out;
  for (const json& t : list) {
    const std::string content = t.value("content", "");
    if (!content.empty() && t.value("normalized", !t.value("special", false)) == normalized)
      out.push_back({content, t.value("id", int32_t(-1)), t.value("lstrip", false), t.value("rstrip", false),
                     t.value("single_word", false)});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  return out;
}

// A segment of text: an added token (id >= 0), or text to tokenise.
struct Segment {
  std::string_view text;
  int32_t id;
};

// Rust's char::is_whitespace (Unicode's White_Space), which `tokenizers` strips with.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point that ends at byte `at` of `s`, and where it starts (`*begin`); 0 at the start.
char32_t code_point_before(std::string_view s, size_t at, size_t* begin) {
  size_t b = at;
  while (b > 0 && at - b < 4 && (static_cast<unsigned char>(s[b - 1]) & 0xC0) == 0x80) --b;
  b = b > 0 ? b - 1 : 0;
  *begin = b;
  return at == 0 ? 0 : utf8_decode(s.substr(b, at - b)).front();
}

// The code point that starts at byte `at` of `s`, and where it ends (`*end`); 0 at the end.
char32_t code_point_at(std::string_view s, size_t at, size_t* end) {
  size_t e = at + 1;
  while (e < s.size() && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
  *end = std::min(e, s.size());
  return at >= s.size() ? 0 : utf8_decode(s.substr(at, *end - at)).front();
}

bool is_word_character(char32_t c) {
  const CharClass k = classify(c);
  return c == '_' || (c != 0 && (k == CharClass::Letter || k == CharClass::Number));
}

// Where a match of `t` at [start, stop) of `text` begins and ends once its flags apply (no further left than
// `from`, the end of the last match); nullopt where single_word rules it out.
std::optional<std::pair<size_t, size_t>> match_of(const AddedToken& t, std::string_view text, size_t from, size_t start,
                                                  size_t stop) {
  size_t edge = 0;
  if (t.single_word &&
      (is_word_character(code_point_before(text, start, &edge)) || is_word_character(code_point_at(text, stop, &edge))))
    return std::nullopt;
  for (size_t b = 0; t.lstrip && start > from && is_white_space(code_point_before(text, start, &b));)
    start = std::max(b, from);
  for (size_t e = 0; t.rstrip && stop < text.size() && is_white_space(code_point_at(text, stop, &e));) stop = e;
  return std::pair{start, stop};
}

// The text cut at the added tokens it holds, leftmost first, the longest at a place (tokens sorted so), each
// with the whitespace its lstrip and rstrip take. A match single_word rules out is passed over, as
// `tokenizers` passes over it.
std::vector<Segment> split_added(std::string_view text, const std::vector<AddedToken>& tokens) {
  std::vector<Segment> out;
  std::array<bool, 256> starts{};  // a byte that starts an added token: only there are they compared
  for (const AddedToken& t : tokens) starts[static_cast<unsigned char>(t.content[0])] = true;
  size_t from = 0;
  for (size_t i = 0; i < text.size() && !tokens.empty(); ++i) {
    if (!starts[static_cast<unsigned char>(text[i])]) continue;
    for (const AddedToken& t : tokens) {
      if (t.content[0] != text[i] || text.compare(i, t.content.size(), t.content) != 0) continue;
      const auto match = match_of(t, text, from, i, i + t.content.size());
      if (!match) {
        i += t.content.size() - 1;
        break;
      }
      const auto [start, stop] = *match;
      if (start > from) out.push_back({text.substr(from, start - from), -1});
      out.push_back({text.substr(start, stop - start), t.id});
      from = stop;
      i = from - 1;
      break;
    }
  }
  if (from < text.size()) out.push_back({text.substr(from), -1});
  return out;
}

// The token of a byte-fallback spelling <0xNN>, -1 otherwise.
int byte_of(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int hi = hex(token[3]), lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Every `from` in `s` replaced with `to`.
std::string replace_all(std::string_view s, const std::string& from, const std::string& to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const bool match = !from.empty() && s.compare(i, from.size(), from) == 0;
    out += match ? to : std::string(1, s[i]);
    i += match ? from.size() : 1;
  }
  return out;
}

// Strip's decoding: up to `start` copies of `content` off the token's start and `stop` off its end.
std::string strip(const std::string& t, const std::string& content, size_t start, size_t stop) {
  size_t a = 0, z = t.size();
  for (size_t k = 0; k < start && a < z && t.compare(a, content.size(), content) == 0; ++k) a += content.size();
  for (size_t k = 0; k < stop && z >= a + content.size() && t.compare(z - content.size(), content.size(), content) == 0;
       ++k)
    z -= content.size();
  return t.substr(a, z - a);
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const json& j, const json& config, const std::string& origin);

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out;
    for (const Segment& raw : split_added(text, raw_added_)) {
      if (raw.id >= 0) {
        out.push_back(raw.id);
        continue;
      }
      const std::string normalized = normalize(raw.text);
      for (const Segment& seg : split_added(normalized, normalized_added_)) {
        if (seg.id >= 0) out.push_back(seg.id);
        else encode_segment(seg.text, raw.text.data() == text.data() && seg.text.data() == normalized.data(), out);
      }
    }
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override;
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int32_t id_of(const std::string& token) const override {
    const auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  std::string token_of(int32_t id) const override { return id >= 0 && id < vocab_size() ? tokens_[id] : std::string(); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  bool encodes_in_parts() const override { return in_parts_; }

 private:
  std::string normalize(std::string_view text) const {
    std::string s(text);
    for (const NormalizeStep& n : normalize_) {
      if (n.nfc) {
        s = nfc(s);
        continue;
      }
      if (!n.prepend.empty()) {
        if (!s.empty()) s = n.prepend + s;
        continue;
      }
      s = replace_all(s, n.from, n.to);
    }
    return s;
  }

  // `first`: the segment starts the text (Metaspace's prepend_scheme first).
  void encode_segment(std::string_view text, bool first, std::vector<int32_t>& out) const {
    std::vector<std::string> pieces{std::string(text)};
    for (const PreStep& step : pre_) {
      std::vector<std::string> next;
      for (std::string& piece : pieces) {
        if (step.prefix_space && !piece.starts_with(' ')) piece = " " + piece;
        if (!step.metaspace.empty()) {
          metaspace(step, first, piece, next);
          continue;
        }
        if (!step.split) {
          next.push_back(std::move(piece));
          continue;
        }
        for (std::string_view p : split_pieces(piece, *step.split)) next.emplace_back(p);
      }
      pieces = std::move(next);
    }
    for (const std::string& piece : pieces) {
      if (!byte_level_) {
        model_.encode(piece, out);
        continue;
      }
      std::string symbols;
      for (unsigned char b : piece) symbols += byte_symbol_[b];
      model_.encode(symbols, out);
    }
  }

  static void metaspace(const PreStep& step, bool first, std::string& piece, std::vector<std::string>& out) {
    piece = replace_all(piece, " ", step.metaspace);
    const bool prepend = step.prepend == PreStep::Prepend::Always || (step.prepend == PreStep::Prepend::First && first);
    if (prepend && !piece.starts_with(step.metaspace)) piece = step.metaspace + piece;
    if (!step.metaspace_split) return out.push_back(std::move(piece));
    size_t from = 0;  // each piece from a metaspace on (MergedWithNext)
    for (size_t at = piece.find(step.metaspace, 1); at != std::string::npos; at = piece.find(step.metaspace, at + 1))
      out.push_back(piece.substr(from, at - from)), from = at;
    out.push_back(piece.substr(from));
  }

  std::vector<std::string> decode_steps(std::vector<std::string> tokens) const;
  std::string byte_level_bytes(const std::string& token) const;

  HfBpe model_;
  std::vector<AddedToken> raw_added_, normalized_added_;  // matched before and after normalisation
  std::vector<NormalizeStep> normalize_;
  std::vector<PreStep> pre_;
  bool byte_level_ = false, in_parts_ = false;
  std::vector<DecodeStep> decode_;
  std::vector<std::string> byte_symbol_;
  std::unordered_map<std::string, unsigned char> symbol_byte_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
  int32_t bos_ = -1, eos_ = -1;
};

// A token named by tokenizer_config.json: a string, or an object with its content (older files).
std::string config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return {};
  const json& t = config[key];
  return t.is_string() ? t.get<std::string>() : t.is_object() ? t.value("content", "") : std::string();
}

HfTokenizer::HfTokenizer(const json& j, const json& config, const std::string& origin)
    : model_(j["model"], origin), byte_symbol_(bytes_to_unicode()) {
  raw_added_ = parse_added_tokens(j.value("added_tokens", json::array()), false);
  normalized_added_ = parse_added_tokens(j.value("added_tokens", json::array()), true);
  parse_normalizer(j.value("normalizer", json()), origin, normalize_);
  parse_pre_tokenizer(j.value("pre_tokenizer", json()), origin, pre_, byte_level_);
  parse_decoder(j.value("decoder", json()), origin, decode_);
  std::vector<int32_t> before, after;
  parse_post_processor(j.value("post_processor", json()), origin, before, after);
  // Parts cut at newlines tokenise as the whole when a pre-tokenizer splits there and nothing marks a
  // segment's start (Prepend; a prefix space).
  const bool splits = std::any_of(pre_.begin(), pre_.end(),
                                  [](const PreStep& s) { return s.split && s.split != SplitPattern::Digits; });
  const bool marks_start =
      std::any_of(normalize_.begin(), normalize_.end(), [](const NormalizeStep& n) { return !n.prepend.empty(); }) ||
      std::any_of(pre_.begin(), pre_.end(), [](const PreStep& s) { return s.prefix_space || !s.metaspace.empty(); });
  in_parts_ = splits && !marks_start;
  ids_ = model_.vocab();
  for (const auto* list : {&raw_added_, &normalized_added_})
    for (const AddedToken& t : *list) ids_[t.content] = t.id;
  int32_t size = 0;
  for (const auto& [token, id] : ids_) size = std::max(size, id + 1);
  tokens_.resize(size);
  for (const auto& [token, id] : ids_) tokens_[id] = token;
  for (int b = 0; b < 256; ++b) symbol_byte_[byte_symbol_[b]] = static_cast<unsigned char>(b);
  // BOS: what add_bos_token says, else what the post-processor puts first; EOS: the config's, else the
  // post-processor's last.
  const auto id_named = [&](const std::string& token, const char* key) {
    const int32_t id = id_of(token);
    if (id < 0)
      throw std::runtime_error(
          fmt::format("{}: the tokenizer_config.json beside it names {} '{}', which it lacks", origin, key, token));
    return id;
  };
  bos_ = before.size() == 1 ? before[0] : -1;
  if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
    bos_ = config["add_bos_token"] ? id_named(config_token(config, "bos_token"), "bos_token") : -1;
  eos_ = after.empty() ? -1 : after.back();
  if (const std::string eos = config_token(config, "eos_token"); !eos.empty()) eos_ = id_named(eos, "eos_token");
}

// ByteLevel's decoding: the bytes a token's symbols stand for; a token of other characters (an added token)
// as it is.
std::string HfTokenizer::byte_level_bytes(const std::string& t) const {
  std::string out;
  for (size_t i = 0; i < t.size();) {
    const auto lead = static_cast<unsigned char>(t[i]);
    const size_t len = (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 1;
    const auto it = symbol_byte_.find(t.substr(i, len));
    if (it == symbol_byte_.end()) return t;
    out.push_back(static_cast<char>(it->second));
    i += len;
  }
  return out;
}

// Each decoder step over the tokens, as `tokenizers`' decode_chain runs them.
std::vector<std::string> HfTokenizer::decode_steps(std::vector<std::string> tokens) const {
  for (const DecodeStep& step : decode_) {
    std::vector<std::string> next;
    std::string bytes;  // ByteFallback: the <0xNN> run so far
    const auto flush_bytes = [&] {
      if (bytes.empty()) return;
      if (valid_utf8(bytes)) next.push_back(bytes);
      else
        for (size_t i = 0; i < bytes.size(); ++i) next.emplace_back("\xEF\xBF\xBD");  // U+FFFD for each byte
      bytes.clear();
    };
    for (std::string& t : tokens) {
      switch (step.kind) {
        case DecodeStep::ByteLevel: next.push_back(byte_level_bytes(t)); break;
        case DecodeStep::Replace: next.push_back(replace_all(t, step.from, step.to)); break;
        case DecodeStep::ByteFallback:
          if (const int b = byte_of(t); b >= 0) {
            bytes.push_back(static_cast<char>(b));
            break;
          }
          flush_bytes();
          next.push_back(t);
          break;
        case DecodeStep::Fuse:
          if (next.empty()) next.emplace_back();
          next[0] += t;
          break;
        case DecodeStep::Strip: next.push_back(strip(t, step.from, step.start, step.stop)); break;
      }
    }
    flush_bytes();
    tokens = std::move(next);
  }
  return tokens;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || tokens_[id].empty())
      throw std::out_of_range("tokenizer.json: token id " + std::to_string(id) + " is outside the vocabulary");
    tokens.push_back(tokens_[id]);
  }
  std::string out;
  for (const std::string& t : decode_steps(std::move(tokens))) out += t;
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json) {
  const std::string origin = tokenizer_json.string();
  const json j = json::parse(read_regular_file(tokenizer_json, "the tokenizer"), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw std::runtime_error(origin + ": not a Hugging Face tokenizer.json (no model section)");
  const std::string model = j["model"].value("type", "BPE");  // older files leave out BPE's type
  if (model != "BPE")
    throw unsupported(origin, "model.type", model,
                      "BPE: byte-level, as GPT-2, Llama 3, Qwen2 and SmolLM2, or SentencePiece-style with "
                      "byte_fallback, as Llama 2, TinyLlama and Mistral");
  const std::filesystem::path config_file = tokenizer_json.parent_path() / "tokenizer_config.json";
  json config;
  if (std::filesystem::exists(config_file)) {
    config = json::parse(read_regular_file(config_file, "the tokenizer's config"), nullptr, false);
    if (config.is_discarded())
      throw std::runtime_error(config_file.string() + ": not JSON (it is read for bos_token and eos_token)");
  }
  return std::make_unique<HfTokenizer>(j, config, origin);
}

}  // namespace ferry::dataset
