// The export's round trip: the source's untrained tensors passed through byte for byte, tokenizer files
// copied (or written for the run's vocabulary), config.json merged, the folder's other files copied.
#include "formats/hf_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "formats/model_folder.h"
#include "foundation/regular_file.h"
#include "formats/weights.h"

namespace ferry::formats {
namespace {

using nlohmann::json;

// The export's name of a source tensor: under the task model's base prefix, as Ferry's own names are.
std::string export_name(const std::string& name, const std::string& kind) {
  const std::string base = kind == "bert" ? "bert." : kind == "llama" ? "model." : "transformer.";
  const std::string head = kind == "bert" ? "cls." : "lm_head.";
  return name.starts_with(base) || name.starts_with(head) ? name : base + name;
}

// The exported tensor a tied copy repeats (empty: not a tied copy).
std::string tied_to(const std::string& name, const std::string& kind) {
  if (name == "lm_head.weight") return kind == "llama" ? "model.embed_tokens.weight" : "transformer.wte.weight";
  if (name == "cls.predictions.decoder.weight") return "bert.embeddings.word_embeddings.weight";
  if (name == "cls.predictions.decoder.bias") return "cls.predictions.bias";
  return "";
}

json minimal_tokenizer_config(const TokenizerOrigin& o, const models::ModelConfig& m) {
  if (o.kind == "wordpiece")
    return {{"tokenizer_class", "BertTokenizer"}, {"do_lower_case", o.lowercase}, {"model_max_length", m.seq_len},
            {"unk_token", "[UNK]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"}, {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}};
  return {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", m.seq_len}, {"bos_token", "<|endoftext|>"},
          {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}};
}

// tokenizer_config.json for the tokenizer.json an hf run read: the settings of the one beside it (`beside`; null:
// none), naming PreTrainedTokenizerFast, with the run's BOS and EOS where they are recorded.
json hf_tokenizer_config(const TokenizerOrigin& o, const models::ModelConfig& m, const json& beside) {
  json c = beside.is_object() ? beside : json::object();
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  for (const auto& [key, token] : {std::pair{"bos_token", &o.bos_token}, {"eos_token", &o.eos_token}})
    if (*token) c[key] = (*token)->empty() ? json() : json(**token);
  if (!c.contains("model_max_length")) c["model_max_length"] = m.seq_len;
  return c;
}

// The tokenizer_config.json beside the run's tokenizer.json, which the tokenizer read its BOS and EOS from
// (null: none, or one that no longer parses).
json config_beside(const std::filesystem::path& tokenizer_json) {
  const std::filesystem::path file = tokenizer_json.parent_path() / "tokenizer_config.json";
  if (tokenizer_json.empty() || !std::filesystem::is_regular_file(file)) return nullptr;
  const json c = json::parse(read_regular_file(file, "the tokenizer's config"), nullptr, false);
  return c.is_object() ? c : json();
}

// Whether the run tokenised with the source folder's own vocabulary (or with one nothing records).
bool uses_source_vocabulary(const TokenizerOrigin& o) {
  if (o.source_folder.empty()) return false;
  if (o.vocab.empty()) return o.kind != "byte";
  const ModelFolder source(o.source_folder, o.source_key);
  const std::string own = o.vocab.filename().string();
  return source.has(own) && std::filesystem::exists(o.vocab) &&
         source.read(own) == read_regular_file(o.vocab, "the run's data.vocab (state.json's origin.vocab)");
}

namespace fs = std::filesystem;

constexpr const char* kFerrysOwn = "-";  // an entry the export writes itself (or reads as the weights): not mentioned

// Why an entry at the source's top is not carried; "" when it is.
std::string not_carried_at_top(const std::string& name, bool folder) {
  if (folder) return name == "onnx" || name == "openvino" ? "its weights in another format" : "";
  const auto& tokenizer = tokenizer_file_names();
  if (name == "config.json" || std::find(tokenizer.begin(), tokenizer.end(), name) != tokenizer.end()) return kFerrysOwn;
  if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")) return kFerrysOwn;  // model.safetensors holds them
  for (const char* weights : {".bin", ".bin.index.json", ".h5", ".msgpack", ".msgpack.index.json", ".ot", ".onnx", ".pt", ".pth", ".ckpt", ".gguf"})
    if (name.ends_with(weights)) return "its weights in another format";
  return "";
}

// Why an entry of the source is not carried; "" when it is. A module's folder (2_Dense/) is carried whole,
// its own weights included: Ferry does not train them.
std::string not_carried(const fs::directory_entry& e, const std::string& name, const fs::path& skip) {
  std::error_code ec;
  const bool folder = !e.is_symlink() && e.is_directory();
  if (e.path().filename().string().starts_with(".")) return "hidden";
  if (folder && !skip.empty() && fs::equivalent(e.path(), skip, ec)) return kFerrysOwn;
  if (folder && (fs::exists(e.path() / "state.json") || fs::exists(e.path() / "ferry-run.json"))) return "Ferry's checkpoints";
  return name.find('/') == std::string::npos ? not_carried_at_top(name, folder) : "";
}

}  // namespace

HfWeights open_hf_weights(const std::filesystem::path& init_from, const std::string& what) {
  const WeightFiles files = weight_files(init_from, what);
  HfWeights w{files.folder, what, {}};
  for (const std::filesystem::path& file : files.files) w.files.push_back(SafetensorsFile::open(file));
  return w;
}

std::vector<SafetensorsTensorRef> carried_tensors(const HfWeights& source, const models::ModelSpec& spec,
                                                  const std::vector<SafetensorsTensorRef>& exported) {
  std::vector<SafetensorsTensorRef> carried;
  std::set<std::string> names;
  for (const auto& t : exported) names.insert(t.name);
  for (const SafetensorsFile& file : source.files)
    for (const SafetensorsEntry& e : file.entries()) {
      if (!parameter_of(e.name, spec).empty()) continue;  // trained: written from the checkpoint
      const std::string name = export_name(e.name, spec.kind);
      if (!names.insert(name).second) continue;
      if (const std::string tied = tied_to(name, spec.kind); !tied.empty()) {
        const auto it = std::find_if(exported.begin(), exported.end(), [&](const auto& t) { return t.name == tied; });
        if (it == exported.end()) throw std::logic_error("export: " + tied + " is not among the model's tensors");
        SafetensorsTensorRef copy = *it;
        copy.name = name;
        carried.push_back(copy);
        continue;
      }
      carried.push_back({name, e.shape, file.data(e), DType::F32, e.dtype, e.end - e.begin});
    }
  return carried;
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names{"vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                                              "special_tokens_map.json", "added_tokens.json"};
  return names;
}

std::vector<ExportFile> tokenizer_files(const TokenizerOrigin& o, const models::ModelConfig& m, std::string* note) {
  std::vector<ExportFile> files;
  const auto has = [&](const std::string& name) {
    return std::any_of(files.begin(), files.end(), [&](const ExportFile& f) { return f.name == name; });
  };
  if (uses_source_vocabulary(o)) {
    const ModelFolder source(o.source_folder, o.source_key);
    for (const std::string& name : tokenizer_file_names())
      if (source.has(name)) files.push_back({name, source.read(name)});
  } else if (!o.vocab.empty()) {
    const char* vocab_name = o.kind == "hf" || o.vocab.filename() == "tokenizer.json" ? "tokenizer.json"
                             : o.kind == "gpt2"                                       ? "vocab.json"
                                                                                      : "vocab.txt";
    for (const auto& [path, name] : {std::pair{o.vocab, vocab_name}, {o.merges, "merges.txt"}}) {
      if (path.empty()) continue;
      if (!std::filesystem::exists(path)) {
        *note = fmt::format("no tokenizer files: the run's vocabulary '{}' is gone; copy its files into the export", path.string());
        return {};
      }
      files.push_back({name, read_regular_file(path, "the run's vocabulary (state.json's origin)")});
    }
  }
  const bool has_vocab = has("vocab.txt") || has("vocab.json") || has("tokenizer.json");
  if (!has_vocab) {
    *note = o.kind == "byte"
                ? "no tokenizer files: the byte tokenizer has no Hugging Face equivalent"
                : "no tokenizer files: the run's vocabulary is not known (a token shard without a sidecar, and no "
                  "source folder holding one); copy its files into the export";
    return {};
  }
  if (!has("tokenizer_config.json") && o.kind == "hf") {
    files.push_back({"tokenizer_config.json", hf_tokenizer_config(o, m, config_beside(o.vocab)).dump(2) + "\n"});
  } else if (!has("tokenizer_config.json")) {
    TokenizerOrigin kind = o;
    if (kind.kind != "wordpiece" && kind.kind != "gpt2") kind.kind = has("vocab.txt") ? "wordpiece" : "gpt2";
    files.push_back({"tokenizer_config.json", minimal_tokenizer_config(kind, m).dump(2) + "\n"});
  }
  return files;
}

void set_special_token_ids(const TokenizerOrigin& o, const std::vector<ExportFile>& files, json& config,
                           std::vector<ExportFile>& carried) {
  const auto file =
      std::find_if(files.begin(), files.end(), [](const ExportFile& f) { return f.name == "tokenizer.json"; });
  if (o.kind != "hf" || file == files.end() || uses_source_vocabulary(o)) return;
  const json tokenizer = json::parse(file->bytes, nullptr, false);
  if (!tokenizer.is_object()) return;
  const auto id_of = [&](const std::string& token) -> json {
    for (const json& t : tokenizer.value("added_tokens", json::array()))
      if (t.value("content", "") == token && t.contains("id")) return t["id"];
    const json vocab = tokenizer.value("model", json::object()).value("vocab", json::object());
    return vocab.is_object() && vocab.contains(token) ? vocab[token] : json();
  };
  for (const auto& [key, token] : {std::pair{"bos_token_id", &o.bos_token}, {"eos_token_id", &o.eos_token}})
    if (*token) config[key] = (*token)->empty() ? json() : id_of(**token);
  for (ExportFile& f : carried) {
    json generation = f.name == "generation_config.json" ? json::parse(f.bytes, nullptr, false) : json();
    if (!generation.is_object()) continue;
    for (const char* key : {"bos_token_id", "eos_token_id"})
      if (config.contains(key)) generation[key] = config[key];
    f.bytes = generation.dump(2) + "\n";
  }
}

std::vector<ExportFile> carried_files(const fs::path& folder, const fs::path& skip, std::vector<std::string>* left_out) {
  const ModelFolder source(folder, "export");
  const fs::path root = fs::canonical(folder);
  std::vector<ExportFile> files;
  const auto leave = [&](const std::string& name, const std::string& why) { left_out->push_back(name + " (" + why + ")"); };
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const fs::directory_entry& e = *it;
    const std::string name = e.path().lexically_relative(root).generic_string();
    const bool link = e.is_symlink(), folder_entry = !link && e.is_directory();
    if (const std::string why = not_carried(e, name, skip); !why.empty()) {
      if (folder_entry) it.disable_recursion_pending();
      if (why != kFerrysOwn) leave(name + (folder_entry ? "/" : ""), why);
      continue;
    }
    if (folder_entry) continue;
    std::error_code ec;
    const fs::path target = link ? fs::canonical(e.path(), ec) : e.path();
    if (link && (ec || !fs::is_regular_file(target))) {
      leave(name, "a link to no regular file");
    } else if (link && !source.holds(target)) {
      leave(name, "a link out of the folder");
    } else if (!fs::is_regular_file(target)) {
      leave(name, "not a regular file");
    } else {
      files.push_back({name, read_regular_file(target, "export")});
    }
  }
  std::sort(files.begin(), files.end(), [](const ExportFile& a, const ExportFile& b) { return a.name < b.name; });
  std::sort(left_out->begin(), left_out->end());
  return files;
}

nlohmann::json round_trip_config(const nlohmann::json& source, const nlohmann::json& ferry) {
  json defaults = ferry;
  for (const char* key : {"hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (defaults.contains(key)) defaults[key] = 0.1;  // Hugging Face's defaults in BertConfig and GPT2Config
  if (!source.is_object()) return defaults;
  // Settings of training and generation, which the shape does not decide: the source knows them.
  static const std::set<std::string> source_keeps{"hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop",
                                                  "attn_pdrop", "pad_token_id", "bos_token_id", "eos_token_id"};
  json out = source;
  for (const auto& [key, value] : defaults.items())
    if (!source_keeps.contains(key) || !source.contains(key)) out[key] = value;
  if (out.contains("dtype") && defaults.contains("torch_dtype")) out["dtype"] = defaults["torch_dtype"];  // transformers 5's name
  return out;
}

}  // namespace ferry::formats
