// Checkpoints: the files of one checkpoint folder (written and fsynced, state.json last with the others'
// checksums), finding the newest in a checkpoint dir, and reading one back: every state.json field
// range-checked, every file checked against its recorded size and CRC32C before it is used.
#include "formats/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "foundation/atomic_file.h"
#include "formats/checkpoint_dir.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "memory/convert.h"
#include "models/registry.h"

namespace ferry::formats {
namespace {

using nlohmann::json;

constexpr int64_t kMaxStep = std::numeric_limits<int>::max();  // the trainer counts steps in an int

std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

// The slice of a flat buffer laid out like the ParameterStore's values.
// Reads the fields of one JSON object of state.json; every defect is an error naming the file, the field
// (with its section: "model.n_head"), its value and what is allowed.
class StateFields {
 public:
  StateFields(const json& j, std::string origin, std::string prefix)
      : j_(j), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw std::runtime_error(fmt::format("'{}' is damaged: {}{} {} (written by hand, or not by `ferry train`?); "
                                         "use another checkpoint", origin_, prefix_, key, problem));
  }
  bool has(const std::string& key) const { return j_.contains(key); }
  const json& at(const std::string& key) const { return j_.at(key); }

  int64_t integer(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback = {}) const {
    if (!has(key)) return fallback ? *fallback : (fail(key, "is missing"), 0);
    const json& v = at(key);
    const bool fits = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi));
    if (!fits || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(key, fmt::format("is {}; expected an integer in [{}, {}]", v.dump(), lo, hi));
    return v.get<int64_t>();
  }
  // A number in [lo, hi] (above lo when lo_open); null reads as NaN where null_is_nan (NaN is written so).
  double number(const std::string& key, double lo, double hi, bool lo_open, bool null_is_nan, std::optional<double> fallback = {}) const {
    if (!has(key)) return fallback ? *fallback : (fail(key, "is missing"), 0.0);
    const json& v = at(key);
    if (v.is_null() && null_is_nan) return std::numeric_limits<double>::quiet_NaN();
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
      fail(key, fmt::format("is {}; expected a number in {}{:g}, {:g}]", v.dump(), lo_open ? "(" : "[", lo, hi));
    return x;
  }
  std::string text(const std::string& key, std::optional<std::string> fallback = {}) const {
    if (!has(key)) return fallback ? *fallback : (fail(key, "is missing"), std::string());
    if (!at(key).is_string() || at(key).get<std::string>().empty()) fail(key, fmt::format("is {}; expected a non-empty string", at(key).dump()));
    return at(key).get<std::string>();
  }
  // An array of non-empty strings; absent: empty.
  std::vector<std::string> texts(const std::string& key) const {
    if (!has(key)) return {};
    std::vector<std::string> out;
    if (at(key).is_array())
      for (const json& v : at(key))
        if (v.is_string() && !v.get<std::string>().empty()) out.push_back(v.get<std::string>());
    if (!at(key).is_array() || out.size() != at(key).size()) fail(key, fmt::format("is {}; expected an array of non-empty strings", at(key).dump()));
    return out;
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) fail(key, fmt::format("is {}; expected true or false", at(key).dump()));
    return at(key).get<bool>();
  }
  uint32_t crc(const std::string& key) const {
    const std::string s = text(key);
    if (s.size() != 8 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
      fail(key, fmt::format("is \"{}\"; expected 8 lowercase hex digits", s));
    return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
  }
  // An array of objects, each read with its place in the field's name ("data[0].bytes"); absent: none.
  std::vector<StateFields> objects(const std::string& key) const {
    if (!has(key)) return {};
    if (!at(key).is_array()) fail(key, fmt::format("is {}; expected an array of objects", at(key).dump()));
    std::vector<StateFields> out;
    for (size_t i = 0; i < at(key).size(); ++i) {
      const std::string item = fmt::format("{}[{}]", key, i);
      if (!at(key)[i].is_object()) fail(item, fmt::format("is {}; expected an object", at(key)[i].dump()));
      out.emplace_back(at(key)[i], origin_, prefix_ + item + ".");
    }
    return out;
  }
  StateFields object(const std::string& key) const {
    if (!at(key).is_object()) fail(key, fmt::format("is {}; expected an object", at(key).dump()));
    return StateFields(at(key), origin_, prefix_ + key + ".");
  }

 private:
  const json& j_;
  std::string origin_, prefix_;
};

// Llama's choices (model_json writes them for a llama only).
void read_llama(const StateFields& m, models::ModelConfig& c) {
  c.n_kv_head = static_cast<int>(m.integer("num_key_value_heads", 1, c.n_head));
  if (c.n_head % c.n_kv_head != 0)
    m.fail("num_key_value_heads", fmt::format("is {}; expected a divisor of n_head {}", c.n_kv_head, c.n_head));
  c.rms_norm_eps = m.number("rms_norm_eps", 0, 1, true, false);
  c.rope_theta = m.number("rope_theta", 1, 1e12, false, false);
  models::RopeScalingConfig& r = c.rope_scaling;
  r.rope_type = m.text("rope_type");
  if (std::ranges::find(models::kRopeTypes, r.rope_type) == models::kRopeTypes.end())
    m.fail("rope_type", fmt::format("is \"{}\"; expected one of {}", r.rope_type, fmt::join(models::kRopeTypes, ", ")));
  r.factor = m.number("rope_factor", 1, 1e6, false, false);
  r.low_freq_factor = m.number("rope_low_freq_factor", 0, 1e6, true, false);
  r.high_freq_factor = m.number("rope_high_freq_factor", 0, 1e6, true, false);
  r.original_max_position_embeddings = static_cast<int>(m.integer("rope_original_max_position_embeddings", 1, 1 << 24));
  c.tie_word_embeddings = m.boolean("tie_word_embeddings", false);
  c.attention_bias = m.boolean("attention_bias", false);
}

// The bounds of engine::Config's model keys: a shape outside them is no checkpoint of ours, and would
// size allocations in `ferry sample` and `ferry export`.
models::ModelConfig read_model(const StateFields& f) {
  if (!f.has("model")) {
    models::ModelConfig unknown;
    unknown.n_layer = 0;  // checkpoints of older builds do not say
    return unknown;
  }
  const StateFields m = f.object("model");
  models::ModelConfig c;
  c.kind = m.text("kind", std::string("gpt2"));
  if (std::ranges::find(models::kModelKinds, c.kind) == models::kModelKinds.end())
    m.fail("kind", fmt::format("is \"{}\"; expected one of {}", c.kind, fmt::join(models::kModelKinds, ", ")));
  c.n_layer = static_cast<int>(m.integer("n_layer", 1, 1024));
  c.n_head = static_cast<int>(m.integer("n_head", 1, 1024));
  c.n_embd = static_cast<int>(m.integer("n_embd", 1, 65536));
  if (c.n_embd % c.n_head != 0) m.fail("n_embd", fmt::format("is {}; expected a multiple of n_head {}", c.n_embd, c.n_head));
  c.vocab_size = static_cast<int>(m.integer("vocab_size", 1, 1 << 22));
  c.seq_len = static_cast<int>(m.integer("seq_len", 1, 1 << 20));
  // Checkpoints of earlier builds lack the numeric choices: they computed with the architecture's own.
  c.intermediate_size = static_cast<int>(m.integer("intermediate_size", 1, 1 << 20, 0));
  c.layer_norm_eps = m.number("layer_norm_eps", 0, 1, true, false, 0.0);
  c.activation = m.text("activation", std::string());
  if (!c.activation.empty() && c.activation != "gelu" && c.activation != "gelu_tanh")
    m.fail("activation", "is \"" + c.activation + "\"; expected gelu or gelu_tanh");
  c.type_vocab_size = static_cast<int>(m.integer("type_vocab_size", 1, 1024, 2));
  if (c.kind == "llama") read_llama(m, c);
  return c;
}

std::optional<TrainState::PendingUpdate> read_pending(const StateFields& f, int64_t optimizer_steps) {
  if (!f.has("pending_update")) return std::nullopt;
  const StateFields u = f.object("pending_update");
  TrainState::PendingUpdate p;
  // The update of the last step: AdamW's step count after optimizer_steps (or the one that was skipped).
  p.adam_step = u.integer("adam_step", 1, optimizer_steps + 1);
  p.lr = u.number("lr", 0, 10, false, false);
  p.grad_norm = u.number("grad_norm", 0, 1e300, false, false, 0.0);
  p.skipped = u.boolean("skipped", false);
  p.updated_in_step = u.texts("updated_in_step");
  // The step's gradient scale (clip coefficient / loss scale): infinite (written as null) when the scale had
  // grown beyond fp32; 0 for a skipped step, whose infinite norm clips to nothing (nothing is applied).
  const double grad_scale = u.number("grad_scale", 0, std::numeric_limits<float>::max(), !p.skipped, true, 1.0);
  p.grad_scale = std::isnan(grad_scale) ? std::numeric_limits<float>::infinity() : static_cast<float>(grad_scale);
  return p;
}

void read_config_and_files(const StateFields& f, TrainState& s) {
  if (f.has("config")) {
    const StateFields c = f.object("config");
    for (const auto& [key, value] : f.at("config").items()) s.config.emplace_back(key, c.text(key));
  }
  if (!f.has("files")) return;
  const StateFields files = f.object("files");
  for (const auto& [name, entry] : f.at("files").items()) {
    // Plain names of this folder only: state.json must not point a checksum pass anywhere else.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name == "state.json")
      files.fail(name, "is not a file name of a checkpoint folder");
    const StateFields e = files.object(name);
    s.files[name] = {static_cast<uint64_t>(e.integer("bytes", 0, std::numeric_limits<int64_t>::max())), e.crc("crc32c")};
  }
  if (!s.files.count("model.safetensors")) files.fail("model.safetensors", "is missing");
}

std::vector<TrainState::DataFile> read_data(const StateFields& f) {
  std::vector<TrainState::DataFile> data;
  for (const StateFields& d : f.objects("data"))
    data.push_back(
        {d.text("role"),
         d.text("path"),
         {static_cast<uint64_t>(d.integer("bytes", 0, std::numeric_limits<int64_t>::max())), d.crc("crc32c")}});
  return data;
}

// state.json without its own checksum, as the checksum covers it (nlohmann's dump is canonical: sorted
// keys, shortest round-trip numbers, so a parsed file dumps to the same text).
uint32_t own_checksum(json j) {
  j.erase("state_crc32c");
  const std::string text = j.dump();
  return crc32c(0, std::as_bytes(std::span(text.data(), text.size())));
}

// state.json's "origin": only the paths that are known, so a run from scratch writes none.
json origin_json(const TrainState::Origin& o) {
  json j = json::object();
  for (const auto& [key, path] : {std::pair{"init_from", &o.init_from}, {"vocab", &o.vocab}, {"merges", &o.merges}})
    if (!path->empty()) j[key] = path->string();
  if (!o.vocab.empty()) j["lowercase"] = o.lowercase;
  for (const auto& [key, token] : {std::pair{"bos_token", &o.bos_token}, {"eos_token", &o.eos_token}})
    if (*token) j[key] = (*token)->empty() ? json() : json(**token);  // null: the tokenizer has none
  return j;
}

TrainState::Origin read_origin(const StateFields& f) {
  TrainState::Origin o;
  if (!f.has("origin")) return o;
  const StateFields of = f.object("origin");
  o.init_from = of.text("init_from", std::string());
  o.vocab = of.text("vocab", std::string());
  o.merges = of.text("merges", std::string());
  o.lowercase = of.boolean("lowercase", true);
  for (const auto& [key, token] : {std::pair{"bos_token", &o.bos_token}, {"eos_token", &o.eos_token}})
    if (of.has(key)) *token = of.at(key).is_null() ? std::string() : of.text(key);
  return o;
}

// The model as state.json records it: the shape and the numeric choices (Llama's too, for a llama).
json model_json(const models::ModelConfig& m) {
  json j{{"kind", m.kind},
         {"n_layer", m.n_layer},
         {"n_head", m.n_head},
         {"n_embd", m.n_embd},
         {"vocab_size", m.vocab_size},
         {"seq_len", m.seq_len},
         {"intermediate_size", m.mlp_width()},
         {"layer_norm_eps", m.norm_eps()},
         {"activation", m.gelu()},
         {"type_vocab_size", m.type_vocab_size}};
  if (m.kind != "llama") return j;
  const models::RopeScalingConfig& r = m.rope_scaling;
  j.update({{"num_key_value_heads", m.kv_heads()},
            {"rms_norm_eps", m.norm_eps()},
            {"rope_theta", m.rope_theta},
            {"rope_type", r.rope_type},
            {"rope_factor", r.factor},
            {"rope_low_freq_factor", r.low_freq_factor},
            {"rope_high_freq_factor", r.high_freq_factor},
            {"rope_original_max_position_embeddings", r.original_max_position_embeddings},
            {"tie_word_embeddings", m.tie_word_embeddings},
            {"attention_bias", m.attention_bias}});
  return j;
}

json state_json(const TrainState& state) {
  const models::ModelConfig& m = state.model;
  json j{{"step", state.step},
         {"optimizer_steps", state.optimizer_steps},
         {"val_loss_start", state.val_loss_start},
         {"val_loss", state.val_loss},  // NaN is written as null
         {"loss_scale", state.loss_scale},
         {"loss_scale_good_steps", state.loss_scale_good_steps},
         {"config_hash", state.config_hash},
         {"model", model_json(m)},
         {"tokenizer", state.tokenizer},
         {"run_id", state.run_id},
         {"config", json::object()},
         {"files", json::object()}};
  if (state.run_id.empty()) j.erase("run_id");
  if (const json origin = origin_json(state.origin); !origin.empty()) j["origin"] = origin;
  for (const auto& [key, value] : state.config) j["config"][key] = value;
  for (const auto& [name, sum] : state.files) j["files"][name] = {{"bytes", sum.bytes}, {"crc32c", hex32(sum.crc32c)}};
  for (const auto& d : state.data)
    j["data"].push_back(
        {{"role", d.role}, {"path", d.path.string()}, {"bytes", d.sum.bytes}, {"crc32c", hex32(d.sum.crc32c)}});
  if (state.pending) {
    const auto& u = *state.pending;
    j["pending_update"] = {{"adam_step", u.adam_step}, {"lr", u.lr}, {"grad_scale", u.grad_scale}, {"skipped", u.skipped}};
    if (std::isfinite(u.grad_norm)) j["pending_update"]["grad_norm"] = u.grad_norm;
    if (!u.updated_in_step.empty()) j["pending_update"]["updated_in_step"] = u.updated_in_step;
  }
  j["state_crc32c"] = hex32(own_checksum(j));
  return j;
}

// The newest checkpoint folder of a checkpoint dir, or nothing.
std::optional<std::filesystem::path> newest_in(const std::filesystem::path& root) {
  if (const auto manifest = read_run_manifest(root)) {
    for (auto it = manifest->checkpoints.rbegin(); it != manifest->checkpoints.rend(); ++it)
      if (std::filesystem::is_regular_file(root / *it / "state.json")) return root / *it;
    return std::nullopt;
  }
  // A dir of an earlier build: the highest step folder that is a checkpoint (other folders are not ours).
  std::optional<std::pair<int64_t, std::filesystem::path>> best;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    const auto step = step_of_folder_name(e.path().filename().string());
    if (step && e.is_directory() && std::filesystem::is_regular_file(e.path() / "state.json") && (!best || *step > best->first))
      best = {*step, e.path()};
  }
  return best ? std::optional(best->second) : std::nullopt;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path.string() + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Each parameter's tensor `prefix + name` of a checkpoint file into its view.
// The tensors `prefix` + each parameter's name into typed views (the state as the host buckets keep it; pending
// gradients, stored as they landed): read as fp32, then stored in the view's dtype (exact for a tensor written
// in that dtype).
// A view without data goes to `store` (null: the tensor is not read).
void read_tensors(const SafetensorsFile& file, const std::string& prefix, const models::ModelSpec& spec,
                  const std::vector<memory::TensorView>& into, const std::filesystem::path& origin,
                  const std::function<void(int param, std::span<const float> values)>& store) {
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const std::string name = prefix + spec.params[i].name;
    const auto* e = file.find(name);
    const models::ParamSpec& param = spec.params[i];
    if (!e || e->shape != param.file_shape() || into.at(i).numel() != models::numel(param.shape))
      throw std::runtime_error("--resume: '" + origin.string() + "' lacks " + name + " or has another shape");
    if (!into[i].data && !store) continue;
    auto values = file.read_f32(name);
    values.resize(static_cast<size_t>(models::numel(param.shape)), 0.0f);  // a padded vocabulary's rows: zero
    if (!into[i].data) store(static_cast<int>(i), values);
    else memory::narrow(into[i].data, into[i].dtype, values.data(), static_cast<int64_t>(values.size()));
  }
}

// The safetensors entry of one parameter's view: its bytes in place, or (a view without data) filled when
// written: fp32 from `fetch`, or zeros when there is none. Only the real rows of a padded vocabulary are written
// (the file's shape, the view's first elements): checkpoints keep the shape outside the engine.
SafetensorsTensorRef tensor_ref(std::string name, const models::ParamSpec& param, const memory::TensorView& view,
                                std::function<void(std::span<float>)> fetch) {
  SafetensorsTensorRef ref{std::move(name), param.file_shape(), view.data, view.dtype};
  if (view.data) return ref;
  const size_t n = static_cast<size_t>(models::numel(param.shape)),
               real = static_cast<size_t>(models::numel(ref.shape));
  if (fetch && view.dtype != DType::F32)
    throw std::logic_error("write_checkpoint_files: " + ref.name + " lives elsewhere and is not fp32");
  ref.fill = [n, real, bytes = real * static_cast<size_t>(dtype_bytes(view.dtype)),
              fetch = std::move(fetch)](std::byte* out) {
    if (!fetch) return static_cast<void>(std::memset(out, 0, bytes));
    if (n == real) return fetch(std::span<float>(reinterpret_cast<float*>(out), n));
    std::vector<float> all(n);  // the whole parameter, of which the file takes the real rows
    fetch(all);
    std::memcpy(out, all.data(), bytes);
  };
  return ref;
}

template <class Store, class Span>
ParameterViews views(Store& params, Span m, Span v) {
  ParameterViews out;
  const auto view = [](auto span) {
    return memory::TensorView{const_cast<float*>(span.data()), {static_cast<int64_t>(span.size())}, DType::F32};
  };
  for (int i = 0; i < params.count(); ++i) {
    const auto at = static_cast<size_t>(params.value(i).data() - params.values().data()), n = params.value(i).size();
    out.weights.push_back(view(params.value(i))), out.m.push_back(view(m.subspan(at, n))),
        out.v.push_back(view(v.subspan(at, n)));
    out.pending.push_back(view(params.grad(i)));
  }
  return out;
}

}  // namespace

void sync_to_disk(const std::filesystem::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("checkpoint: cannot open '" + p.string() + "' to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("checkpoint: fsync of '" + p.string() + "' failed (disk full?)");
}

TrainState parse_train_state(const std::string& text, const std::string& origin) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error("'" + origin + "' is damaged: it is not a JSON object; use another checkpoint");
  const StateFields f(j, origin, "");
  TrainState s;
  s.step = f.integer("step", 0, kMaxStep);
  s.optimizer_steps = f.integer("optimizer_steps", 0, s.step, 0);  // skipped steps apply no update
  s.val_loss_start = f.number("val_loss_start", 0, 1e6, false, true, 0.0);
  s.val_loss = f.number("val_loss", 0, 1e6, false, true, std::nan(""));
  // fp16's dynamic scale: a power of two, never below 1, and it may grow beyond fp32's range (it overflows).
  s.loss_scale = f.number("loss_scale", 1, std::numeric_limits<double>::max(), false, false, 1.0);
  int exponent = 0;
  if (std::frexp(s.loss_scale, &exponent) != 0.5) f.fail("loss_scale", fmt::format("is {}; expected a power of two >= 1", s.loss_scale));
  s.loss_scale_good_steps = static_cast<int>(f.integer("loss_scale_good_steps", 0, std::numeric_limits<int>::max(), 0));
  s.config_hash = f.text("config_hash");
  s.tokenizer = f.text("tokenizer", std::string("byte"));
  s.run_id = f.text("run_id", std::string());
  s.model = read_model(f);
  s.pending = read_pending(f, s.optimizer_steps);
  s.origin = read_origin(f);
  read_config_and_files(f, s);
  s.data = read_data(f);
  // Checked last, so that a value out of range is named as such. Files of earlier builds have neither.
  if (f.has("state_crc32c") && f.crc("state_crc32c") != own_checksum(j))
    throw std::runtime_error("'" + origin + "' is damaged: state_crc32c " + f.at("state_crc32c").get<std::string>() +
                             " does not match its contents (a changed byte, or edited by hand); use another checkpoint");
  if (!f.has("state_crc32c") && (f.has("files") || f.has("run_id"))) f.fail("state_crc32c", "is missing");
  return s;
}

std::filesystem::path find_checkpoint(const std::filesystem::path& named) {
  if (named.empty()) throw std::runtime_error("no checkpoint named: give a checkpoint folder, a run folder or a train.checkpoint_dir");
  // "runs/gpt-tiny/3/" is "runs/gpt-tiny/3": a resumed run writes beside the checkpoint, in its parent folder.
  const std::filesystem::path path = named.filename().empty() && named.has_relative_path() ? named.parent_path() : named;
  if (std::filesystem::is_regular_file(path / "state.json")) return path;
  if (!std::filesystem::is_directory(path)) throw std::runtime_error("'" + path.string() + "' does not exist or is not a folder");
  if (const auto newest = newest_in(path)) return *newest;
  const bool manifest = std::filesystem::exists(path / kRunManifest);
  if (!manifest)  // an experiment's folder (runs/gpt-tiny): the newest checkpoint of its newest run that holds one
    for (const auto& run : run_folders(path))
      if (const auto newest = newest_in(run)) return *newest;
  throw std::runtime_error("'" + path.string() + "' holds no checkpoint (no step-NNNNNNNN folder with a state.json" +
                           (manifest ? std::string(" that its ferry-run.json lists)") : ", and no run folder 1, 2, ... holding one)"));
}

std::pair<TrainState, std::filesystem::path> read_checkpoint_state(const std::filesystem::path& path) {
  const std::filesystem::path dir = find_checkpoint(path);
  return {parse_train_state(read_text(dir / "state.json"), (dir / "state.json").string()), dir};
}

void check_resumable(const TrainState& s, const std::filesystem::path& dir, const ResumeCheck& expected) {
  if (s.config_hash != expected.config_hash) {
    std::string differences;
    for (const auto& wanted : expected.config) {
      const auto it = std::find_if(s.config.begin(), s.config.end(), [&](const auto& kv) { return kv.first == wanted.first; });
      if (it != s.config.end() && it->second != wanted.second)
        differences += fmt::format("{}{}: the checkpoint has {}, this config {}", differences.empty() ? "" : "; ", wanted.first,
                                   it->second, wanted.second);
    }
    if (differences.empty())  // a checkpoint of an earlier build records only the hash
      differences = fmt::format("config hash {}, this config {}", s.config_hash, expected.config_hash);
    throw std::runtime_error("--resume: '" + dir.string() + "' was written by a run with another model, data, optimizer or step "
                             "settings: " + differences + ". A run resumes only with the settings it was written with "
                             "(the offload policy, budget, logging and evaluation may change)");
  }
  if (s.step > expected.steps)
    throw std::runtime_error(fmt::format("--resume: '{}' is at step {}, beyond train.steps {} of this config; its state.json "
                                         "is damaged", dir.string(), s.step, expected.steps));
}

std::vector<std::string> changed_data(const std::vector<TrainState::DataFile>& recorded,
                                      const std::vector<TrainState::DataFile>& now) {
  std::vector<std::string> changed;
  for (const TrainState::DataFile& was : recorded) {
    const auto is =
        std::find_if(now.begin(), now.end(), [&](const TrainState::DataFile& d) { return d.role == was.role; });
    if (is == now.end() || (is->sum.bytes == was.sum.bytes && is->sum.crc32c == was.sum.crc32c)) continue;
    changed.push_back(fmt::format("{} '{}' has {} bytes, CRC32C {}; the checkpoint's{} had {} bytes, CRC32C {}",
                                  is->role, is->path.string(), is->sum.bytes, hex32(is->sum.crc32c),
                                  is->path == was.path ? "" : " ('" + was.path.string() + "')", was.sum.bytes,
                                  hex32(was.sum.crc32c)));
  }
  return changed;
}

bool verify_checkpoint_file(const std::filesystem::path& dir, const TrainState& state, const std::string& file) {
  if (state.files.empty()) return false;
  const std::filesystem::path path = dir / file;
  const auto it = state.files.find(file);
  if (it == state.files.end())
    throw std::runtime_error("'" + (dir / "state.json").string() + "' records no checksum for " + file +
                             "; the checkpoint is incomplete or damaged: use another checkpoint");
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error("'" + path.string() + "' is missing (" + ec.message() + "); the checkpoint is incomplete: use another checkpoint");
  if (size != it->second.bytes)
    throw std::runtime_error(fmt::format("'{}' is damaged: it has {} bytes, state.json records {} (truncated or replaced); "
                                         "use another checkpoint", path.string(), size, it->second.bytes));
  const FileChecksum sum = checksum_file(path);
  if (sum.crc32c != it->second.crc32c)
    throw std::runtime_error(fmt::format("'{}' is damaged: its CRC32C is {}, state.json records {} (changed bytes, or a file "
                                         "from another checkpoint); use another checkpoint",
                                         path.string(), hex32(sum.crc32c), hex32(it->second.crc32c)));
  return true;
}

models::ParameterStore read_checkpoint_weights(const std::filesystem::path& dir, const TrainState& state,
                                               const models::ModelSpec& spec, bool* verified) {
  const SafetensorsFile file = open_checkpoint_weights(dir, state, spec, verified);  // checked before allocating
  models::ParameterStore params(spec.params);
  load_weights(file, spec, params);
  return params;
}

SafetensorsFile open_checkpoint_weights(const std::filesystem::path& dir, const TrainState& state, const models::ModelSpec& spec,
                                        bool* verified) {
  const std::filesystem::path file = dir / "model.safetensors";
  *verified = verify_checkpoint_file(dir, state, "model.safetensors");
  std::error_code ec;
  const uint64_t bytes = std::filesystem::file_size(file, ec);
  // 2 bytes a parameter at the least (bf16): a smaller file cannot hold this shape's weights.
  if (ec || bytes / 2 < static_cast<uint64_t>(spec.param_count()))
    throw std::runtime_error(fmt::format("'{}' {} for the {}M parameters of the model state.json describes; the checkpoint "
                                         "is damaged", file.string(), ec ? "is missing" : fmt::format("has {} bytes, too few", bytes),
                                         spec.param_count() / 1e6));
  return SafetensorsFile::open(file);
}

StateToWrite views_of(const models::ParameterStore& params, std::span<const float> m, std::span<const float> v) {
  return views(params, m, v);
}
StateToRead views_of(models::ParameterStore& params, std::span<float> m, std::span<float> v) { return views(params, m, v); }

std::map<std::string, FileChecksum> write_checkpoint_files(const std::filesystem::path& dir,
                                                           const models::ModelSpec& spec, const StateToWrite& from,
                                                           TrainState state) {
  const size_t n = spec.params.size();
  if (from.weights.size() != n || from.m.size() != n || from.v.size() != n || (state.pending && from.pending.size() != n))
    throw std::logic_error("write_checkpoint_files: a view per parameter is needed");
  std::vector<SafetensorsTensorRef> weights, moments;
  using Part = ParameterViews::Part;
  const auto fetch = [&from](Part part, size_t i) -> std::function<void(std::span<float>)> {
    if (!from.fetch) return nullptr;
    return [&from, part, i](std::span<float> out) { from.fetch(part, static_cast<int>(i), out); };
  };
  for (size_t i = 0; i < n; ++i) {
    const models::ParamSpec& p = spec.params[i];
    weights.push_back(tensor_ref(p.name, p, from.weights[i], fetch(Part::Weights, i)));
    moments.push_back(tensor_ref("exp_avg." + p.name, p, from.m[i], fetch(Part::M, i)));
    moments.push_back(tensor_ref("exp_avg_sq." + p.name, p, from.v[i], fetch(Part::V, i)));
  }
  std::vector<std::string> files{"model.safetensors", "optimizer.safetensors"};
  write_safetensors(dir / files[0], weights, {{"format", "pt"}});
  write_safetensors(dir / files[1], moments);
  if (state.pending) {
    std::vector<SafetensorsTensorRef> grads;
    for (size_t i = 0; i < n; ++i)
      grads.push_back(tensor_ref("pending_grad." + spec.params[i].name, spec.params[i], from.pending[i], nullptr));
    files.push_back("pending_update.safetensors");
    write_safetensors(dir / files.back(), grads);
  }
  state.files.clear();
  for (const auto& f : files) {
    sync_to_disk(dir / f, false);
    state.files[f] = checksum_file(dir / f);  // what reached the file, read back
  }
  const std::string text = state_json(state).dump(2) + "\n";
  write_file_atomically(dir / "state.json", text, "checkpoint");  // synced, and its folder
  std::map<std::string, FileChecksum> written = state.files;
  written["state.json"] = {text.size(), crc32c(0, std::as_bytes(std::span(text.data(), text.size())))};
  return written;
}

std::filesystem::path save_checkpoint(const std::filesystem::path& root, const models::ModelSpec& spec,
                                      const models::ParameterStore& params, std::span<const float> m,
                                      std::span<const float> v, const TrainState& state, int keep) {
  CheckpointDir dir(root, state.config_hash, std::nullopt, false);
  return dir.save(spec, params, m, v, state, keep);
}

std::pair<TrainState, std::filesystem::path> load_checkpoint(const std::filesystem::path& path, const models::ModelSpec& spec,
                                                             models::ParameterStore& params, std::span<float> m,
                                                             std::span<float> v, const ResumeCheck& expected) {
  auto [s, dir] = read_checkpoint_state(path);
  check_resumable(s, dir, expected);
  read_checkpoint_into(dir, s, spec, views_of(params, m, v));
  return {s, dir};
}

void read_checkpoint_into(const std::filesystem::path& dir, const TrainState& state, const models::ModelSpec& spec,
                          const StateToRead& into) {
  if (!into.weights.empty()) {
    for (const char* f : {"model.safetensors", "optimizer.safetensors"}) verify_checkpoint_file(dir, state, f);
    using Part = ParameterViews::Part;
    const auto store = [&into](Part part) -> std::function<void(int, std::span<const float>)> {
      if (!into.store) return nullptr;
      return [&into, part](int i, std::span<const float> values) { into.store(part, i, values); };
    };
    read_tensors(SafetensorsFile::open(dir / "model.safetensors"), "", spec, into.weights, dir / "model.safetensors",
                 store(Part::Weights));
    const auto optimizer = dir / "optimizer.safetensors";
    const SafetensorsFile opt = SafetensorsFile::open(optimizer);
    read_tensors(opt, "exp_avg.", spec, into.m, optimizer, store(Part::M));
    read_tensors(opt, "exp_avg_sq.", spec, into.v, optimizer, store(Part::V));
  }
  if (state.pending && !into.pending.empty()) {
    const auto pending = dir / "pending_update.safetensors";
    verify_checkpoint_file(dir, state, "pending_update.safetensors");
    read_tensors(SafetensorsFile::open(pending), "pending_grad.", spec, into.pending, pending, nullptr);
  }
}

}  // namespace ferry::formats
