// Hugging Face checkpoints in the layouts people ship (BertModel with and without 'bert.', BertForPreTraining,
// GPT2Model) load into Ferry's models; a missing BERT head is initialised only when model.init_missing says so.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "formats/safetensors.h"
#include "formats/weights.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

// Built on first use: the backward rules the builders need are registered during static initialisation.
const models::ModelSpec& bert_spec() {
  static const models::ModelSpec spec = models::build_bert({1, 2, 8, 16, 4, 0}, 1, 4);
  return spec;
}
const models::ModelSpec& gpt_spec() {
  static const models::ModelSpec spec = models::build_gpt2({1, 2, 8, 16, 4}, 1, 4);
  return spec;
}

// A checkpoint of `spec`'s parameters (parameter i holds i + 1 everywhere) under the names `rename` gives
// (empty: left out), plus `extra` tensors of shape [2] (ignored ones HF ships).
struct Checkpoint {
  inline static int files = 0;  // one file per checkpoint: a test may hold two
  std::filesystem::path path = testing::scratch_path("hf_layout_" + std::to_string(files++) + ".safetensors");
  std::vector<std::vector<float>> data;

  Checkpoint(const models::ModelSpec& spec, const std::function<std::string(const std::string&)>& rename,
             const std::vector<std::string>& extra = {}) {
    std::vector<SafetensorsTensorRef> refs;
    data.reserve(spec.params.size() + extra.size());
    for (size_t i = 0; i < spec.params.size(); ++i) {
      data.emplace_back(models::numel(spec.params[i].shape), float(i + 1));
      const std::string name = rename(spec.params[i].name);
      if (!name.empty()) refs.push_back({name, spec.params[i].file_shape(), data.back().data()});  // the files' shape
    }
    for (const auto& name : extra) {
      data.emplace_back(2, -1.0f);
      refs.push_back({name, {2}, data.back().data()});
    }
    write_safetensors(path, refs);
  }
  ~Checkpoint() { std::filesystem::remove(path); }
};

std::string without(const std::string& name, const std::string& prefix) {
  return name.starts_with(prefix) ? name.substr(prefix.size()) : name;
}

// BertModel's names: no 'bert.' prefix (or with it) and no masked-LM head.
std::string bert_model(const std::string& name) { return name.starts_with("cls.") ? "" : without(name, "bert."); }
std::string bert_model_prefixed(const std::string& name) { return name.starts_with("cls.") ? "" : name; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// Every parameter holds its index + 1, except those in `kept`, which hold the store's initial -7.
void expect_loaded(const models::ModelSpec& spec, const models::ParameterStore& store, const std::vector<std::string>& kept = {}) {
  for (int i = 0; i < store.count(); ++i) {
    const bool initialised = std::find(kept.begin(), kept.end(), spec.params[i].name) != kept.end();
    EXPECT_EQ(store.value(i)[0], initialised ? -7.0f : float(i + 1)) << spec.params[i].name;
  }
}

models::ParameterStore filled_store(const models::ModelSpec& spec) {
  models::ParameterStore store(spec.params);
  for (auto v : store.value_views()) std::fill(v.begin(), v.end(), -7.0f);
  return store;
}

const std::vector<std::string> kBertHead{"cls.predictions.bias", "cls.predictions.transform.dense.weight",
                                         "cls.predictions.transform.dense.bias", "cls.predictions.transform.LayerNorm.weight",
                                         "cls.predictions.transform.LayerNorm.bias"};

TEST(HfLayouts, BertModelWithoutPrefixLoadsAndItsHeadKeepsItsInitialisation) {
  const Checkpoint ckpt(bert_spec(), bert_model, {"pooler.dense.bias", "embeddings.position_ids"});
  models::ParameterStore store = filled_store(bert_spec());
  const std::vector<std::string> missing = load_weights(ckpt.path, bert_spec(), store, {.init_missing = {"head"}});
  EXPECT_EQ(std::set<std::string>(missing.begin(), missing.end()), std::set<std::string>(kBertHead.begin(), kBertHead.end()));
  expect_loaded(bert_spec(), store, kBertHead);
}

// A parameter whose view is empty (the device tier's, on the device only) is handed to options.store, read as
// fp32; the others load into their views; a missing one is still missing.
TEST(HfLayouts, AParameterWithoutAViewGoesToStore) {
  const Checkpoint ckpt(bert_spec(), bert_model);
  models::ParameterStore store = filled_store(bert_spec());
  std::vector<std::span<float>> views = store.value_views();
  const int n = static_cast<int>(views.size());
  for (int i = 1; i < n; i += 2) views[i] = {};
  std::map<int, std::vector<float>> stored;
  LoadOptions options{.init_missing = {"head"}};
  options.store = [&](int i, std::span<const float> values) { stored[i].assign(values.begin(), values.end()); };
  const std::vector<std::string> missing = load_weights(ckpt.path, bert_spec(), views, options);
  EXPECT_EQ(missing.size(), kBertHead.size());
  for (int i = 0; i < n; ++i) {
    const std::string& name = bert_spec().params[i].name;
    const bool head = std::find(kBertHead.begin(), kBertHead.end(), name) != kBertHead.end();
    if (i % 2 == 0) {
      EXPECT_EQ(store.value(i)[0], head ? -7.0f : float(i + 1)) << name;
      EXPECT_FALSE(stored.contains(i)) << name;
    } else if (head) {
      EXPECT_FALSE(stored.contains(i)) << name;
    } else {
      EXPECT_EQ(stored[i], std::vector<float>(store.value(i).size(), float(i + 1))) << name;
      EXPECT_EQ(store.value(i)[0], -7.0f) << name;
    }
  }
}

TEST(HfLayouts, BertModelWithPrefixLoads) {
  const Checkpoint ckpt(bert_spec(), bert_model_prefixed, {"bert.pooler.dense.bias"});
  models::ParameterStore store = filled_store(bert_spec());
  EXPECT_EQ(load_weights(ckpt.path, bert_spec(), store, {.init_missing = {"head"}}).size(), kBertHead.size());
  expect_loaded(bert_spec(), store, kBertHead);
}

TEST(HfLayouts, AMissingHeadWithoutInitMissingIsAnErrorThatSaysHowToAllowIt) {
  const Checkpoint ckpt(bert_spec(), bert_model);
  models::ParameterStore store = filled_store(bert_spec());
  const std::string err = error_of([&] { load_weights(ckpt.path, bert_spec(), store); });
  EXPECT_NE(err.find("tensor 'cls.predictions.bias' is missing from the checkpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("set model.init_missing: [head]"), std::string::npos) << err;
  // init_missing covers the head only: a missing encoder tensor stays an error.
  const Checkpoint partial(bert_spec(), [](const std::string& n) { return n.find("layer.0.output.dense.bias") != std::string::npos ? "" : n; });
  const std::string enc = error_of([&] { load_weights(partial.path, bert_spec(), store, {.init_missing = {"head"}}); });
  EXPECT_NE(enc.find("'bert.encoder.layer.0.output.dense.bias' is missing"), std::string::npos) << enc;
}

TEST(HfLayouts, BertForPreTrainingLoadsWithoutItsNextSentenceHead) {
  const Checkpoint ckpt(bert_spec(), [](const std::string& n) { return n; },
                        {"cls.seq_relationship.weight", "cls.seq_relationship.bias", "bert.pooler.dense.weight",
                         "cls.predictions.decoder.weight"});
  models::ParameterStore store = filled_store(bert_spec());
  EXPECT_TRUE(load_weights(ckpt.path, bert_spec(), store).empty());
  expect_loaded(bert_spec(), store);
}

// Older BERT checkpoints (bert-base-uncased among them) name LayerNorm parameters gamma and beta.
TEST(HfLayouts, BertsOlderGammaAndBetaNamesLoadAsLayerNormWeightAndBias) {
  const auto old_names = [](const std::string& n) {
    if (n.ends_with("LayerNorm.weight")) return n.substr(0, n.size() - 6) + "gamma";
    if (n.ends_with("LayerNorm.bias")) return n.substr(0, n.size() - 4) + "beta";
    return n;
  };
  const Checkpoint ckpt(bert_spec(), old_names);
  models::ParameterStore store = filled_store(bert_spec());
  EXPECT_TRUE(load_weights(ckpt.path, bert_spec(), store).empty());
  expect_loaded(bert_spec(), store);
}

TEST(HfLayouts, Gpt2ModelLoadsWithoutPrefixOrLmHead) {
  const Checkpoint ckpt(gpt_spec(), [](const std::string& n) { return without(n, "transformer."); }, {"h.0.attn.bias"});
  models::ParameterStore store = filled_store(gpt_spec());
  EXPECT_TRUE(load_weights(ckpt.path, gpt_spec(), store).empty());
  expect_loaded(gpt_spec(), store);
  // GPT-2 has no head to initialise: init_missing does not excuse a missing tensor.
  const Checkpoint partial(gpt_spec(), [](const std::string& n) { return n == "transformer.wte.weight" ? "" : n; });
  const std::string err = error_of([&] { load_weights(partial.path, gpt_spec(), store, {.init_missing = {"head"}}); });
  EXPECT_NE(err.find("'transformer.wte.weight' is missing"), std::string::npos) << err;
}

TEST(HfLayouts, BothFormsOfOneNameAreAnErrorNamingBoth) {
  const Checkpoint ckpt(bert_spec(), [](const std::string& n) { return n; }, {"embeddings.LayerNorm.bias"});
  models::ParameterStore store = filled_store(bert_spec());
  const std::string err = error_of([&] { load_weights(ckpt.path, bert_spec(), store); });
  EXPECT_NE(err.find("both 'bert.embeddings.LayerNorm.bias' and 'embeddings.LayerNorm.bias'"), std::string::npos) << err;
}

TEST(HfLayouts, UnknownNamesSayWhichPrefixTheCheckpointUses) {
  // A BERT checkpoint given to a GPT-2 model, and a wrapper's prefix on BERT's names.
  const Checkpoint bert_for_gpt(bert_spec(), bert_model);
  models::ParameterStore gpt_store = filled_store(gpt_spec());
  const std::string err = error_of([&] { load_weights(bert_for_gpt.path, gpt_spec(), gpt_store); });
  EXPECT_NE(err.find("the checkpoint's names start with 'embeddings.', and a model.kind gpt2 reads GPT2LMHeadModel"), std::string::npos) << err;
  const Checkpoint wrapped(bert_spec(), [](const std::string& n) { return "model." + n; });
  models::ParameterStore store = filled_store(bert_spec());
  const std::string werr = error_of([&] { load_weights(wrapped.path, bert_spec(), store); });
  EXPECT_NE(werr.find("start with 'model.', and a model.kind bert reads BertForMaskedLM"), std::string::npos) << werr;
}

}  // namespace
}  // namespace ferry::formats
