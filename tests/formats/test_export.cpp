// `ferry export` round trips: a checkpoint of a run that started from a Hugging Face folder exports every
// tensor of the source bit for bit at step zero (the pooler and the next-sentence head included), the
// source's config.json settings (dropout), its tokenizer files and its other files (sentence-transformers');
// the weights a run starts from export without a step; a folder holding files is written only when asked,
// and nothing in it is deleted; a fine-tuned Llama's export gives transformers' logits. The folders come from
// tests/data/make_hf_roundtrip_reference.py, make_sentence_transformer_fixture.py and
// make_llama_finetune_reference.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dataset/tokenizer.h"
#include "engine/ops/cpu_runner.h"
#include "formats/checkpoint.h"
#include "formats/export.h"
#include "formats/hf_config.h"
#include "formats/hf_source.h"
#include "formats/weights.h"
#include "golden_helpers.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

using testing::error_of;

const models::ModelConfig kTinyBert{"bert", 2, 2, 16, 54, 32, {}, {}};

struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& name) : dir(testing::scratch_path(name)) { std::filesystem::remove_all(dir); }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

// A step-zero checkpoint of a run that started from `source` (init_missing: [head] where it has none).
std::filesystem::path checkpoint_from(const std::filesystem::path& source, const std::filesystem::path& root,
                                      const std::string& tokenizer = "wordpiece",
                                      const std::filesystem::path& vocab = {},
                                      const models::ModelConfig& model = kTinyBert, std::optional<std::string> bos = {},
                                      std::optional<std::string> eos = {}) {
  const models::ModelSpec spec = models::build_model(model, 1, 4);
  models::ParameterStore params{spec.params};
  models::init_model(model, spec, params, 1);
  load_weights(source, spec, params, {{"head"}});
  std::vector<float> m(params.values().size(), 0.f), v(params.values().size(), 0.f);
  TrainState state;
  state.config_hash = "0123456789abcdef";
  state.model = model;
  state.model.init_from = source;
  state.tokenizer = tokenizer;
  state.origin.init_from = source;
  state.origin.vocab = vocab;
  state.origin.bos_token = bos, state.origin.eos_token = eos;
  return save_checkpoint(root, spec, params, m, v, state, 1);
}

nlohmann::json json_of(const std::filesystem::path& path) { return nlohmann::json::parse(testing::file_text(path)); }

// Every tensor of the source is in the export, under `prefix` + its name when it has none, with the same
// dtype, shape and bytes.
void expect_every_source_tensor_bitwise(const std::filesystem::path& source, const std::filesystem::path& exported,
                                        const std::string& prefix) {
  const SafetensorsFile in = SafetensorsFile::open(source / "model.safetensors");
  const SafetensorsFile out = SafetensorsFile::open(exported / "model.safetensors");
  ASSERT_GT(in.entries().size(), 30u);
  for (const SafetensorsEntry& e : in.entries()) {
    const std::string name = e.name.starts_with("bert.") || e.name.starts_with("cls.") ? e.name : prefix + e.name;
    const SafetensorsEntry* o = out.find(name);
    ASSERT_NE(o, nullptr) << name << " is missing from the export";
    EXPECT_EQ(o->dtype, e.dtype) << name;
    EXPECT_EQ(o->shape, e.shape) << name;
    ASSERT_EQ(o->end - o->begin, e.end - e.begin) << name;
    EXPECT_EQ(std::memcmp(out.data(*o), in.data(e), e.end - e.begin), 0) << name << " differs";
  }
}

TEST(Export, ABertForPreTrainingSourceRoundTripsBitwiseWithItsSettingsAndTokenizer) {
  const auto source = testing::data_path("hf_roundtrip/bert_pretraining");
  Scratch s("export_pretraining");
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "wordpiece", source / "vocab.txt");
  const ExportReport e = export_checkpoint(ckpt, s.dir / "out");
  EXPECT_EQ(e.source, source);
  expect_every_source_tensor_bitwise(source, s.dir / "out", "bert.");
  EXPECT_NE(std::find(e.carried.begin(), e.carried.end(), "bert.pooler.dense.weight"), e.carried.end());
  EXPECT_NE(std::find(e.carried.begin(), e.carried.end(), "cls.seq_relationship.weight"), e.carried.end());

  const auto config = json_of(s.dir / "out" / "config.json");
  EXPECT_EQ(config["hidden_dropout_prob"], 0.13);  // the source's, not Ferry's 0.0 nor the default 0.1
  EXPECT_EQ(config["attention_probs_dropout_prob"], 0.07);
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"BertForMaskedLM"}));
  EXPECT_EQ(config["vocab_size"], 54);
  EXPECT_EQ(config["initializer_range"], json_of(source / "config.json")["initializer_range"]);  // a key Ferry does not write
  EXPECT_EQ(config["dtype"], "float32");
  for (const char* file : {"vocab.txt", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(testing::file_text(s.dir / "out" / file), testing::file_text(source / file)) << file;
}

TEST(Export, ABertModelSourceGetsItsPrefixAndATokenizerConfigWritten) {
  const auto source = testing::data_path("hf_roundtrip/bert_model");
  Scratch s("export_base_model");
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "wordpiece", source / "vocab.txt");
  const ExportReport e = export_checkpoint(ckpt, s.dir / "out");
  expect_every_source_tensor_bitwise(source, s.dir / "out", "bert.");
  const SafetensorsFile out = SafetensorsFile::open(s.dir / "out" / "model.safetensors");
  EXPECT_NE(out.find("cls.predictions.bias"), nullptr);  // the head it started (init_missing)
  EXPECT_EQ(out.find("pooler.dense.weight"), nullptr);   // not twice
  EXPECT_EQ(testing::file_text(s.dir / "out" / "vocab.txt"), testing::file_text(source / "vocab.txt"));
  const auto tc = json_of(s.dir / "out" / "tokenizer_config.json");
  EXPECT_EQ(tc["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(tc["do_lower_case"], true);
  EXPECT_EQ(tc["mask_token"], "[MASK]");
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out" / "tokenizer.json"));
  EXPECT_EQ(json_of(s.dir / "out" / "config.json")["hidden_dropout_prob"], 0.13);
}

TEST(Export, WithoutASourceDropoutIsHuggingFacesDefaultAndAnEarlierTokenizerIsKeptAndNoted) {
  const auto source = testing::data_path("hf_roundtrip/bert_pretraining");
  Scratch s("export_no_source");
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "byte");
  export_checkpoint(ckpt, s.dir / "out");  // with the source's tokenizer files? no: the run's tokens were bytes
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out" / "tokenizer.json"));
  const auto with_wp = checkpoint_from(source, s.dir / "ckpt2", "wordpiece", source / "vocab.txt");
  export_checkpoint(with_wp, s.dir / "out", {std::nullopt, true});
  ASSERT_TRUE(std::filesystem::exists(s.dir / "out" / "tokenizer.json"));

  const ExportReport e = export_checkpoint(ckpt, s.dir / "out", {std::filesystem::path(), true});
  EXPECT_TRUE(e.source.empty());
  EXPECT_TRUE(e.carried.empty());
  EXPECT_NE(e.note.find("the byte tokenizer has no Hugging Face equivalent"), std::string::npos) << e.note;
  // Nothing it did not write is deleted: the earlier export's tokenizer stays, and the report says it would be read.
  EXPECT_EQ(testing::file_text(s.dir / "out" / "tokenizer.json"), testing::file_text(source / "tokenizer.json"));
  EXPECT_NE(e.note.find("kept tokenizer.json, which this export does not write: AutoTokenizer reads it"), std::string::npos) << e.note;
  EXPECT_NE(std::find(e.kept.begin(), e.kept.end(), "vocab.txt"), e.kept.end());
  const auto config = json_of(s.dir / "out" / "config.json");
  EXPECT_EQ(config["hidden_dropout_prob"], 0.1);
  EXPECT_EQ(config["attention_probs_dropout_prob"], 0.1);
  EXPECT_EQ(SafetensorsFile::open(s.dir / "out" / "model.safetensors").find("bert.pooler.dense.weight"), nullptr);
}

TEST(Export, TheRunsOwnVocabularyReplacesTheSourcesTokenizer) {
  const auto source = testing::data_path("hf_roundtrip/bert_pretraining");
  Scratch s("export_own_vocab");
  std::filesystem::create_directories(s.dir);
  const auto vocab = s.dir / "my_vocab.txt";
  std::ofstream(vocab) << testing::file_text(source / "vocab.txt") << "extra\n";
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "wordpiece", vocab);
  export_checkpoint(ckpt, s.dir / "out");
  EXPECT_EQ(testing::file_text(s.dir / "out" / "vocab.txt"), testing::file_text(vocab));
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out" / "tokenizer.json")) << "the source's tokenizer.json encodes another vocabulary";
  EXPECT_EQ(json_of(s.dir / "out" / "tokenizer_config.json")["tokenizer_class"], "BertTokenizer");
}

TEST(Export, ASourceThatIsGoneIsAnErrorThatSaysWhatToDo) {
  const auto source = testing::data_path("hf_roundtrip/bert_model");
  Scratch s("export_gone");
  std::filesystem::create_directories(s.dir);
  std::filesystem::copy(source, s.dir / "src");
  const auto ckpt = checkpoint_from(s.dir / "src", s.dir / "ckpt");
  std::filesystem::remove_all(s.dir / "src");
  const std::string e = error_of([&] { export_checkpoint(ckpt, s.dir / "out"); });
  EXPECT_NE(e.find("which is gone"), std::string::npos) << e;
  EXPECT_NE(e.find("--source"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out"));
  EXPECT_EQ(export_checkpoint(ckpt, s.dir / "out", {source}).source, source);
}

// --source is named as --source: a run that never used model.init_from is not told about it, whether the
// folder is gone or holds something other than files, nor when its vocabulary is unknown.
TEST(Export, ASourceGivenWithSourceIsNamedAsSuch) {
  Scratch s("export_source_named");
  const models::ModelSpec spec = models::build_model(kTinyBert, 1, 4);
  models::ParameterStore params{spec.params};
  models::init_model(kTinyBert, spec, params, 1);
  std::vector<float> m(params.values().size(), 0.f), v(params.values().size(), 0.f);
  TrainState state;
  state.config_hash = "0123456789abcdef";
  state.model = kTinyBert;
  state.tokenizer = "wordpiece";  // with no vocabulary recorded: a token shard without a sidecar
  const auto ckpt = save_checkpoint(s.dir / "ckpt", spec, params, m, v, state, 1);
  const std::string gone = error_of([&] { export_checkpoint(ckpt, s.dir / "out", {s.dir / "nowhere"}); });
  EXPECT_NE(gone.find("export: --source '" + (s.dir / "nowhere").string() +
                      "' does not exist; name the Hugging Face model folder"),
            std::string::npos)
      << gone;
  EXPECT_EQ(gone.find("model.init_from"), std::string::npos) << gone;
  std::filesystem::create_directories(s.dir / "src" / "model.safetensors");
  const std::string folder = error_of([&] { export_checkpoint(ckpt, s.dir / "out", {s.dir / "src"}); });
  EXPECT_NE(
      folder.find("--source: '" + (s.dir / "src" / "model.safetensors").string() + "' is a directory, not a file"),
      std::string::npos)
      << folder;
  EXPECT_EQ(folder.find("model.init_from"), std::string::npos) << folder;
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out"));
  const std::string note = export_checkpoint(ckpt, s.dir / "out", {std::filesystem::path()}).note;
  EXPECT_NE(note.find("no tokenizer files: the run's vocabulary is not known"), std::string::npos) << note;
  EXPECT_EQ(note.find("model.init_from"), std::string::npos) << note;
}

TEST(Export, StateJsonRecordsTheOriginAndTheTokenizer) {
  const auto source = testing::data_path("hf_roundtrip/bert_model");
  Scratch s("export_state");
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "wordpiece", source / "vocab.txt");
  const TrainState state = read_checkpoint_state(ckpt).first;
  EXPECT_EQ(state.tokenizer, "wordpiece");
  EXPECT_EQ(state.origin.init_from, source);
  EXPECT_EQ(state.origin.vocab, source / "vocab.txt");
  EXPECT_TRUE(state.origin.lowercase);
}

namespace fs = std::filesystem;

// sentence-transformers' files beside the encoder in tests/data/hf_sentence_transformer, copied as they are.
const std::vector<std::string> kSentenceTransformerFiles{"1_Pooling/config.json", "README.md", "config_sentence_transformers.json",
                                                         "modules.json", "sentence_bert_config.json"};

// Parameter i's values outside the engine: without a padded vocabulary's rows (models/vocab.h).
std::vector<float> real_values(const models::ModelSpec& spec, const models::ParameterStore& params, int i) {
  const auto v = params.value(i);
  return {v.begin(), v.begin() + models::numel(spec.params[i].file_shape())};
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// The model section of a run from `init_from` that states only the kind: config.json gives the shape.
models::ModelConfig model_of(const fs::path& init_from) {
  models::ModelConfig m;
  m.kind = "bert", m.init_from = init_from, m.init_missing = {"head"};
  apply_hf_config(m, {"kind", "init_from", "init_missing"});
  return m;
}

// What a run from `init_from` starts from, tokenising with its vocab.txt.
StartingPoint starting_from(const fs::path& init_from, const std::string& tokenizer = "wordpiece") {
  StartingPoint start{model_of(init_from), 7, tokenizer, {}};
  start.origin.init_from = init_from;
  if (tokenizer == "wordpiece") start.origin.vocab = init_from / "vocab.txt";
  return start;
}

void expect_files_copied(const fs::path& from, const fs::path& to, const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    EXPECT_FALSE(fs::is_symlink(to / f)) << f;
    EXPECT_EQ(testing::file_text(to / f), testing::file_text(from / f)) << f;
  }
}

TEST(Export, TheWeightsARunStartsFromExportWithoutAStepBitwiseWithTheSourcesFiles) {
  const auto source = testing::data_path("hf_sentence_transformer");
  Scratch s("export_start_hf");
  const StartingPoint start = starting_from(source);
  const ExportReport e = export_starting_point(start, s.dir / "out");
  EXPECT_TRUE(e.folder.empty());
  EXPECT_EQ(e.source, source);
  expect_every_source_tensor_bitwise(source, s.dir / "out", "bert.");
  // The masked-LM head the BertModel lacks (model.init_missing) is the seed's initialisation, as training starts it.
  EXPECT_EQ(e.initialised.size(), 5u);
  const models::ModelSpec spec = models::build_model(start.model, 1, 1);
  models::ParameterStore initial{spec.params};
  models::init_model(start.model, spec, initial, start.seed);
  const SafetensorsFile out = SafetensorsFile::open(s.dir / "out" / "model.safetensors");
  for (int i = 0; i < initial.count(); ++i)
    if (spec.params[i].name.starts_with("cls.")) {
      const std::vector<float> got = out.read_f32(spec.params[i].name);
      testing::expect_bitwise(got, real_values(spec, initial, i), spec.params[i].name.c_str());
    }
  EXPECT_EQ(e.carried_files, kSentenceTransformerFiles);
  expect_files_copied(source, s.dir / "out", kSentenceTransformerFiles);
  expect_files_copied(source, s.dir / "out", {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"});
  EXPECT_TRUE(e.left_out.empty()) << e.left_out.front();
  for (const std::string& f : e.files) EXPECT_TRUE(fs::is_regular_file(s.dir / "out" / f)) << f;
  EXPECT_EQ(json_of(s.dir / "out" / "config.json")["hidden_size"], 32);
}

// A Llama from a Hugging Face folder (tests/data/make_llama_reference.py) exports as LlamaForCausalLM: config.json
// and generation_config.json that read back as the same model, its tensors bitwise; past max_shard_bytes the
// weights are shards with their index (save_pretrained's names), which load as one model.
TEST(Export, ALlamaExportsItsConfigAndShardsPastTheLimit) {
  Scratch s("export_llama");
  const auto source = testing::data_path("hf_llama_tiny");
  StartingPoint start{{}, 3, "byte", {}};
  start.model.init_from = source;
  apply_hf_config(start.model, {"init_from"});
  ExportOptions options;
  options.max_shard_bytes = 30'000;  // the model is 75 kB in fp32
  const ExportReport e = export_starting_point(start, s.dir / "out", options);
  const std::vector<std::string> weights{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors", "model.safetensors.index.json"};
  for (const std::string& f : weights) EXPECT_NE(std::find(e.files.begin(), e.files.end(), f), e.files.end()) << f;
  EXPECT_FALSE(fs::exists(s.dir / "out" / "model.safetensors"));
  for (int i = 1; i <= 3; ++i)
    EXPECT_LE(fs::file_size(s.dir / "out" / weights[static_cast<size_t>(i - 1)]), 30'000u + 4096u)
        << i;  // + its header

  const nlohmann::json config = json_of(s.dir / "out" / "config.json");
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(json_of(s.dir / "out" / "generation_config.json")["eos_token_id"], 2);  // the source's, kept in config.json
  models::ModelConfig back;
  back.init_from = s.dir / "out";
  apply_hf_config(back, {"init_from"});
  EXPECT_EQ(models::choices_of(back), models::choices_of(start.model));
  EXPECT_EQ(back.n_layer, start.model.n_layer);

  // The shards, read through their index, hold the source's tensors bit for bit.
  const models::ModelSpec spec = models::build_model(start.model, 1, 1);
  models::ParameterStore exported{spec.params}, original{spec.params};
  load_weights(s.dir / "out", spec, exported);
  load_weights(source, spec, original);
  for (int i = 0; i < original.count(); ++i)
    testing::expect_bitwise(std::vector<float>(exported.value(i).begin(), exported.value(i).end()),
                            std::vector<float>(original.value(i).begin(), original.value(i).end()),
                            spec.params[i].name.c_str());
}

// A Qwen2 (a tied head, q/k/v biases) exports as Qwen2ForCausalLM and reads back as the same model; a source
// that also stores its tied lm_head.weight (some checkpoints do) gets it back as a copy of the embedding.
TEST(Export, ATiedQwen2ExportsAsItselfWithItsHeadTheEmbedding) {
  Scratch s("export_qwen2");
  const fs::path original = testing::data_path("hf_qwen2_tiny"), source = s.dir / "source";
  fs::create_directories(source);
  for (const char* file : {"config.json", "generation_config.json"}) fs::copy_file(original / file, source / file);
  const SafetensorsFile in = SafetensorsFile::open(original / "model.safetensors");
  std::vector<SafetensorsTensorRef> tensors;
  for (const SafetensorsEntry& e : in.entries())
    tensors.push_back({e.name, e.shape, in.data(e), DType::F32, e.dtype, e.end - e.begin});
  const SafetensorsEntry* embed = in.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  tensors.push_back(
      {"lm_head.weight", embed->shape, in.data(*embed), DType::F32, embed->dtype, embed->end - embed->begin});
  write_safetensors(source / "model.safetensors", tensors);

  StartingPoint start{{}, 3, "byte", {}};
  start.model.init_from = source;
  apply_hf_config(start.model, {"init_from"});
  ASSERT_TRUE(start.model.tie_word_embeddings && start.model.attention_bias);
  export_starting_point(start, s.dir / "out", {});
  const nlohmann::json config = json_of(s.dir / "out" / "config.json");
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(config["tie_word_embeddings"], true);
  models::ModelConfig back;
  back.init_from = s.dir / "out";
  apply_hf_config(back, {"init_from"});
  EXPECT_EQ(models::choices_of(back), models::choices_of(start.model));

  const SafetensorsFile out = SafetensorsFile::open(s.dir / "out" / "model.safetensors");
  const SafetensorsEntry *head = out.find("lm_head.weight"), *table = out.find("model.embed_tokens.weight");
  ASSERT_TRUE(head && table);
  ASSERT_EQ(head->end - head->begin, table->end - table->begin);
  EXPECT_EQ(std::memcmp(out.data(*head), out.data(*table), table->end - table->begin), 0);
}

// A run with data.tokenizer: hf (its tokenizer.json under another name) exports tokenizer.json as it is, and a
// tokenizer_config.json naming PreTrainedTokenizerFast (what transformers runs as the file says) with the BOS
// and EOS the run's tokenizer used, as state.json records them (null: none), over the settings of the
// tokenizer_config.json beside the run's file.
TEST(Export, AnHfRunsTokenizerJsonIsExportedWithAFastTokenizerConfigOfItsBosAndEos) {
  Scratch s("export_hf_tokenizer");
  const auto source = testing::data_path("hf_llama_tiny");  // a model folder without tokenizer files
  models::ModelConfig llama;
  llama.init_from = source;
  apply_hf_config(llama, {"init_from"});
  for (const std::string kind : {"llama3", "qwen2"}) {
    const fs::path run = s.dir / kind, vocab = run / "tokenizer" / (kind + ".json");
    fs::create_directories(vocab.parent_path());
    fs::copy_file(testing::data_path("hf_tokenizers/" + kind + "/tokenizer.json"), vocab);
    if (kind == "llama3")  // a class transformers would rebuild its own pipeline for, and a setting to keep
      write_text(
          vocab.parent_path() / "tokenizer_config.json",
          R"({"tokenizer_class": "LlamaTokenizer", "chat_template": "{{ messages }}", "eos_token": "<|eot_id|>"})");
    const std::optional<std::string> bos = kind == "llama3" ? "<|begin_of_text|>" : "";
    const std::string eos = kind == "llama3" ? "<|end_of_text|>" : "<|endoftext|>";
    const auto ckpt = checkpoint_from(source, run / "ckpt", "hf", vocab, llama, bos, eos);
    const TrainState state = read_checkpoint_state(ckpt).first;
    EXPECT_EQ(state.origin.bos_token, bos) << kind;
    EXPECT_EQ(state.origin.eos_token, eos) << kind;

    const ExportReport e = export_checkpoint(ckpt, run / "out");
    EXPECT_EQ(e.note, "") << kind;
    for (const std::string& absent : std::vector<std::string>{"vocab.txt", "vocab.json", "merges.txt", kind + ".json"})
      EXPECT_FALSE(fs::exists(run / "out" / absent)) << kind << ": " << absent;
    EXPECT_TRUE(testing::file_text(run / "out" / "tokenizer.json") == testing::file_text(vocab))
        << kind << ": tokenizer.json is not the run's file";
    const nlohmann::json config = json_of(run / "out" / "tokenizer_config.json");
    EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast") << kind;
    EXPECT_EQ(config["bos_token"], kind == "llama3" ? nlohmann::json("<|begin_of_text|>") : nlohmann::json()) << kind;
    EXPECT_EQ(config["eos_token"], eos) << kind << ": the run's, not the file's";
    EXPECT_EQ(config["model_max_length"], llama.seq_len) << kind;
    EXPECT_EQ(config.contains("chat_template"), kind == "llama3") << kind;
    // The model's token ids are those of the run's tokenizer, not the source's (1 and 2), in config.json and
    // the generation_config.json carried from the source.
    const auto tokenizer = dataset::load_hf_tokenizer(vocab);
    const nlohmann::json bos_id = kind == "llama3" ? nlohmann::json(tokenizer->id_of(*bos)) : nlohmann::json();
    for (const char* file : {"config.json", "generation_config.json"}) {
      const nlohmann::json model = json_of(run / "out" / file);
      EXPECT_EQ(model["bos_token_id"], bos_id) << kind << ": " << file;
      EXPECT_EQ(model["eos_token_id"], tokenizer->id_of(eos)) << kind << ": " << file;
    }
  }
  // A checkpoint of an earlier build records no BOS or EOS: the config beside the file gives them.
  const fs::path vocab = s.dir / "llama3" / "tokenizer" / "llama3.json";
  const auto earlier = checkpoint_from(source, s.dir / "earlier", "hf", vocab, llama);
  EXPECT_FALSE(read_checkpoint_state(earlier).first.origin.bos_token);
  export_checkpoint(earlier, s.dir / "earlier_out");
  const nlohmann::json config = json_of(s.dir / "earlier_out" / "tokenizer_config.json");
  EXPECT_EQ(config["eos_token"], "<|eot_id|>");
  EXPECT_FALSE(config.contains("bos_token"));
}

// issue 34's goal: a Llama fine-tuned by `ferry train` (30 steps from a random LlamaForCausalLM with grouped-query
// attention and its own head) and written by `ferry export` gives, read back as model.init_from reads a folder,
// the logits transformers computes from the same folder (tests/data/make_llama_finetune_reference.py).
TEST(Export, AFineTunedLlamaExportGivesTransformersLogits) {
  const formats::SafetensorsFile ref =
      SafetensorsFile::open(testing::data_path("llama_finetuned_reference.safetensors"));
  models::ModelConfig m;
  m.init_from = testing::data_path("hf_llama_finetuned");
  apply_hf_config(m, {});
  EXPECT_EQ(m.kind, "llama");
  EXPECT_EQ(m.kv_heads(), 1);
  EXPECT_FALSE(m.tie_word_embeddings);
  const std::vector<int64_t> shape = ref.find("input_ids")->shape;
  const models::ModelSpec spec = models::build_model(m, shape[0], shape[1]);
  models::ParameterStore params{spec.params};
  load_weights(m.init_from, spec, params);
  ops::CpuRunner runner(spec, params);
  runner.set_batch(ref.read_i32("input_ids"), ref.read_i32("targets"));
  const float loss = runner.forward();
  EXPECT_LT(testing::max_rel_error(testing::real_logits(runner, spec, "lm_head.out"), ref.read_f32("logits"), 1e-2),
            1e-4);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 1e-4 * ref.read_f32("loss")[0]);
}

TEST(Export, AStartingPointKeepsTheSourcesDtype) {
  Scratch s("export_start_bf16");
  const auto variant = testing::data_path("hf_bert_variant");
  fs::create_directories(s.dir / "bf16");
  fs::copy_file(variant / "config.json", s.dir / "bf16" / "config.json");
  // The fp32 weights cut to bf16 (the upper half of each float), the other tensors as they are.
  const SafetensorsFile f32 = SafetensorsFile::open(variant / "model.safetensors");
  std::vector<std::vector<uint16_t>> halves;
  std::vector<SafetensorsTensorRef> refs;
  for (const SafetensorsEntry& e : f32.entries()) {
    if (e.dtype != "F32") {
      refs.push_back({e.name, e.shape, f32.data(e), DType::F32, e.dtype, e.end - e.begin});
      continue;
    }
    const std::vector<float> values = f32.read_f32(e.name);
    auto& half = halves.emplace_back(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      half[i] = static_cast<uint16_t>(bits >> 16);
    }
    refs.push_back({e.name, e.shape, half.data(), DType::BF16});
  }
  write_safetensors(s.dir / "bf16" / "model.safetensors", refs);
  export_starting_point(starting_from(s.dir / "bf16", "byte"), s.dir / "out");
  expect_every_source_tensor_bitwise(s.dir / "bf16", s.dir / "out", "bert.");  // BF16 in, BF16 out
}

TEST(Export, WithoutInitFromAStartingPointIsTheSeedsInitialisation) {
  Scratch s("export_start_seed");
  const models::ModelSpec spec = models::build_model(kTinyBert, 1, 1);
  models::ParameterStore initial{spec.params};
  models::init_model(kTinyBert, spec, initial, 42);
  const ExportReport e = export_starting_point({kTinyBert, 42, "byte", {}}, s.dir / "out");
  EXPECT_TRUE(e.source.empty());
  const SafetensorsFile out = SafetensorsFile::open(s.dir / "out" / "model.safetensors");
  for (int i = 0; i < initial.count(); ++i)
    testing::expect_bitwise(out.read_f32(spec.params[i].name), real_values(spec, initial, i),
                            spec.params[i].name.c_str());
  export_starting_point({kTinyBert, 43, "byte", {}}, s.dir / "other");
  EXPECT_NE(testing::file_text(s.dir / "other" / "model.safetensors"), testing::file_text(s.dir / "out" / "model.safetensors"));
}

// The vocabulary padded inside the engine (models/vocab.h) leaves it at its real size: a GPT-2 of 300 tokens (384
// rows inside) checkpoints and exports wte as (300, C) with config.json's vocab_size 300, and both load back with
// the padded rows zero, whatever the store held there.
TEST(Export, APaddedVocabularyLeavesTheEngineAtItsRealSizeAndComesBackZeroPadded) {
  Scratch s("export_padded_vocab");
  const models::ModelConfig gpt{"gpt2", 1, 2, 16, 300, 8, {}, {}};
  const models::ModelSpec spec = models::build_model(gpt, 1, 4);
  const int wte = spec.param_index("transformer.wte.weight");
  ASSERT_EQ(spec.params[wte].shape, (models::Shape{384, 16}));
  models::ParameterStore params{spec.params};
  models::init_model(gpt, spec, params, 3);
  const auto padding = params.value(wte).subspan(300 * 16);
  EXPECT_TRUE(std::all_of(padding.begin(), padding.end(), [](float x) { return x == 0.0f; }));
  std::vector<float> m(params.values().size(), 0.f), v(params.values().size(), 0.f);
  TrainState state;
  state.config_hash = "0123456789abcdef";
  state.model = gpt;
  const fs::path ckpt = save_checkpoint(s.dir / "ckpt", spec, params, m, v, state, 1);
  const SafetensorsFile written = SafetensorsFile::open(ckpt / "model.safetensors");
  EXPECT_EQ(written.find("transformer.wte.weight")->shape, (models::Shape{300, 16}));
  EXPECT_EQ(SafetensorsFile::open(ckpt / "optimizer.safetensors").find("exp_avg.transformer.wte.weight")->shape,
            (models::Shape{300, 16}));

  export_checkpoint(ckpt, s.dir / "hf");
  EXPECT_EQ(json_of(s.dir / "hf" / "config.json")["vocab_size"], 300);
  const SafetensorsFile out = SafetensorsFile::open(s.dir / "hf" / "model.safetensors");
  EXPECT_EQ(out.find("transformer.wte.weight")->shape, (models::Shape{300, 16}));
  testing::expect_bitwise(out.read_f32("transformer.wte.weight"), real_values(spec, params, wte), "exported wte");

  const std::vector<float> want(params.value(wte).begin(), params.value(wte).end());
  models::ParameterStore from_export{spec.params};
  std::fill(from_export.values().begin(), from_export.values().end(), 7.0f);
  load_weights(s.dir / "hf", spec, from_export);  // model.init_from
  testing::expect_bitwise(std::vector<float>(from_export.value(wte).begin(), from_export.value(wte).end()), want,
                          "init_from");
  const auto [read_state, dir] = read_checkpoint_state(ckpt);
  bool verified = false;
  const models::ParameterStore resumed = read_checkpoint_weights(dir, read_state, spec, &verified);
  testing::expect_bitwise(std::vector<float>(resumed.value(wte).begin(), resumed.value(wte).end()), want, "checkpoint");
}

TEST(Export, ACheckpointOfARunFromASentenceTransformerCarriesItsFiles) {
  const auto source = testing::data_path("hf_sentence_transformer");
  Scratch s("export_st_checkpoint");
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "wordpiece", source / "vocab.txt", model_of(source));
  const ExportReport e = export_checkpoint(ckpt, s.dir / "out");
  EXPECT_EQ(e.carried_files, kSentenceTransformerFiles);
  expect_files_copied(source, s.dir / "out", kSentenceTransformerFiles);
  for (const std::string& f : kSentenceTransformerFiles) EXPECT_NE(std::find(e.files.begin(), e.files.end(), f), e.files.end()) << f;
}

TEST(Export, OnlyTheSourcesOwnFilesAreCopiedAndWhatIsLeftOutIsNamed) {
  Scratch s("export_carry_rules");
  const fs::path src = s.dir / "src";
  fs::create_directories(s.dir);
  fs::copy(testing::data_path("hf_sentence_transformer"), src, fs::copy_options::recursive);  // its links become files
  write_text(s.dir / "secret.txt", "not the model's");
  fs::create_symlink(s.dir / "secret.txt", src / "notes.txt");  // out of the folder
  fs::create_symlink("README.md", src / "MODEL_CARD.md");        // inside it: copied as a file
  fs::create_directory_symlink(s.dir, src / "up");
  for (const char* f : {"pytorch_model.bin", "tf_model.h5", "onnx/model.onnx", ".git/HEAD", "ckpt/ferry-run.json"}) write_text(src / f, "x");
  write_text(src / "2_Dense" / "model.safetensors", "a module's own weights");
  const ExportReport e = export_starting_point(starting_from(src), src / "export");  // the export inside its source
  const std::vector<std::string> carried{"1_Pooling/config.json", "2_Dense/model.safetensors", "MODEL_CARD.md", "README.md",
                                         "config_sentence_transformers.json", "modules.json", "sentence_bert_config.json"};
  EXPECT_EQ(e.carried_files, carried);
  expect_files_copied(src, src / "export", carried);
  EXPECT_FALSE(fs::exists(src / "export" / "notes.txt"));
  EXPECT_EQ(e.left_out, (std::vector<std::string>{".git/ (hidden)", "ckpt/ (Ferry's checkpoints)", "notes.txt (a link out of the folder)",
                                                  "onnx/ (its weights in another format)", "pytorch_model.bin (its weights in another format)",
                                                  "tf_model.h5 (its weights in another format)", "up (a link to no regular file)"}));
  const ExportReport again = export_starting_point(starting_from(src), src / "export", {std::nullopt, true});
  EXPECT_EQ(again.carried_files, carried) << "the earlier export inside the source is not carried into itself";
}

TEST(Export, ASnapshotOfTheHuggingFaceCacheIsReadThroughItsLinksIntoBlobs) {
  const auto fixture = testing::data_path("hf_sentence_transformer");
  Scratch s("export_hf_cache");
  // huggingface_hub's layout: snapshots/REVISION/<file> -> ../../blobs/<hash>, relative links.
  const fs::path repo = s.dir / "models--org--tiny", snapshot = repo / "snapshots" / "0123abc";
  int blob = 0;
  for (const auto& e : fs::recursive_directory_iterator(fixture)) {
    if (fs::is_directory(e.path())) continue;
    const fs::path rel = e.path().lexically_relative(fixture);
    const std::string hash = "blob" + std::to_string(blob++);
    fs::create_directories(repo / "blobs");
    fs::copy_file(e.path(), repo / "blobs" / hash);
    fs::create_directories((snapshot / rel).parent_path());
    fs::create_symlink(fs::path("../..") / (rel.has_parent_path() ? ".." : "") / "blobs" / hash, snapshot / rel);
  }
  const ExportReport e = export_starting_point(starting_from(snapshot), s.dir / "out");
  EXPECT_EQ(e.carried_files, kSentenceTransformerFiles);
  EXPECT_TRUE(e.left_out.empty()) << e.left_out.front();
  expect_files_copied(fixture, s.dir / "out", kSentenceTransformerFiles);
  expect_every_source_tensor_bitwise(fixture, s.dir / "out", "bert.");
}

TEST(Export, AFolderHoldingFilesIsRefusedAndOverwriteReplacesOnlyTheExportsOwn) {
  const auto source = testing::data_path("hf_sentence_transformer");
  Scratch s("export_overwrite");
  const fs::path out = s.dir / "out";
  write_text(out / "my_notes.txt", "mine");
  write_text(out / "config.json", "{\"mine\": true}");
  const std::string err = error_of([&] { export_starting_point(starting_from(source), out); });
  EXPECT_NE(err.find("export: --out '" + out.string() + "' holds files already (config.json, my_notes.txt); export into a new or empty "
                     "folder, or add --overwrite to replace the export's own files there (model.safetensors, config.json, "),
            std::string::npos) << err;
  EXPECT_EQ(testing::file_text(out / "config.json"), "{\"mine\": true}");
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));

  const ExportReport e = export_starting_point(starting_from(source), out, {std::nullopt, true});
  EXPECT_EQ(testing::file_text(out / "my_notes.txt"), "mine");
  EXPECT_EQ(e.replaced, std::vector<std::string>{"config.json"});
  EXPECT_EQ(e.kept, std::vector<std::string>{"my_notes.txt"});
  EXPECT_EQ(json_of(out / "config.json")["hidden_size"], 32);
  size_t regular_files = 0;
  for (const auto& f : fs::recursive_directory_iterator(out)) regular_files += f.is_regular_file();
  EXPECT_EQ(regular_files, e.files.size() + 1) << "each file written is listed, and nothing else is there but the user's";
}

TEST(Export, NeverIntoTheFolderItReadsFrom) {
  Scratch s("export_into_its_source");
  fs::create_directories(s.dir);
  fs::copy(testing::data_path("hf_sentence_transformer"), s.dir / "src", fs::copy_options::recursive);
  const std::string from_source = error_of([&] { export_starting_point(starting_from(s.dir / "src"), s.dir / "src", {std::nullopt, true}); });
  EXPECT_NE(from_source.find("is the folder of the model it exports"), std::string::npos) << from_source;
  const auto ckpt = checkpoint_from(testing::data_path("hf_roundtrip/bert_model"), s.dir / "ckpt");
  const std::string before = testing::file_text(ckpt / "model.safetensors");
  const std::string into_checkpoint = error_of([&] { export_checkpoint(ckpt, ckpt, {std::nullopt, true}); });
  EXPECT_NE(into_checkpoint.find("is the folder of the model it exports"), std::string::npos) << into_checkpoint;
  EXPECT_EQ(testing::file_text(ckpt / "model.safetensors"), before);
}

}  // namespace
}  // namespace ferry::formats
