// config.json beside Hugging Face weights: agreeing values pass, a conflict names both keys and values, and
// a computation Ferry does not have (epsilon, activation, MLP width, model type) is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/hf_config.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

using nlohmann::json;

// A model folder holding only config.json (the check reads nothing else): the export's GPT2Config or
// BertConfig for the default model section, with `changes` applied.
struct Folder {
  std::filesystem::path dir = testing::scratch_path("hf_config");
  models::ModelConfig model;

  Folder(const std::string& kind, const json& changes) {
    model.kind = kind;
    model.init_from = dir;
    std::filesystem::create_directories(dir);
    json cfg = kind == "bert" ? json{{"model_type", "bert"}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"hidden_size", 64},
                                     {"intermediate_size", 256}, {"vocab_size", 256}, {"max_position_embeddings", 64},
                                     {"hidden_act", "gelu"}, {"layer_norm_eps", 1e-12}}
                              : json{{"model_type", "gpt2"}, {"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"vocab_size", 256},
                                     {"n_positions", 64}, {"n_inner", nullptr}, {"activation_function", "gelu_new"},
                                     {"layer_norm_epsilon", 1e-5}};
    cfg.update(changes);
    std::ofstream(dir / "config.json") << cfg.dump();
  }
  ~Folder() { std::filesystem::remove_all(dir); }

  std::string error() const {
    try {
      check_hf_config(model);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST(HfConfig, AnAgreeingConfigPasses) {
  EXPECT_EQ(Folder("gpt2", json::object()).error(), "no error");
  EXPECT_EQ(Folder("bert", json::object()).error(), "no error");
  // Beside a model.safetensors named directly, too; a bare file elsewhere has none to check.
  const Folder f("gpt2", {{"n_embd", 768}});
  EXPECT_EQ(hf_config_path(f.dir / "model.safetensors"), f.dir / "config.json");
  EXPECT_TRUE(hf_config_path(f.dir / "weights.safetensors").empty());
}

TEST(HfConfig, AConflictNamesTheJsonKeyTheYamlKeyAndBothValues) {
  struct Case {
    std::string kind;
    json changes;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {"gpt2", {{"n_embd", 768}}, "config.json: n_embd is 768, and model.n_embd is 64"},
           {"gpt2", {{"n_positions", 1024}}, "config.json: n_positions is 1024, and model.seq_len is 64"},
           {"bert", {{"num_hidden_layers", 12}}, "config.json: num_hidden_layers is 12, and model.n_layer is 2"},
           {"bert", {{"vocab_size", 30522}}, "config.json: vocab_size is 30522, and model.vocab_size is 256"},
           {"bert", {{"model_type", "gpt2"}}, "config.json: model_type is \"gpt2\", and model.kind is bert"},
       }) {
    const std::string err = Folder(c.kind, c.changes).error();
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
}

TEST(HfConfig, WhatFerryCannotComputeIsRefusedByName) {
  struct Case {
    std::string kind;
    json changes;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {"bert", {{"layer_norm_eps", 1e-5}}, "config.json: layer_norm_eps is 1e-05; Ferry's BERT computes with 1e-12 only"},
           {"bert", {{"hidden_act", "relu"}}, "config.json: hidden_act is \"relu\"; Ferry's BERT computes with gelu only"},
           {"bert", {{"intermediate_size", 100}}, "config.json: intermediate_size is 100; Ferry's BERT computes with an MLP 4 * hidden wide (256)"},
           {"gpt2", {{"layer_norm_epsilon", 1e-6}}, "config.json: layer_norm_epsilon is 1e-06; Ferry's GPT-2 computes with 1e-05 only"},
           {"gpt2", {{"activation_function", "gelu"}}, "config.json: activation_function is \"gelu\"; Ferry's GPT-2 computes with gelu_new"},
           {"gpt2", {{"n_inner", 100}}, "config.json: n_inner is 100; Ferry's GPT-2 computes with an MLP 4 * hidden wide"},
       }) {
    const std::string err = Folder(c.kind, c.changes).error();
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
  EXPECT_EQ(Folder("gpt2", {{"n_inner", 256}}).error(), "no error");  // 4 * hidden written out
}

}  // namespace
}  // namespace ferry::formats
