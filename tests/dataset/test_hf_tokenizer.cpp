// tokenizer.json files of today's decoder models (Llama 3, Qwen2, Llama 2 (also as transformers converts it
// with legacy: false), SmolLM2, as their published files are configured) against the ids and decoded strings of Hugging
// Face `tokenizers` on a multilingual text (tests/data/make_llama_tokenizer_reference.py), BOS/EOS, and the parts Ferry
// refuses by name.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dataset/pretokenize.h"
#include "dataset/tokenizer.h"
#include "test_helpers.h"

namespace ferry::dataset {
namespace {

using nlohmann::json;

json expected() {
  std::ifstream in(testing::data_path("llama_tokenizer_expected.json"));
  return json::parse(in);
}

std::filesystem::path tokenizer_file(const std::string& kind) {
  return testing::data_path("hf_tokenizers/" + kind + "/tokenizer.json");
}

class HfTokenizerReference : public ::testing::TestWithParam<std::string> {};

// Ids equal to Hugging Face's on every text, with and without the post-processor's special tokens, and the
// ids decode to what Hugging Face decodes them to (the text itself where it round-trips).
TEST_P(HfTokenizerReference, MatchesHuggingFaceTokenizers) {
  const json all = expected();
  const auto tok = load_hf_tokenizer(tokenizer_file(GetParam()));
  const json& texts = all["texts"];
  const json& cases = all[GetParam()];
  ASSERT_EQ(texts.size(), cases.size());
  ASSERT_GT(texts.size(), 20u);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i];
    const auto want = cases[i]["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(ids, want) << GetParam() << ", text " << i << ": '" << text << "'";
    std::vector<int32_t> with_bos = ids;
    if (tok->bos_id() >= 0) with_bos.insert(with_bos.begin(), tok->bos_id());
    EXPECT_EQ(with_bos, cases[i]["ids_special"].get<std::vector<int32_t>>()) << GetParam() << ", text " << i;
    EXPECT_EQ(tok->decode(want), cases[i].value("decoded", text))
        << GetParam() << ", text " << i << ": '" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, HfTokenizerReference,
                         ::testing::Values("llama3", "qwen2", "llama2", "llama2_metaspace", "smollm2"));

// BOS from the post-processor or add_bos_token, EOS from tokenizer_config.json; whether the text may be
// tokenised in parts cut at newlines (not where the normalizer marks a text's start).
TEST(HfTokenizer, SpecialTokensAndParts) {
  const auto llama3 = load_hf_tokenizer(tokenizer_file("llama3"));
  EXPECT_EQ(llama3->token_of(llama3->bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(llama3->token_of(llama3->eos_id()), "<|end_of_text|>");
  EXPECT_TRUE(llama3->encodes_in_parts());
  const auto qwen2 = load_hf_tokenizer(tokenizer_file("qwen2"));
  EXPECT_EQ(qwen2->bos_id(), -1);
  EXPECT_EQ(qwen2->token_of(qwen2->eos_id()), "<|endoftext|>");
  const auto llama2 = load_hf_tokenizer(tokenizer_file("llama2"));
  EXPECT_EQ(llama2->bos_id(), 1);
  EXPECT_EQ(llama2->eos_id(), 2);
  EXPECT_FALSE(llama2->encodes_in_parts());
  EXPECT_EQ(llama2->token_of(3 + 0x0A), "<0x0A>");
  // Without tokenizer_config.json: BOS from the post-processor, and no EOS but what it appends.
  const auto dir = testing::scratch_path("hf_tokenizer_alone");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(tokenizer_file("llama3"), dir / "tokenizer.json");
  const auto alone = load_hf_tokenizer(dir / "tokenizer.json");
  EXPECT_EQ(alone->bos_id(), llama3->bos_id());
  EXPECT_EQ(alone->eos_id(), -1);
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": false, "eos_token": {"content": "<|eot_id|>"}})";
  const auto configured = load_hf_tokenizer(dir / "tokenizer.json");
  EXPECT_EQ(configured->bos_id(), -1);
  EXPECT_EQ(configured->token_of(configured->eos_id()), "<|eot_id|>");
  std::filesystem::remove_all(dir);
}

// What a tokenizer.json may set that Ferry does not reproduce is refused with the file and the part named.
TEST(HfTokenizer, UnsupportedPartsAreRefusedByName) {
  const auto dir = testing::scratch_path("hf_tokenizer_refused");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ifstream in(tokenizer_file("llama3"));
  const json base = json::parse(in);
  const auto refusal = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    std::ofstream(dir / "tokenizer.json") << j.dump();
    return testing::error_of([&] { load_hf_tokenizer(dir / "tokenizer.json"); });
  };
  const std::string file = (dir / "tokenizer.json").string();
  EXPECT_NE(refusal([](json& j) {
              j["model"]["type"] = "Unigram";
            }).find(file + ": model.type Unigram is not one Ferry reproduces"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["type"] = "WordLevel"; }).find("model.type WordLevel"), std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["pre_tokenizer"] = {{"type", "Whitespace"}};
            }).find(file + ": pre_tokenizer Whitespace is not one"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
            }).find("pre_tokenizer Split"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }).find("normalizer NFKC"), std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFD"}}}}};
            }).find("normalizer NFD is not one Ferry reproduces (it reads Prepend, Replace of a string, NFC"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["decoder"] = {{"type", "WordPiece"}};
            }).find("decoder WordPiece"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["dropout"] = 0.1; }).find("model.dropout 0.1"), std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["model"]["merges"].push_back("zzz qqq"); }).find("'zzz' is not in model.vocab"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// Added tokens with lstrip and rstrip (the whitespace beside them is part of the match, Unicode's included)
// and single_word (no match where a word character touches it), added to the llama3 file as `tokenizers`
// writes them: the ids equal Hugging Face's.
TEST(HfTokenizer, AddedTokensStripAndSingleWordAsHuggingFace) {
  const json reference = expected()["llama3_added_flags"];
  std::ifstream in(tokenizer_file("llama3"));
  json file = json::parse(in);
  for (const json& t : reference["added_tokens"]) file["added_tokens"].push_back(t);
  const auto dir = testing::scratch_path("hf_tokenizer_added_flags");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << file.dump();
  const auto tok = load_hf_tokenizer(dir / "tokenizer.json");
  ASSERT_GE(reference["cases"].size(), 10u);
  for (const json& c : reference["cases"])
    EXPECT_EQ(tok->encode(c["text"].get<std::string>()), c["ids"].get<std::vector<int32_t>>())
        << "'" << c["text"] << "'";
  std::filesystem::remove_all(dir);
}

// The pre-tokenizer patterns where they differ: Llama 3 takes digits in threes, Qwen2 one by one; Llama 3's
// contractions ignore case; a whitespace run ends at its last newline; a space goes with the word after it.
TEST(Pretokenize, Llama3AndQwen2Patterns) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split_pieces("12345 x", SplitPattern::Llama3), (V{"123", "45", " x"}));
  EXPECT_EQ(split_pieces("12345 x", SplitPattern::Qwen2), (V{"1", "2", "3", "4", "5", " x"}));
  EXPECT_EQ(split_pieces("WE'VE it's", SplitPattern::Llama3), (V{"WE", "'VE", " it", "'s"}));
  EXPECT_EQ(split_pieces("WE'VE", SplitPattern::Gpt2), (V{"WE", "'", "VE"}));
  EXPECT_EQ(split_pieces("a \n\n  b", SplitPattern::Llama3), (V{"a", " \n\n", " ", " b"}));
  EXPECT_EQ(split_pieces("(x) !!\n\ny", SplitPattern::Llama3), (V{"(x", ")", " !!\n\n", "y"}));
  EXPECT_EQ(split_pieces("\tword   ", SplitPattern::Llama3), (V{"\tword", "   "}));
  EXPECT_EQ(split_pieces("ab12c3", SplitPattern::Digits), (V{"ab", "1", "2", "c", "3"}));
}

}  // namespace
}  // namespace ferry::dataset
