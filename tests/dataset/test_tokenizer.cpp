// Tokenizers: GPT-2 byte-level BPE and BERT WordPiece against ids from Hugging Face `tokenizers`
// (tests/data/make_bpe_reference.py, make_wordpiece_reference.py), round trips, and malformed vocabularies.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <fstream>

#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"
#include "test_helpers.h"

namespace ferry::dataset {
namespace {

TEST(Gpt2Bpe, MatchesHuggingFaceTokenizers) {
  const auto bpe = load_gpt2_bpe(testing::data_path("bpe_vocab.json"), testing::data_path("bpe_merges.txt"));
  EXPECT_EQ(bpe->vocab_size(), 1000);
  std::ifstream in(testing::data_path("bpe_expected.json"));
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto ids = bpe->encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
    EXPECT_EQ(bpe->decode(ids), text);
  }
}

TEST(WordPiece, MatchesHuggingFaceTokenizers) {
  const auto wp = load_wordpiece(testing::data_path("wordpiece_vocab.txt"), true);
  EXPECT_EQ(wp->vocab_size(), 1000);
  EXPECT_EQ(wordpiece_token_id(testing::data_path("wordpiece_vocab.txt"), "[MASK]"), 4);
  std::ifstream in(testing::data_path("wordpiece_expected.json"));
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    EXPECT_EQ(wp->encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
  }
  // Decoding joins the pieces back into lowercased words.
  EXPECT_EQ(wp->decode(wp->encode("The quick brown fox.")), "the quick brown fox .");
}

TEST(WordPiece, MalformedVocabulariesAreClearErrors) {
  const auto dir = std::filesystem::temp_directory_path();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  auto error_of = [](const std::filesystem::path& p) {
    try {
      load_wordpiece(p, true);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of(write("wp_no_unk.txt", "[PAD]\na\nb\n")).find("no [UNK]"), std::string::npos);
  EXPECT_NE(error_of(write("wp_dup.txt", "[UNK]\na\na\n")).find("'a' appears twice"), std::string::npos);
  EXPECT_NE(error_of(write("wp_empty_line.txt", "[UNK]\n\na\n")).find("line 2 is empty"), std::string::npos);
  EXPECT_NE(error_of(dir / "wp_missing.txt").find("wp_missing.txt' does not exist"), std::string::npos);
}

// A tokenizer.json under another name, given where a vocab.txt or vocab.json is read (ferry tokenize --vocab),
// is named as what it is with what to give instead, not reported as a malformed vocabulary; a FIFO is refused
// without waiting for a writer.
TEST(Tokenizers, ATokenizerJsonUnderAnotherNameOrAFifoIsNamedAsWhatItIs) {
  const auto dir = testing::scratch_path("renamed_tokenizer_json");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto renamed = dir / "bert-tokenizer.json";
  std::filesystem::copy_file(testing::data_path("hf_roundtrip/bert_pretraining/tokenizer.json"), renamed);
  EXPECT_TRUE(is_tokenizer_json(renamed));
  EXPECT_FALSE(is_tokenizer_json(testing::data_path("bpe_vocab.json")));
  EXPECT_FALSE(is_tokenizer_json(testing::data_path("wordpiece_vocab.txt")));
  const std::string what = "'" + renamed.string() + "' is a Hugging Face tokenizer.json under another name, not a ";
  EXPECT_NE(testing::error_of([&] {
              load_wordpiece(renamed, true);
            }).find(what + "vocab.txt; Ferry tells a tokenizer.json by its name"),
            std::string::npos)
      << testing::error_of([&] { load_wordpiece(renamed, true); });
  EXPECT_NE(
      testing::error_of([&] { load_gpt2_bpe(renamed, testing::data_path("bpe_merges.txt")); })
          .find(what +
                "vocab.json; Ferry tells a tokenizer.json by its name: give it as tokenizer.json (rename it, or link "
                "tokenizer.json to it; it holds its merges), or give the vocab.json and merges.txt it was saved with"),
      std::string::npos)
      << testing::error_of([&] { load_gpt2_bpe(renamed, testing::data_path("bpe_merges.txt")); });
  const auto fifo = dir / "vocab.txt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(testing::error_without_blocking(fifo, [&] { load_wordpiece(fifo, true); })
                .find("is a FIFO (a named pipe), not a file"),
            std::string::npos);
  EXPECT_NE(testing::error_without_blocking(fifo, [&] { load_gpt2_bpe(testing::data_path("bpe_vocab.json"), fifo); })
                .find("the merges: '" + fifo.string() + "' is a FIFO"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  const auto t = make_byte_tokenizer();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const auto ids = t->encode(all);
  EXPECT_EQ(ids.size(), 256u);
  EXPECT_EQ(ids[200], 200);
  EXPECT_EQ(t->decode(ids), all);
}

TEST(Gpt2Bpe, MalformedFilesAreClearErrors) {
  const auto dir = std::filesystem::temp_directory_path();
  std::ofstream(dir / "bad_vocab.json") << "[1, 2";
  EXPECT_THROW(load_gpt2_bpe(dir / "bad_vocab.json", testing::data_path("bpe_merges.txt")), std::runtime_error);
  std::ofstream(dir / "small_vocab.json") << R"({"a": 0})";
  try {
    load_gpt2_bpe(dir / "small_vocab.json", testing::data_path("bpe_merges.txt"));
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a byte-level BPE vocabulary"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "bad_merges.txt") << "#version: 0.2\nab\n";
  EXPECT_THROW(load_gpt2_bpe(testing::data_path("bpe_vocab.json"), dir / "bad_merges.txt"), std::runtime_error);
  EXPECT_THROW(load_gpt2_bpe(dir / "missing.json", dir / "missing.txt"), std::runtime_error);
}

TEST(TokenShard, RoundTripAndCorruptFiles) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::vector<int32_t> tokens{0, 1, 999, 65535, 42};
  write_token_shard(dir / "shard.bin", tokens);
  ASSERT_TRUE(starts_with_shard_magic(dir / "shard.bin"));
  {
    const TokenShard shard(dir / "shard.bin");
    EXPECT_EQ(shard.ids(), tokens);
  }
  EXPECT_EQ(std::filesystem::file_size(dir / "shard.bin"), 1024 + 2 * tokens.size()) << "uint16 while every id fits";
  // Llama 3's and Qwen2's ids go beyond uint16: llm.c's uint32 shard (magic 20240801, version 7).
  const std::vector<int32_t> wide{0, 128000, 151645, 65536, 7};
  write_token_shard(dir / "wide.bin", wide);
  EXPECT_TRUE(starts_with_shard_magic(dir / "wide.bin"));
  EXPECT_EQ(std::filesystem::file_size(dir / "wide.bin"), 1024 + 4 * wide.size());
  EXPECT_EQ(TokenShard(dir / "wide.bin").ids(), wide);
  std::filesystem::resize_file(dir / "wide.bin", 1024 + 4 * 4 + 2);
  EXPECT_NE(
      testing::error_of([&] { TokenShard(dir / "wide.bin"); }).find("is 5 but the file holds 4 tokens and stray bytes"),
      std::string::npos);
  EXPECT_THROW(write_token_shard(dir / "negative.bin", std::vector<int32_t>{-1}), std::runtime_error);
  std::filesystem::resize_file(dir / "shard.bin", 1024 + 4);  // truncated
  try {
    TokenShard truncated(dir / "shard.bin");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("header field 'token count' (int32 at byte 8) is 5 but the file holds 2 tokens"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "notashard.bin") << std::string(2000, 'x');
  EXPECT_FALSE(starts_with_shard_magic(dir / "notashard.bin"));
  EXPECT_THROW(TokenShard(dir / "notashard.bin"), std::runtime_error);
}

}  // namespace
}  // namespace ferry::engine
