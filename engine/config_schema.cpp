// The experiment file's keys in one table, and what is made from it: the readers that validate a YAML tree
// into a Config, the key list of `ferry train --help` and docs/config.md. A key added here is read,
// checked and documented; nothing else lists the keys.
#include "engine/config_schema.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>

#include "engine/param_groups.h"
#include "foundation/regular_file.h"
#include "memory/bucket_layout.h"
#include "models/registry.h"

namespace ferry::engine {
namespace {

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr double kUnbounded = std::numeric_limits<double>::infinity();
// Why an epsilon has a floor (models::kSmallestEps), where its range is given.
constexpr const char* kEpsNote = "a smaller one vanishes in fp32, and 0 / 0 is NaN";

// A row of the table: the key in words, and how its value is read into a Target (the Config, or one entry
// of optim.groups). `read` throws a ConfigError naming `where`, the key as the file spells it.
template <class Target>
struct Key {
  ConfigKey doc;
  std::function<void(const YAML::Node& value, const std::string& where, Target& into, const std::filesystem::path& base_dir)> read;
};

// What some rows add to the one their builder makes.
struct Extra {
  std::string note{};           // what a special value means: "0: all cores"
  std::string default_value{};  // the default in words, where the stored one stands for something (0, -1, empty)
  std::string model_kind{};     // the key applies to these model kinds only: "bert", "gpt2 or bert"
  std::string noun{};           // in errors, in place of "an integer" or "a number": "a learning rate"
  bool open_below = false;    // the lower bound itself is refused: (lo, hi]
};

// The Target and the value type of an accessor, a lambda such as [](Config& c) -> auto& { return c.train.steps; }.
template <class F>
struct Accessor : Accessor<decltype(&F::operator())> {};
template <class Lambda, class Value, class Target>
struct Accessor<Value& (Lambda::*)(Target&) const> {
  using target = Target;
  using value = Value;
};

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : separator) + p;
  return text;
}

bool contains(const std::vector<std::string>& list, const std::string& entry) {
  return std::find(list.begin(), list.end(), entry) != list.end();
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  return YAML::Dump(n);
}

// Numbers as a person writes them: 1e-05 as 1e-5, 1e+09 as 1e9.
template <class T>
std::string number_text(T v) {
  if constexpr (std::is_integral_v<T>) {
    return fmt::format("{}", v);
  } else {
    const std::string s = fmt::format("{:g}", v);
    const size_t e = s.find('e');
    if (e == std::string::npos) return s;
    const size_t digits = s.find_first_not_of("+-0", e + 1);
    if (digits == std::string::npos) return s.substr(0, e);  // e+00
    return s.substr(0, e + 1) + (s[e + 1] == '-' ? "-" : "") + s.substr(digits);
  }
}

// A default as the docs show it.
std::string shown(const std::string& v) { return v.empty() ? "none" : v; }
std::string shown(const std::filesystem::path& v) { return v.empty() ? "none" : v.string(); }
std::string shown(bool v) { return v ? "true" : "false"; }
std::string shown(const std::vector<std::string>& v) { return fmt::format("[{}]", join(v, ", ")); }
std::string shown(const std::optional<double>& v) { return v ? number_text(*v) : "none"; }
template <class T>
  requires std::is_arithmetic_v<T>
std::string shown(T v) {
  return number_text(v);
}

// The default of the key `field` reads: what a default-constructed Target holds, unless `extra` says it in words.
template <class F>
std::string default_of(F field, const Extra& extra) {
  if (!extra.default_value.empty()) return extra.default_value;
  typename Accessor<F>::target defaults{};
  return shown(field(defaults));
}

ConfigKey doc(std::string name, std::string type, std::string allowed, std::string default_value, std::string meaning,
              const Extra& extra) {
  if (!extra.note.empty()) allowed += "; " + extra.note;
  return {std::move(name), std::move(type), std::move(allowed), std::move(default_value), std::move(meaning), extra.model_kind};
}

// "[1, 1024]", ">= 1" (up to the type's largest value), "(0, 1]", "> 0" (up to infinity).
template <class T>
std::string range_text(T lo, T hi, bool open_below) {
  if (hi == std::numeric_limits<T>::max() || (std::is_floating_point_v<T> && std::isinf(static_cast<double>(hi))))
    return (open_below ? "> " : ">= ") + number_text(lo);
  return fmt::format("{}{}, {}]", open_below ? "(" : "[", number_text(lo), number_text(hi));
}

// What an error says is allowed: "an integer in [1, 1024] (0: all cores)", "a learning rate in [0, 10]".
std::string expected_text(const std::string& noun, const std::string& range, const std::string& note) {
  const bool interval = range[0] == '[' || range[0] == '(';
  return noun + (interval ? " in " : " ") + range + (note.empty() ? "" : " (" + note + ")");
}

// Whether a scalar is written as a decimal integer: one that does not decode into a key's type is then too
// large for it, not "not an integer".
bool is_integer_literal(const std::string& s) {
  const size_t digits = s.find_first_not_of("+-") == 1 ? 1 : 0;
  return s.size() > digits && s.find_first_not_of("0123456789", digits) == std::string::npos;
}

// "out of range; expected an integer >= 1 (at most 2147483647)": for a value above the range, its upper
// bound is named when the allowed text leaves it out, so a value too large never reads as one too small.
std::string out_of_range(const std::string& where, const std::string& value, const std::string& allowed,
                         const std::string& hi, bool above) {
  const std::string note = above && allowed.find(hi) == std::string::npos ? " (at most " + hi + ")" : "";
  return where + ": " + value + " is out of range; expected " + allowed + note;
}

// A number in its range. Floating-point keys refuse YAML's .nan and .inf, which every range check passes or
// fails for the wrong reason; integer keys compare in their own type, so 2^64-1 fits a uint64_t.
template <class T>
T read_number(const YAML::Node& n, const std::string& where, T lo, T hi, bool open_below, const std::string& allowed) {
  T v{};
  const bool decoded = n.IsScalar() && YAML::convert<T>::decode(n, v);
  const bool literal = std::is_integral_v<T> && n.IsScalar() && is_integer_literal(n.Scalar());
  const bool zero = literal && n.Scalar().find_first_not_of("+-0") == std::string::npos;  // -0 for an unsigned
  if (!decoded && literal && !zero)
    throw ConfigError(out_of_range(where, n.Scalar(), allowed, number_text(hi), n.Scalar()[0] != '-'));
  if (!decoded && !zero)
    throw ConfigError(where + ": " + scalar_text(n) + " is not " + (std::is_integral_v<T> ? "an integer" : "a number") +
                      "; expected " + allowed);
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) throw ConfigError(where + ": " + n.Scalar() + " is not a finite number; expected " + allowed);
  }
  if (v < lo || (open_below && v == lo) || v > hi) throw ConfigError(out_of_range(where, n.Scalar(), allowed, number_text(hi), v > hi));
  return v;
}

std::string read_choice(const YAML::Node& n, const std::string& where, const std::vector<std::string>& options) {
  if (!n.IsScalar() || !contains(options, n.Scalar()))
    throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected one of " + join(options, " | "));
  return n.Scalar();
}

// The builders: each makes a row from the key, its accessor, what is allowed and its meaning.

template <class F>
Key<typename Accessor<F>::target> integer(std::string name, F field, std::type_identity_t<typename Accessor<F>::value> lo,
                                          std::type_identity_t<typename Accessor<F>::value> hi, std::string meaning, Extra extra = {}) {
  using T = typename Accessor<F>::value;
  const std::string range = range_text<T>(lo, hi, false);
  const std::string allowed = expected_text(extra.noun.empty() ? "an integer" : extra.noun, range, extra.note);
  return {doc(std::move(name), "integer", range, default_of(field, extra), std::move(meaning), extra),
          [=](const YAML::Node& n, const std::string& where, auto& into, const auto&) {
            field(into) = read_number<T>(n, where, lo, hi, false, allowed);
          }};
}

template <class F>
Key<typename Accessor<F>::target> number(std::string name, F field, double lo, double hi, std::string meaning, Extra extra = {}) {
  const std::string range = range_text<double>(lo, hi, extra.open_below);
  const std::string allowed = expected_text(extra.noun.empty() ? "a number" : extra.noun, range, extra.note);
  return {doc(std::move(name), "number", range, default_of(field, extra), std::move(meaning), extra),
          [=, open = extra.open_below](const YAML::Node& n, const std::string& where, auto& into, const auto&) {
            field(into) = read_number<double>(n, where, lo, hi, open, allowed);
          }};
}

template <class F>
Key<typename Accessor<F>::target> choice(std::string name, F field, std::vector<std::string> options, std::string meaning,
                                         Extra extra = {}) {
  return {doc(std::move(name), "choice", join(options, " | "), default_of(field, extra), std::move(meaning), extra),
          [=](const YAML::Node& n, const std::string& where, auto& into, const auto&) { field(into) = read_choice(n, where, options); }};
}

// A list of distinct entries of `options` ([] or a single entry written without brackets as well).
template <class F>
Key<typename Accessor<F>::target> choice_list(std::string name, F field, std::vector<std::string> options, std::string meaning) {
  return {doc(std::move(name), "list", "any of " + join(options, ", "), default_of(field, {}), std::move(meaning), {}),
          [=](const YAML::Node& n, const std::string& where, auto& into, const auto&) {
            if (!n.IsSequence() && !n.IsScalar()) throw ConfigError(where + ": expected a list, e.g. [" + options[0] + "]");
            std::vector<std::string> read;
            for (size_t i = 0; i < (n.IsSequence() ? n.size() : 1); ++i) {
              const std::string entry = n.IsSequence() ? read_choice(n[i], fmt::format("{}[{}]", where, i), options) : read_choice(n, where, options);
              if (contains(read, entry)) throw ConfigError(where + ": '" + entry + "' is listed twice");
              read.push_back(entry);
            }
            field(into) = read;
          }};
}

template <class F>
Key<typename Accessor<F>::target> boolean(std::string name, F field, std::string meaning, Extra extra = {}) {
  return {doc(std::move(name), "boolean", "true | false", default_of(field, extra), std::move(meaning), extra),
          [=](const YAML::Node& n, const std::string& where, auto& into, const auto&) {
            bool v = false;
            if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
              throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected true or false");
            field(into) = v;
          }};
}

// A path that must exist when the file is read, relative to the config file's folder.
enum class Exists { File, FileOrFolder };
template <class F>
Key<Config> existing_path(std::string name, F field, Exists kind, std::string meaning, Extra extra = {}) {
  const bool file_only = kind == Exists::File;
  return {doc(std::move(name), file_only ? "file" : "file or folder", "relative to the config file", default_of(field, extra),
              std::move(meaning), extra),
          [=](const YAML::Node& n, const std::string& where, Config& c, const std::filesystem::path& base) {
            if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a path");
            const std::filesystem::path path = n.Scalar();
            std::filesystem::path& dst = field(c);
            dst = path.is_absolute() ? path : base / path;
            // What is neither (a FIFO, a device) is refused here: reading one would block or never end.
            const std::string why = file_only || !std::filesystem::is_directory(dst) ? not_a_regular_file(dst) : "";
            if (!why.empty())
              throw ConfigError(fmt::format("{}: '{}' {}; name {}", where, dst.string(), why,
                                            file_only ? "a regular file" : "a regular file or a folder"));
          }};
}

// A path checked later or never (a folder made on demand), relative to the config file's folder or, for
// outputs such as checkpoints, to where ferry runs.
enum class RelativeTo { ConfigFile, WorkingDirectory };
template <class F>
Key<Config> path(std::string name, F field, const std::string& type, RelativeTo base, std::string meaning, Extra extra = {}) {
  const bool from_config = base == RelativeTo::ConfigFile;
  return {doc(std::move(name), type, from_config ? "relative to the config file" : "relative to where ferry runs",
              default_of(field, extra), std::move(meaning), extra),
          [=](const YAML::Node& n, const std::string& where, Config& c, const std::filesystem::path& base_dir) {
            if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a " + type + " path");
            const std::filesystem::path path = n.Scalar();
            field(c) = from_config && !path.is_absolute() ? base_dir / path : path;
          }};
}

// The keys whose value is more than one number or word.

void read_betas(const YAML::Node& n, const std::string& where, Config& c, const std::filesystem::path&) {
  double b1 = 0, b2 = 0;
  if (!n.IsSequence() || n.size() != 2 || !YAML::convert<double>::decode(n[0], b1) || !YAML::convert<double>::decode(n[1], b2) ||
      !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))  // NaN fails
    throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected [beta1, beta2] with each in [0, 1)");
  c.optim.beta1 = b1, c.optim.beta2 = b2;
}

void read_loss_scale_init(const YAML::Node& n, const std::string& where, Config& c, const std::filesystem::path&) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || v < 1 || v > 1e38 || std::exp2(std::round(std::log2(v))) != v)
    throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected a power of two >= 1, e.g. 65536");
  c.train.loss_scale_init = v;
}

void read_bucket_mb(const YAML::Node& n, const std::string& where, Config& c, const std::filesystem::path&) {
  double mb = 0;
  if (n.IsScalar() && n.Scalar() == "auto") {
    c.offload.bucket_bytes = 0;
    return;
  }
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, mb) || !(mb >= 0.25 && mb <= 65536))  // NaN fails
    throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected auto or MiB in [0.25, 65536]");
  c.offload.bucket_bytes = static_cast<int64_t>(mb * (1 << 20));
}

// auto is stored as 0, which OffloadConfig::gpu_budget reads as "not given".
void read_gpu_budget(const YAML::Node& n, const std::string& where, Config& c, const std::filesystem::path&) {
  if (!n.IsScalar()) throw ConfigError(where + ": " + scalar_text(n) + " is not a size; expected e.g. 8GiB, 512MiB or 1.5GB, or auto");
  if (n.Scalar() == "auto") {
    c.offload.gpu_budget = 0;
    return;
  }
  try {
    c.offload.gpu_budget = parse_bytes(n.Scalar());
  } catch (const std::invalid_argument& e) {
    throw ConfigError(where + ": " + e.what() + "; or auto");
  }
}

template <class Target>
void read_mapping(const YAML::Node& node, const std::string& where, const std::string& prefix, const std::vector<Key<Target>>& keys,
                  Target& into, const std::filesystem::path& base_dir, std::vector<std::string>& given);

// optim.groups' entries: their keys are a table of their own, read into a ParamGroup each.
const std::vector<Key<ParamGroup>>& group_keys() {
  static const std::vector<Key<ParamGroup>> keys{
      {doc("optim.groups[].params", "pattern", "globs separated by |", "required",
           "the parameters' Hugging Face names: * any run of characters, ? one, [0-5] or [ab] one of a set, [!0-5] one not in it", {}),
       [](const YAML::Node& n, const std::string& where, ParamGroup& g, const std::filesystem::path&) {
         if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a name pattern, e.g. \"cls.*\"");
         try {
           check_pattern(n.Scalar());
         } catch (const std::invalid_argument& e) {
           throw ConfigError(where + ": " + e.what());
         }
         g.params = n.Scalar();
       }},
      boolean("optim.groups[].frozen", [](ParamGroup& g) -> auto& { return g.frozen; },
              "never updated: no gradients, copies to the host or AdamW"),
      number("optim.groups[].lr_scale", [](ParamGroup& g) -> auto& { return g.lr_scale; }, 0, 1e6,
             "multiplies the schedule's learning rate (0 keeps the weights, but still computes their gradients)",
             {.default_value = "1", .noun = "a multiplier of optim.lr"}),
      number("optim.groups[].weight_decay", [](ParamGroup& g) -> auto& { return g.weight_decay; }, 0, 10,
             "replaces optim.weight_decay", {.default_value = "optim.weight_decay"}),
  };
  return keys;
}

// optim.groups: a list of {params: pattern, frozen | lr_scale | weight_decay}. Patterns are checked for
// syntax here; what they match is known once the model is built (engine/param_groups.h).
void read_groups(const YAML::Node& node, const std::string& where, Config& c, const std::filesystem::path& base_dir) {
  if (!node.IsSequence())
    throw ConfigError(where + ": expected a list of groups, e.g. [{params: \"*.bias|*LayerNorm*\", weight_decay: 0}]");
  std::vector<ParamGroup> groups(node.size());
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    std::vector<std::string> given;
    read_mapping(node[i], at, "optim.groups[]", group_keys(), groups[i], base_dir, given);
    if (!contains(given, "optim.groups[].params"))
      throw ConfigError(at + ": expected a mapping with a params pattern, e.g. {params: \"cls.*\", lr_scale: 10}");
    if (groups[i].frozen && (groups[i].lr_scale || groups[i].weight_decay))
      throw ConfigError(at + ": a frozen group is never updated; drop its lr_scale and weight_decay, or frozen");
  }
  c.optim.groups = groups;
}

// The sections, each with a line on what it holds.
struct Section {
  std::string name, meaning;
};
const std::vector<Section> kSections{
    {"model", "the architecture and its shape; with model.init_from, its config.json gives every key not stated"},
    {"data", "the training text or token shard, and its tokenizer"},
    {"optim", "AdamW, its learning-rate schedule, and parameter groups"},
    {"train", "the training loop: batches, steps, evaluation, checkpoints, precision"},
    {"offload", "which weights live on the device and how the others travel"},
    {"device", "where the model runs: a kind (device: cpu), or a mapping with the host device's settings"},
};

// The defaults of a model section of this kind (the numeric choices' defaults depend on it).
models::ModelConfig model_of_kind(const std::string& kind) {
  models::ModelConfig model;
  model.kind = kind;
  return model;
}

std::vector<Key<Config>> model_keys() {
  const models::ModelConfig gpt2 = model_of_kind("gpt2"), bert = model_of_kind("bert"), llama = model_of_kind("llama");
  const std::string eps_defaults = fmt::format("gpt2 {}, bert {}", number_text(gpt2.default_norm_eps()), number_text(bert.default_norm_eps()));
  const std::string gelu_defaults = fmt::format("gpt2 {}, bert {}", gpt2.default_gelu(), bert.default_gelu());
  return {
      choice(
          "model.kind", [](Config & c) -> auto& { return c.model.kind; }, models::kModelKinds,
          "the architecture: gpt2 (a causal LM), bert (a masked LM) or llama (the causal LMs of the Llama family: "
          "Llama 2/3, "
          "Mistral, Qwen2, SmolLM)"),
      integer(
          "model.n_layer", [](Config & c) -> auto& { return c.model.n_layer; }, 1, 1024, "transformer blocks"),
      integer(
          "model.n_head", [](Config & c) -> auto& { return c.model.n_head; }, 1, 1024, "attention heads"),
      integer(
          "model.n_embd", [](Config & c) -> auto& { return c.model.n_embd; }, 1, 65536,
          "the width, a multiple of model.n_head"),
      integer(
          "model.vocab_size", [](Config & c) -> auto& { return c.model.vocab_size; }, 1, 1 << 22,
          "rows of the token embedding; with the byte tokenizer at least 256 (bert: 257, for [MASK])"),
      integer(
          "model.seq_len", [](Config & c) -> auto& { return c.model.seq_len; }, 1, 1 << 20,
          "rows of the position table (llama: max_position_embeddings): the longest sequence, and the one trained "
          "unless "
          "train.seq_len says otherwise"),
      integer("model.intermediate_size", [](Config & c) -> auto& { return c.model.intermediate_size; }, 1, 1 << 20,
              "the MLP's width", {.default_value = "4 * model.n_embd"}),
      number("model.layer_norm_eps", [](Config & c) -> auto& { return c.model.layer_norm_eps; }, models::kSmallestEps,
             1, "LayerNorm's epsilon", {.note = kEpsNote, .default_value = eps_defaults, .model_kind = "gpt2 or bert"}),
      choice("model.activation", [](Config & c) -> auto& { return c.model.activation; }, models::kActivations,
             "the GELU of the MLP (and BERT's head): gelu is exact (erf), gelu_tanh its tanh approximation (gelu_new)",
             {.default_value = gelu_defaults, .model_kind = "gpt2 or bert"}),
      integer("model.type_vocab_size", [](Config & c) -> auto& { return c.model.type_vocab_size; }, 1, 1024,
              "rows of the token-type embedding (training uses type 0)", {.model_kind = "bert"}),
      integer("model.num_key_value_heads", [](Config & c) -> auto& { return c.model.n_kv_head; }, 1, 1024,
              "key/value heads, a divisor of model.n_head (grouped-query attention: each serves n_head / "
              "num_key_value_heads "
              "query heads)",
              {.default_value = "model.n_head", .model_kind = "llama"}),
      number("model.rms_norm_eps", [](Config & c) -> auto& { return c.model.rms_norm_eps; }, models::kSmallestEps, 1,
             "RMSNorm's epsilon",
             {.note = kEpsNote, .default_value = number_text(llama.default_norm_eps()), .model_kind = "llama"}),
      number("model.rope_theta", [](Config & c) -> auto& { return c.model.rope_theta; }, 1, 1e12,
             "the base of the rotary embeddings' wavelengths", {.model_kind = "llama"}),
      choice("model.rope_scaling.rope_type", [](Config & c) -> auto& { return c.model.rope_scaling.rope_type; },
             models::kRopeTypes,
             "default: none; llama3: Llama 3.1's, long wavelengths slowed by model.rope_scaling.factor",
             {.model_kind = "llama"}),
      number("model.rope_scaling.factor", [](Config & c) -> auto& { return c.model.rope_scaling.factor; }, 1, 1e6,
             "llama3: how much slower the long wavelengths turn", {.model_kind = "llama"}),
      number("model.rope_scaling.low_freq_factor",
             [](Config & c) -> auto& { return c.model.rope_scaling.low_freq_factor; }, 1e-6, 1e6,
             "llama3: wavelengths above original_max_position_embeddings / low_freq_factor are slowed in full",
             {.model_kind = "llama"}),
      number("model.rope_scaling.high_freq_factor",
             [](Config & c) -> auto& { return c.model.rope_scaling.high_freq_factor; }, 1e-6, 1e6,
             "llama3: wavelengths below original_max_position_embeddings / high_freq_factor are kept; a blend between",
             {.model_kind = "llama"}),
      integer("model.rope_scaling.original_max_position_embeddings",
              [](Config & c) -> auto& { return c.model.rope_scaling.original_max_position_embeddings; }, 1, 1 << 24,
              "llama3: the context the model was first trained at", {.model_kind = "llama"}),
      boolean("model.tie_word_embeddings", [](Config & c) -> auto& { return c.model.tie_word_embeddings; },
              "the LM head is the token embedding (SmolLM, small Qwen2); false: its own lm_head.weight",
              {.model_kind = "llama"}),
      boolean("model.attention_bias", [](Config & c) -> auto& { return c.model.attention_bias; },
              "biases on the q, k and v projections (Qwen2)", {.model_kind = "llama"}),
      existing_path(
          "model.init_from", [](Config & c) -> auto& { return c.model.init_from; }, Exists::FileOrFolder,
          "Hugging Face weights to start from (safetensors file, folder or sharded index); its config.json fills "
          "every model key not stated, and a stated key that differs is an error"),
      choice_list(
          "model.init_missing", [](Config & c) -> auto& { return c.model.init_missing; }, models::kInitMissingParts,
          "parts model.init_from may lack, initialised as new: head is BERT's masked-LM head, which a BertModel lacks"),
  };
}

std::vector<Key<Config>> data_keys() {
  return {
      path("data.path", [](Config & c) -> auto& { return c.data.path; }, "file", RelativeTo::ConfigFile,
           "the training text, JSONL (one document a line, its \"text\" field), or a token shard from ferry tokenize",
           {.default_value = "required"}),
      choice(
          "data.format", [](Config & c) -> auto& { return c.data.format; }, {"auto", "text", "shard", "jsonl"},
          "how data.path is read; auto: a name ending in .bin is a token shard, in .jsonl JSONL, anything else text; "
          "JSONL's documents are each ended by the tokenizer's EOS (after its BOS, if it puts one)"),
      choice(
          "data.tokenizer", [](Config & c) -> auto& { return c.data.tokenizer; }, {"byte", "gpt2", "wordpiece", "hf"},
          "byte (a token per byte), gpt2 (byte-level BPE), wordpiece (BERT's) or hf (a Hugging Face tokenizer.json as "
          "it is: Llama 2/3, Mistral, Qwen2, SmolLM2, GPT-2); text is tokenised once and cached; for a shard it says "
          "what made it"),
      existing_path(
          "data.vocab", [](Config & c) -> auto& { return c.data.vocab; }, Exists::File,
          "the tokenizer's vocabulary: vocab.txt (wordpiece), vocab.json (gpt2) or a tokenizer.json (hf, or gpt2 "
          "and wordpiece as GPT2Tokenizer and BertTokenizer save it; a tokenizer_config.json beside it names BOS "
          "and EOS)",
          {.default_value = "model.init_from's folder's"}),
      existing_path("data.merges", [](Config & c) -> auto& { return c.data.merges; }, Exists::File, "gpt2's merges.txt",
                    {.default_value = "model.init_from's folder's"}),
      choice(
          "data.lowercase", [](Config & c) -> auto& { return c.data.lowercase; }, {"auto", "true", "false"},
          "wordpiece: lowercase and strip accents (uncased models); auto: do_lower_case of the tokenizer_config.json "
          "beside the vocabulary, else true"),
      path("data.cache_dir", [](Config & c) -> auto& { return c.data.cache_dir; }, "folder", RelativeTo::ConfigFile,
           "where tokenised text is cached",
           {.default_value = "$FERRY_CACHE_DIR/tokens, else $XDG_CACHE_HOME/ferry/tokens, else ~/.cache/ferry/tokens"}),
      number("data.val_fraction", [](Config & c) -> auto& { return c.data.val_fraction; }, 0, 0.5,
             "the tail of the data held out for validation", {.noun = "a fraction"}),
      integer("data.mask_token_id", [](Config & c) -> auto& { return c.data.mask_token_id; }, -1, 1 << 22,
              "the [MASK] id, below model.vocab_size",
              {.note = "-1: the vocabulary's [MASK], the last id for the byte tokenizer", .model_kind = "bert"}),
  };
}

std::vector<Key<Config>> optim_keys() {
  const OptimConfig defaults;
  return {
      number("optim.lr", [](Config & c) -> auto& { return c.optim.lr; }, 0, 10,
             "AdamW's learning rate, reached after the warmup", {.noun = "a learning rate"}),
      {doc("optim.betas", "[number, number]", "each in [0, 1)",
           fmt::format("[{}, {}]", number_text(defaults.beta1), number_text(defaults.beta2)),
           "AdamW's decay rates of the first and second moments", {}),
       read_betas},
      number("optim.eps", [](Config & c) -> auto& { return c.optim.eps; }, models::kSmallestEps, kUnbounded,
             "AdamW's epsilon, added to the root of the second moment", {.note = kEpsNote}),
      number(
          "optim.weight_decay", [](Config & c) -> auto& { return c.optim.weight_decay; }, 0, 10,
          "decoupled weight decay on every parameter, as torch.optim.AdamW"),
      number("optim.grad_clip", [](Config & c) -> auto& { return c.optim.grad_clip; }, 0, 1e9,
             "the largest global gradient norm (over the parameters trained)", {.note = "0: no clipping"}),
      integer(
          "optim.warmup_steps", [](Config & c) -> auto& { return c.optim.warmup_steps; }, 0, kIntMax,
          "steps of linear warmup to optim.lr; more than train.steps is warned of (optim.lr is never reached)"),
      choice(
          "optim.schedule", [](Config & c) -> auto& { return c.optim.schedule; }, {"cosine", "constant"},
          "after the warmup: cosine decay to optim.min_lr over the remaining steps, or constant"),
      number("optim.min_lr", [](Config & c) -> auto& { return c.optim.min_lr; }, 0, 10,
             "where the cosine decay ends; at most optim.lr",
             {.default_value = "optim.lr / 10", .noun = "a learning rate"}),
      integer("optim.cpu_threads", [](Config & c) -> auto& { return c.optim.cpu_threads; }, 0, 4096,
              "threads of the CPU AdamW", {.note = "0: all cores"}),
      choice(
          "optim.isa", [](Config & c) -> auto& { return c.optim.isa; }, {"auto", "scalar", "avx2", "avx512"},
          "the CPU AdamW's kernels; auto: the widest the CPU runs; the environment variable FERRY_CPU_ISA overrides "
          "it"),
      choice(
          "optim.state", [](Config & c) -> auto& { return c.optim.state; }, {"exact", "compact"},
          "the optimizer state on the host: exact (fp32 master weights, m and v: 14 bytes a parameter with the bf16 "
          "working copy its gradients land on; 16 with train.grad_accum above 1 or offload.overlap: delayed) or "
          "compact (bf16 weights with stochastic rounding, bf16 m and v: 8 bytes a "
          "parameter; AdamW on the CPU for every bucket; needs train.precision: bf16)"),
      {doc("optim.groups", "list of mappings", "entries with the keys optim.groups[].*", "none",
           "parameter groups: each parameter takes the settings of the first group whose params pattern matches its "
           "name",
           {}),
       read_groups},
  };
}

std::vector<Key<Config>> train_keys() {
  return {
      integer("train.batch_size", [](Config& c) -> auto& { return c.train.batch_size; }, 1, 1 << 20, "sequences per micro-batch"),
      integer("train.grad_accum", [](Config& c) -> auto& { return c.train.grad_accum; }, 1, 1 << 20, "micro-batches per optimizer step"),
      integer("train.seq_len", [](Config& c) -> auto& { return c.train.seq_len; }, 0, 1 << 20,
              "tokens per training sequence, at most model.seq_len", {.note = "0: model.seq_len"}),
      integer("train.steps", [](Config& c) -> auto& { return c.train.steps; }, 1, kIntMax, "optimizer steps"),
      integer("train.seed", [](Config& c) -> auto& { return c.train.seed; }, 0, std::numeric_limits<uint64_t>::max(),
              "seeds the initial weights and the order of the batches"),
      integer("train.log_every", [](Config& c) -> auto& { return c.train.log_every; }, 1, kIntMax, "steps between status lines"),
      integer("train.eval_every", [](Config& c) -> auto& { return c.train.eval_every; }, 0, kIntMax, "steps between validations",
              {.note = "0: at the start and the end only"}),
      integer("train.eval_batches", [](Config& c) -> auto& { return c.train.eval_batches; }, 1, 1 << 20, "batches per validation"),
      integer("train.threads", [](Config& c) -> auto& { return c.train.threads; }, 0, 4096, "CPU threads of the model's ops",
              {.note = "0: all cores"}),
      path("train.checkpoint_dir", [](Config& c) -> auto& { return c.train.checkpoint_dir; }, "folder", RelativeTo::WorkingDirectory,
           "where the run's checkpoints go (one run per folder)",
           {.default_value = "runs/<config file's name>/<n>: a new folder for each run"}),
      integer("train.checkpoint_every", [](Config& c) -> auto& { return c.train.checkpoint_every; }, 0, kIntMax,
              "steps between checkpoints", {.note = "0: at the end and when interrupted"}),
      integer("train.keep_checkpoints", [](Config& c) -> auto& { return c.train.keep_checkpoints; }, 1, 1 << 20,
              "how many of the run's own checkpoints are kept"),
      choice("train.activation_checkpointing", [](Config& c) -> auto& { return c.train.activation_checkpointing; },
             {"auto", "true", "false"}, "recompute blocks in backward: auto (the fewest that make the plan fit), true (every block), false"),
      choice("train.precision", [](Config& c) -> auto& { return c.train.precision; }, {"bf16", "fp16", "fp32"},
             "how the device stores weights, activations and their gradients (fp16: with dynamic loss scaling); "
             "master weights and Adam's moments are fp32 always"),
      {doc("train.loss_scale_init", "power of two", "[1, 1e38]", number_text(TrainConfig{}.loss_scale_init),
           "fp16: the first loss scale", {}),
       read_loss_scale_init},
      integer("train.loss_scale_growth_interval", [](Config& c) -> auto& { return c.train.loss_scale_growth_interval; }, 1, kIntMax,
              "fp16: good steps before the loss scale doubles"),
  };
}

std::vector<Key<Config>> offload_keys() {
  return {
      choice("offload.policy", [](Config& c) -> auto& { return c.offload.policy; }, {"resident", "zero-offload", "chunk-lru", "greedy"},
             "where weights live: resident (all on the device), zero-offload (on the device, AdamW on the CPU), chunk-lru "
             "(fetched on demand, as Gemini), greedy (planned per bucket)"),
      {doc("offload.gpu_budget", "size or auto", "at least 1 byte and less than 8 EiB, e.g. 8GiB, 512MiB, 1.5GB", "auto",
           "the device memory the plan may use; auto: the device's free memory less a margin", {}),
       read_gpu_budget},
      {doc("offload.bucket_mb", "auto or MiB", "[0.25, 65536]", "auto",
           fmt::format("the weights (in train.precision) per parameter bucket, the unit that travels; auto: {} MiB until the "
                       "cost model measures the link", memory::BucketLayout::kDefaultBucketBytes >> 20),
           {}),
       read_bucket_mb},
      choice("offload.overlap", [](Config& c) -> auto& { return c.offload.overlap; }, {"backward", "delayed", "pipelined"},
             "when the CPU's AdamW runs: backward (once a bucket's gradients land), delayed (one step behind, as "
             "ZeRO-Offload's DPU; approximate), pipelined (on into the next step's forward, which waits per bucket; exact)"),
      integer("offload.sync_steps", [](Config& c) -> auto& { return c.offload.sync_steps; }, 0, kIntMax,
              "delayed: the first steps still update synchronously"),
      existing_path("offload.cost_model", [](Config& c) -> auto& { return c.offload.cost_model; }, Exists::File,
                    "a JSON cost model, e.g. configs/cost_models/h100-assumed.json",
                    {.default_value = "none: the device is measured at start-up (op times, links, AdamW)"}),
  };
}

std::vector<Key<Config>> device_keys() {
  const std::vector<std::string> kinds{"auto", "cpu", "cuda"};
  return {
      choice("device", [](Config& c) -> auto& { return c.device; }, kinds, "the short form of device.kind"),
      choice("device.kind", [](Config& c) -> auto& { return c.device; }, kinds,
             "auto: the GPU when one is visible, else the host device; cpu: the host device (a simulated GPU on the CPU); "
             "cuda: the first GPU"),
      number("device.host.link_gbps", [](Config& c) -> auto& { return c.host_device.link_gbps; }, 0, 1e4,
             "the host device's copies throttled to this many GB/s each way, like a PCIe link", {.note = "0: unthrottled"}),
  };
}

const std::vector<Key<Config>>& table() {
  static const std::vector<Key<Config>> keys = [] {
    std::vector<Key<Config>> all;
    for (auto&& section : {model_keys(), data_keys(), optim_keys(), train_keys(), offload_keys(), device_keys()})
      all.insert(all.end(), section.begin(), section.end());
    return all;
  }();
  return keys;
}

// The names one level below `prefix` ("" for the sections): its keys and the sections within it.
template <class Target>
std::vector<std::string> children(const std::vector<Key<Target>>& keys, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& key : keys) {
    const std::string& name = key.doc.name;
    if (!prefix.empty() && !name.starts_with(prefix + ".")) continue;
    const std::string rest = prefix.empty() ? name : name.substr(prefix.size() + 1);
    const std::string child = rest.substr(0, rest.find('.'));
    if (!contains(names, child)) names.push_back(child);
  }
  return names;
}

template <class Target>
bool is_section(const std::vector<Key<Target>>& keys, const std::string& name) {
  return std::any_of(keys.begin(), keys.end(), [&](const auto& key) { return key.doc.name.starts_with(name + "."); });
}

// "a, b or c"
std::string listed(std::vector<std::string> names, const std::string& conjunction = "or") {
  const std::string last = names.back();
  names.pop_back();
  return names.empty() ? last : join(names, ", ") + " " + conjunction + " " + last;
}

// Reads a mapping: `where` is how errors name it ("optim.groups[2]"), `prefix` its name in the table
// ("optim.groups[]"; "" for the top level). A section given as a mapping is read key by key; `device` is
// both a key (device: cpu) and a section (device: {kind: cpu}).
template <class Target>
void read_mapping(const YAML::Node& node, const std::string& where, const std::string& prefix, const std::vector<Key<Target>>& keys,
                  Target& into, const std::filesystem::path& base_dir, std::vector<std::string>& given) {
  const bool top = prefix.empty();
  if (top && !node.IsMap()) throw ConfigError("the top level must be a mapping with sections " + join(children(keys, ""), ", "));
  if (!node.IsMap()) throw ConfigError(where + ": expected a mapping of keys, got " + scalar_text(node));
  std::vector<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string at = top ? key : where + "." + key, name = top ? key : prefix + "." + key;
    if (contains(seen, key)) throw ConfigError(at + (top ? ": section given twice; merge them into one" : ": given twice"));
    seen.push_back(key);
    const auto row = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.doc.name == name; });
    if (is_section(keys, name) && (kv.second.IsMap() || row == keys.end())) {
      read_mapping(kv.second, at, name, keys, into, base_dir, given);
    } else if (row != keys.end()) {
      row->read(kv.second, at, into, base_dir);
      given.push_back(name);
    } else if (top) {
      throw ConfigError(key + ": unknown section; expected " + listed(children(keys, "")));
    } else {
      throw ConfigError(at + ": unknown key; " + where + " takes " + join(children(keys, prefix), ", "));
    }
  }
}

// The documentation's view of a key: its type and what is allowed in a few words, and its meaning with the
// model kind it applies to.
std::string summary(const ConfigKey& key) {
  if (key.type == "choice") return key.allowed;
  if (key.allowed[0] == '[' || key.allowed[0] == '(') return key.type + " in " + key.allowed;
  return key.type + (key.allowed[0] == '>' ? " " : ", ") + key.allowed;
}

std::string meaning_of(const ConfigKey& key) { return (key.model_kind.empty() ? "" : key.model_kind + " only: ") + key.meaning; }

// `text` broken into lines of at most `width` columns (a longer word stays whole), the first indented by
// `first`, the others by `indent`.
std::string wrapped(const std::string& text, size_t width, size_t first, size_t indent) {
  std::string out, line(first, ' ');
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find(' ', start), text.size());
    const std::string word = text.substr(start, end - start);
    if (line.find_first_not_of(' ') != std::string::npos && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent, ' ');
    }
    line += (line.empty() || line.back() == ' ' ? "" : " ") + word;
    start = end + 1;
  }
  return out + line + "\n";
}

// Markdown table cells: '|' would end the cell, '*' start emphasis, '<' a tag.
std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? "\\|" : ch == '*' ? "\\*" : ch == '<' ? "&lt;" : std::string(1, ch);
  return out;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

}  // namespace

std::vector<std::string> read_config_keys(const YAML::Node& root, const std::filesystem::path& base_dir, Config& config) {
  std::vector<std::string> given;
  read_mapping(root, "", "", table(), config, base_dir, given);
  return given;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> all;
    for (const Key<Config>& key : table()) {
      all.push_back(key.doc);
      if (key.doc.name == "optim.groups")
        for (const Key<ParamGroup>& entry : group_keys()) all.push_back(entry.doc);
    }
    return all;
  }();
  return keys;
}

std::string config_keys_text() {
  std::string text = wrapped("Keys of the experiment file (`ferry config` lists them, docs/config.md as a table). Every key may "
                             "be left out but data.path; --set KEY=VALUE overrides one.", 100, 0, 0);
  for (const Section& section : kSections) {
    text += "\n";
    text += wrapped(section.name + ": " + section.meaning, 100, 0, 2);
    for (const ConfigKey& key : config_keys()) {
      if (section_of(key.name) != section.name) continue;
      const std::string name = key.name == section.name ? key.name : key.name.substr(section.name.size() + 1);
      text += wrapped(fmt::format("{} ({}; default {}): {}", name, summary(key), key.default_value, meaning_of(key)), 100, 2, 6);
    }
  }
  return text;
}

std::string config_markdown() {
  std::vector<std::string> sections;
  for (const Section& section : kSections) sections.push_back("`" + section.name + "`");
  std::string md =
      "# Experiment files: every key\n\n"
      "<!-- Generated from the table in engine/config_schema.cpp by `ferry config --markdown > docs/config.md`;\n"
      "     do not edit: the test cli.config_doc_is_current fails when this file differs from that output. -->\n\n"
      "An experiment is a YAML file with up to six sections, " + listed(sections, "and") + ".\n"
      "Every key may be left out but `data.path`. `ferry train`, `ferry plan` and `ferry eval` take `--set KEY=VALUE`\n"
      "(repeatable) to override a key with a YAML value, e.g. `--set optim.lr=1e-3 --set optim.betas=[0.9,0.99]`;\n"
      "`ferry train --help` and `ferry config` list the keys as text.\n\n"
      "An unknown section or key, a key given twice, a value of the wrong type, a NaN or infinite number (`.nan`, `.inf`),\n"
      "or a value out of range or not among the choices is an error that names the key, the value and what is allowed.\n"
      "Relative paths resolve against the config file's folder, except `train.checkpoint_dir` (against where `ferry`\n"
      "runs). Sizes are a number and a unit: `8GiB`, `512MiB`, `1.5GB`, `4096` (bytes).\n";
  for (const Section& section : kSections) {
    const std::string meaning = cell(section.meaning);
    md += "\n## " + section.name + "\n\n" + char(std::toupper(meaning[0])) + meaning.substr(1) + ".\n\n| key | type | allowed | default | meaning |\n|---|---|---|---|---|\n";
    for (const ConfigKey& key : config_keys())
      if (section_of(key.name) == section.name)
        md += fmt::format("| `{}` | {} | {} | {} | {} |\n", key.name, cell(key.type), cell(key.allowed), cell(key.default_value),
                          cell(meaning_of(key)));
  }
  return md;
}

}  // namespace ferry::engine
