// `ferry export` round trips: a checkpoint of a run that started from a Hugging Face folder exports every
// tensor of the source bit for bit at step zero (the pooler and the next-sentence head included), the
// source's config.json settings (dropout) and its tokenizer files. The folders come from
// tests/data/make_hf_roundtrip_reference.py.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/export.h"
#include "formats/hf_source.h"
#include "formats/weights.h"
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
                                      const std::string& tokenizer = "wordpiece", const std::filesystem::path& vocab = {}) {
  const models::ModelSpec spec = models::build_model(kTinyBert, 1, 4);
  models::ParameterStore params{spec.params};
  models::init_model(kTinyBert, spec, params, 1);
  load_weights(source, spec, params, {{"head"}});
  std::vector<float> m(params.values().size(), 0.f), v(params.values().size(), 0.f);
  TrainState state;
  state.config_hash = "0123456789abcdef";
  state.model = kTinyBert;
  state.model.init_from = source;
  state.tokenizer = tokenizer;
  state.origin.init_from = source;
  state.origin.vocab = vocab;
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
  const ExportedCheckpoint e = export_checkpoint(ckpt, s.dir / "out");
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
  const ExportedCheckpoint e = export_checkpoint(ckpt, s.dir / "out");
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

TEST(Export, WithoutASourceDropoutIsHuggingFacesDefaultAndStaleTokenizerFilesGo) {
  const auto source = testing::data_path("hf_roundtrip/bert_pretraining");
  Scratch s("export_no_source");
  const auto ckpt = checkpoint_from(source, s.dir / "ckpt", "byte");
  export_checkpoint(ckpt, s.dir / "out");  // with the source's tokenizer files? no: the run's tokens were bytes
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out" / "tokenizer.json"));
  const auto with_wp = checkpoint_from(source, s.dir / "ckpt2", "wordpiece", source / "vocab.txt");
  export_checkpoint(with_wp, s.dir / "out");
  ASSERT_TRUE(std::filesystem::exists(s.dir / "out" / "tokenizer.json"));

  const ExportedCheckpoint e = export_checkpoint(ckpt, s.dir / "out", {std::filesystem::path()});
  EXPECT_TRUE(e.source.empty());
  EXPECT_TRUE(e.carried.empty());
  EXPECT_NE(e.note.find("the byte tokenizer has no Hugging Face equivalent"), std::string::npos) << e.note;
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out" / "tokenizer.json")) << "an earlier export's tokenizer would be read";
  EXPECT_FALSE(std::filesystem::exists(s.dir / "out" / "vocab.txt"));
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

}  // namespace
}  // namespace ferry::formats
