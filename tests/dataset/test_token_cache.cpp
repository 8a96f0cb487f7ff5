// Raw text with GPT-2 BPE and WordPiece: the token cache (built once, reused, rebuilt when the text or the
// vocabulary changes), tokenising in parts, shard sidecars, and BERT's [MASK] from the vocabulary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "dataset/data_source.h"
#include "dataset/token_cache.h"
#include "test_helpers.h"

namespace ferry::dataset {
namespace {

using testing::error_of;

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TokenizerFiles wordpiece() { return {"wordpiece", testing::data_path("wordpiece_vocab.txt"), {}, true}; }
TokenizerFiles gpt2() { return {"gpt2", testing::data_path("bpe_vocab.json"), testing::data_path("bpe_merges.txt"), true}; }

std::vector<int32_t> shard_tokens(const std::filesystem::path& path) { return TokenShard(path).ids(); }

struct Scratch {
  std::filesystem::path dir = testing::scratch_path("token_cache");
  Scratch() {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

TEST(TokenCache, TheFirstRunBuildsTheSecondReusesAChangedTextRebuilds) {
  Scratch s;
  const auto text = s.dir / "corpus.txt";
  write_text(text, "The cat sat on the mat.\nA ferry crossed the sea!\n");
  const auto cache = s.dir / "cache";
  int reports = 0;
  const CachedTokens first = cached_tokens(text, wordpiece(), cache, [&](const std::string&) { ++reports; });
  EXPECT_TRUE(first.built);
  EXPECT_EQ(first.shard.parent_path(), cache);
  EXPECT_GE(reports, 1);  // says it tokenises
  EXPECT_EQ(shard_tokens(first.shard), load_tokenizer(wordpiece())->encode(testing::file_text(text)));
  EXPECT_EQ(first.info.tokenizer.kind, "wordpiece");
  EXPECT_EQ(first.info.mask_token_id, 4);  // the vocabulary's [MASK]
  const auto written = std::filesystem::last_write_time(first.shard);

  const CachedTokens second = cached_tokens(text, wordpiece(), cache);
  EXPECT_FALSE(second.built);
  EXPECT_EQ(second.shard, first.shard);
  EXPECT_EQ(std::filesystem::last_write_time(second.shard), written);  // not written again

  write_text(text, "An entirely different text about boats.\n");
  const CachedTokens third = cached_tokens(text, wordpiece(), cache);
  EXPECT_TRUE(third.built);
  EXPECT_NE(third.shard, first.shard);
  EXPECT_FALSE(std::filesystem::exists(first.shard)) << "the stale shard is removed";
  EXPECT_FALSE(std::filesystem::exists(shard_info_path(first.shard)));
  EXPECT_EQ(shard_tokens(third.shard), load_tokenizer(wordpiece())->encode("An entirely different text about boats.\n"));
}

// An environment variable set for one scope, restored (or unset again) at its end.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* was = std::getenv(name)) was_ = was;
    set(value);
  }
  ~ScopedEnv() { set(was_); }
  void set(const std::optional<std::string>& value) {
    if (value) ::setenv(name_, value->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> was_;
};

// Issue 29: the cache landed beside the data (configs/data/.ferry-cache/, in the source tree). It is the
// user's cache folder now: FERRY_CACHE_DIR, else $XDG_CACHE_HOME/ferry, else ~/.cache/ferry.
TEST(TokenCache, TheDefaultFolderIsTheUsersCacheNeverTheDatasFolder) {
  Scratch s;
  ScopedEnv ferry("FERRY_CACHE_DIR", (s.dir / "ferry-cache").string()), xdg("XDG_CACHE_HOME", (s.dir / "xdg").string()),
      home("HOME", (s.dir / "home").string());
  EXPECT_EQ(default_token_cache_dir(), s.dir / "ferry-cache" / "tokens");
  ferry.set(std::nullopt);
  EXPECT_EQ(default_token_cache_dir(), s.dir / "xdg" / "ferry" / "tokens");
  xdg.set("");  // empty: as if unset
  EXPECT_EQ(default_token_cache_dir(), s.dir / "home" / ".cache" / "ferry" / "tokens");

  // A run's raw text: tokenised into FERRY_CACHE_DIR, and nothing written beside the text.
  ferry.set((s.dir / "ferry-cache").string());
  std::filesystem::create_directories(s.dir / "data");
  const auto text = s.dir / "data" / "corpus.txt";
  write_text(text, "The cat sat on the mat.\nA ferry crossed the sea!\n");
  const DataSource source = open_data_source({text, DataFormat::Auto, wordpiece(), true, {}});
  EXPECT_EQ(source.path.parent_path(), s.dir / "ferry-cache" / "tokens");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(s.dir / "data"), {}), 1) << "only the text in its folder";
  // data.cache_dir still wins.
  EXPECT_EQ(open_data_source({text, DataFormat::Auto, wordpiece(), true, s.dir / "mine"}).path.parent_path(), s.dir / "mine");
}

TEST(TokenCache, TwoTextsOfOneNameShareACacheFolderWithoutEvictingEachOther) {
  Scratch s;
  std::filesystem::create_directories(s.dir / "a");
  std::filesystem::create_directories(s.dir / "b");
  write_text(s.dir / "a" / "train.txt", "the cat\n");
  write_text(s.dir / "b" / "train.txt", "the dog sat\n");
  const CachedTokens a = cached_tokens(s.dir / "a" / "train.txt", wordpiece(), s.dir / "cache");
  const CachedTokens b = cached_tokens(s.dir / "b" / "train.txt", wordpiece(), s.dir / "cache");
  EXPECT_NE(a.shard, b.shard);
  EXPECT_TRUE(std::filesystem::exists(a.shard));
  EXPECT_FALSE(cached_tokens(s.dir / "a" / "train.txt", wordpiece(), s.dir / "cache").built);
  EXPECT_FALSE(cached_tokens(s.dir / "b" / "train.txt", wordpiece(), s.dir / "cache").built);
}

TEST(TokenCache, AnotherVocabularyOrCaseRuleIsAnotherKey) {
  Scratch s;
  const auto text = s.dir / "corpus.txt";
  write_text(text, "Hello World\n");
  const std::string key = token_cache_key(text, wordpiece());
  TokenizerFiles cased = wordpiece();
  cased.lowercase = false;
  EXPECT_NE(token_cache_key(text, cased), key);
  const auto vocab = s.dir / "vocab.txt";
  write_text(vocab, testing::file_text(wordpiece().vocab) + "extra\n");
  EXPECT_NE(token_cache_key(text, {"wordpiece", vocab, {}, true}), key);
  EXPECT_NE(token_cache_key(text, gpt2()), key);
  EXPECT_EQ(token_cache_key(text, wordpiece()), key);  // stable
}

TEST(TokenCache, ADamagedCachedShardIsRebuilt) {
  Scratch s;
  const auto text = s.dir / "corpus.txt";
  write_text(text, "the cat sat on the mat\n");
  const CachedTokens first = cached_tokens(text, gpt2(), s.dir / "cache");
  std::filesystem::resize_file(first.shard, 1000);  // cut into its header
  const CachedTokens again = cached_tokens(text, gpt2(), s.dir / "cache");
  EXPECT_TRUE(again.built);
  EXPECT_EQ(shard_tokens(again.shard), load_tokenizer(gpt2())->encode("the cat sat on the mat\n"));
}

// Issue 32: zeroing the token bytes of a cached shard (its header kept) made every later run train on zeros,
// "from the cache". The sidecar records the shard's checksum: changed bytes are found, said, and tokenised again.
TEST(TokenCache, ACachedShardWhoseTokensChangedIsRebuiltAndSaidSo) {
  Scratch s;
  const auto text = s.dir / "corpus.txt";
  write_text(text, "the cat sat on the mat\nthe ferry crossed the sea\n");
  const CachedTokens first = cached_tokens(text, gpt2(), s.dir / "cache");
  ASSERT_TRUE(first.info.checksum.has_value());
  EXPECT_EQ(first.info.checksum->crc32c, checksum_file(first.shard).crc32c);
  EXPECT_EQ(read_shard_info(first.shard)->checksum->bytes, std::filesystem::file_size(first.shard));
  const auto size = std::filesystem::file_size(first.shard);
  {
    std::fstream shard(first.shard, std::ios::binary | std::ios::in | std::ios::out);
    shard.seekp(1024);
    shard << std::string(size - 1024, '\0');  // every token 0, the header as it was
  }
  std::vector<std::string> reports;
  const CachedTokens again =
      cached_tokens(text, gpt2(), s.dir / "cache", [&](const std::string& r) { reports.push_back(r); });
  EXPECT_TRUE(again.built);
  EXPECT_EQ(shard_tokens(again.shard), load_tokenizer(gpt2())->encode(testing::file_text(text)));
  ASSERT_FALSE(reports.empty());
  EXPECT_NE(reports[0].find("the cached tokens '" + first.shard.string() + "' changed on disk since they were written"),
            std::string::npos)
      << reports[0];
  EXPECT_FALSE(cached_tokens(text, gpt2(), s.dir / "cache").built);  // intact again: reused
}

// The committed BPE with one more merge, of a newline and a space ("\n " as one token), so that a part cut
// inside a whitespace run would tokenise differently.
TokenizerFiles gpt2_joining_newline_and_space(const std::filesystem::path& dir) {
  nlohmann::json vocab = nlohmann::json::parse(testing::file_text(testing::data_path("bpe_vocab.json")));
  vocab["\u010a\u0120"] = static_cast<int>(vocab.size());  // "ĊĠ"
  std::ofstream(dir / "vocab.json") << vocab.dump();
  std::ofstream(dir / "merges.txt") << "\u010a \u0120\n" << testing::file_text(testing::data_path("bpe_merges.txt"));
  return {"gpt2", dir / "vocab.json", dir / "merges.txt", true};
}

// Parts are cut where neither tokenizer can join across the cut: the tokens are the whole text's.
TEST(TokenCache, TokenisingInPartsGivesTheWholeTextsTokens) {
  Scratch s;
  std::mt19937 rng(7);
  const std::vector<std::string> atoms{"the", "cat", " ", "  ", "\n", "\n\n", " \n", "'s", "'ll", "42", "!", "?", "\t", "Ferry", "café",
                                       "sea", "-", "\r\n", "\u00a0", "\u3000", "\u4e2d"};
  for (const TokenizerFiles& files : {gpt2(), wordpiece(), gpt2_joining_newline_and_space(s.dir)}) {
    const auto tokenizer = load_tokenizer(files);
    for (int trial = 0; trial < 20; ++trial) {
      std::string text;
      for (int i = 0; i < 400; ++i) text += atoms[rng() % atoms.size()];
      EXPECT_EQ(tokenize_in_parts(text, *tokenizer, {}, 1 + rng() % 64), tokenizer->encode(text)) << files.kind << ": " << text;
    }
  }
}

// What transformers 5 saves alone (tests/data/make_hf_roundtrip_reference.py): read as its vocab.txt is.
TEST(TokenizerJson, ABertTokenizersFileTokenisesAsItsVocabTxt) {
  const auto folder = testing::data_path("hf_roundtrip/bert_pretraining");
  const auto from_json = load_tokenizer({"wordpiece", folder / "tokenizer.json", {}, true});
  const auto from_txt = load_tokenizer({"wordpiece", folder / "vocab.txt", {}, true});
  const std::string text = "The cats sat on the boat, boating! Unknownword?";
  EXPECT_EQ(from_json->encode(text), from_txt->encode(text));
  EXPECT_EQ(from_json->vocab_size(), from_txt->vocab_size());
  EXPECT_EQ(from_json->id_of("[MASK]"), 4);
  Scratch s;
  nlohmann::json other = nlohmann::json::parse(testing::file_text(folder / "tokenizer.json"));
  other["pre_tokenizer"] = {{"type", "Metaspace"}};
  std::ofstream(s.dir / "tokenizer.json") << other.dump();
  EXPECT_NE(error_of([&] { load_tokenizer({"wordpiece", s.dir / "tokenizer.json", {}, true}); })
                .find("a WordPiece model behind the Metaspace pre-tokenizer, which Ferry's wordpiece does not reproduce"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_tokenizer({"gpt2", folder / "tokenizer.json", {}, true}); }).find("a WordPiece model"), std::string::npos);
}

TEST(ShardInfo, RoundTripsAndADamagedOneIsAnErrorNamingIt) {
  Scratch s;
  const auto shard = s.dir / "data.bin";
  EXPECT_FALSE(read_shard_info(shard).has_value());
  const ShardInfo info = describe_shard(wordpiece(), *load_tokenizer(wordpiece()));
  write_shard_info(shard, info);
  const auto back = read_shard_info(shard);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->tokenizer.kind, "wordpiece");
  EXPECT_EQ(back->tokenizer.vocab, std::filesystem::absolute(wordpiece().vocab).lexically_normal());
  EXPECT_EQ(back->mask_token_id, 4);
  EXPECT_EQ(back->vocab_size, 1000);
  write_text(shard_info_path(shard), "{\"tokenizer\": \"sentencepiece\"}");
  EXPECT_NE(error_of([&] { read_shard_info(shard); }).find("data.bin.json' (what made the token shard"), std::string::npos);
}

DataSource wordpiece_source(const std::filesystem::path& vocab) {
  DataSource d;
  d.known = true;
  d.info.tokenizer = {"wordpiece", vocab, {}, true};
  d.vocabulary = load_tokenizer(d.info.tokenizer);
  d.info = describe_shard(d.info.tokenizer, *d.vocabulary);
  d.origin = "'" + vocab.string() + "'";
  return d;
}

TEST(MaskToken, TakenFromAWordPieceVocabularyAndAnErrorWhenItHasNone) {
  const DataSource with_mask = wordpiece_source(testing::data_path("wordpiece_vocab.txt"));
  EXPECT_EQ(bert_mask_id(with_mask, -1, 1000, 999), 4);
  EXPECT_EQ(bert_mask_id(with_mask, 1000, 1001, 999), 1000);  // an id beyond the vocabulary may be given
  const std::string collision = error_of([&] { bert_mask_id(with_mask, 10, 1000, 999); });
  EXPECT_NE(collision.find("data.mask_token_id: 10 is the token '"), std::string::npos) << collision;
  EXPECT_NE(collision.find("its [MASK] is 4"), std::string::npos) << collision;

  Scratch s;
  const auto vocab = s.dir / "vocab.txt";
  write_text(vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n");
  const DataSource without = wordpiece_source(vocab);
  const std::string missing = error_of([&] { bert_mask_id(without, -1, 6, 5); });
  EXPECT_NE(missing.find("data.mask_token_id: not given, and the wordpiece vocabulary '" + vocab.string() + "' has no [MASK]"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("e.g. 6, with model.vocab_size at least 7"), std::string::npos) << missing;
  EXPECT_EQ(bert_mask_id(without, 6, 7, 5), 6);
}

TEST(MaskToken, TheByteTokenizerKeepsTheLastIdAndRefusesARealByte) {
  DataSource bytes;
  bytes.known = true;
  bytes.vocabulary = make_byte_tokenizer();
  bytes.info = describe_shard({}, *bytes.vocabulary);
  EXPECT_EQ(bert_mask_id(bytes, -1, 257, 255), 256);
  EXPECT_NE(error_of([&] { bert_mask_id(bytes, -1, 256, 200); }).find("model.vocab_size: 256 makes BERT's [MASK] (the last id, 255) byte 255"),
            std::string::npos);
  EXPECT_NE(error_of([&] { bert_mask_id(bytes, 65, 300, 120); }).find("data.mask_token_id: 65 is byte 65 of the byte tokenizer"),
            std::string::npos);
  EXPECT_EQ(bert_mask_id(bytes, 290, 300, 255), 290);
}

TEST(MaskToken, AShardNothingDescribesNeedsTheIdOnceItsIdsGoBeyondBytes) {
  DataSource unknown;
  unknown.path = "data.bin";
  unknown.origin = "the token shard 'data.bin'";
  EXPECT_EQ(bert_mask_id(unknown, -1, 300, 255), 299);  // byte-level ids: the last id, as before
  const std::string e = error_of([&] { bert_mask_id(unknown, -1, 1000, 700); });
  EXPECT_NE(e.find("data.mask_token_id: not given, and nothing says which tokenizer made the token shard 'data.bin'"), std::string::npos) << e;
  EXPECT_EQ(bert_mask_id(unknown, 103, 1000, 700), 103);
}

TEST(DataSource, AShardsSidecarNamesItsTokenizerAndAContradictingDataTokenizerIsAnError) {
  Scratch s;
  const auto shard = s.dir / "wp.bin";
  write_token_shard(shard, std::vector<int32_t>{5, 6, 7, 8});
  DataRequest r{shard, DataFormat::Auto, {}, false, {}};
  EXPECT_EQ(open_data_source(r).tokenizer_name(), "unknown");
  write_shard_info(shard, describe_shard(wordpiece(), *load_tokenizer(wordpiece())));
  const DataSource d = open_data_source(r);
  EXPECT_EQ(d.tokenizer_name(), "wordpiece");
  EXPECT_EQ(bert_mask_id(d, -1, 1000, 8), 4);
  DataRequest declared{shard, DataFormat::Auto, {"wordpiece", {}, {}, true}, true, {}};
  std::filesystem::remove(shard_info_path(shard));
  EXPECT_NE(error_of([&] { bert_mask_id(open_data_source(declared), -1, 1000, 8); }).find("no wordpiece vocabulary is known"),
            std::string::npos);
  declared.tokenizer.vocab = wordpiece().vocab;
  EXPECT_EQ(bert_mask_id(open_data_source(declared), -1, 1000, 8), 4);
  write_shard_info(shard, describe_shard(wordpiece(), *load_tokenizer(wordpiece())));
  r.tokenizer_given = true;  // byte, as the shipped configs say for text, gives way to the sidecar
  std::string note;
  EXPECT_EQ(open_data_source(r, [&](const std::string& l) { note = l; }).tokenizer_name(), "wordpiece");
  EXPECT_NE(note.find("was made by wordpiece"), std::string::npos) << note;
  r.tokenizer = {"gpt2", {}, {}, true};
  EXPECT_NE(error_of([&] { open_data_source(r); }).find("data.tokenizer: gpt2, and '" + shard_info_path(shard).string() +
                                                        "' says the shard '" + shard.string() + "' was made by wordpiece"),
            std::string::npos);
}

TEST(DataSource, RawTextWithWordPieceReadsTheCachedShard) {
  Scratch s;
  const auto text = s.dir / "corpus.txt";
  write_text(text, "the cat sat on the mat\n");
  std::vector<std::string> lines;
  const DataSource d = open_data_source({text, DataFormat::Auto, wordpiece(), true, {}}, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(d.format, DataFormat::Shard);
  EXPECT_EQ(d.tokenizer_name(), "wordpiece");
  EXPECT_EQ(shard_tokens(d.path), load_tokenizer(wordpiece())->encode("the cat sat on the mat\n"));
  lines.clear();
  open_data_source({text, DataFormat::Auto, wordpiece(), true, {}}, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("from the cache"), std::string::npos) << lines[0];
}

TokenizerFiles llama3() { return {"hf", testing::data_path("hf_tokenizers/llama3/tokenizer.json"), {}, true}; }

// JSONL: one document a line, its "text" (other fields ignored, blank lines skipped), each [BOS] tokens EOS;
// the cache keys JSONL apart from the same bytes read as text; a raw text is one document after BOS.
TEST(DataSource, JsonlDocumentsAreEachEndedByEos) {
  Scratch s;
  const auto jsonl = s.dir / "chat.jsonl";
  write_text(jsonl,
             "{\"text\": \"Hello world\", \"id\": 1}\n\n{\"meta\": {}, \"text\": \"Caf\\u00e9 \\u4e2d\\n12345\"}\r\n");
  const auto tok = load_tokenizer(llama3());
  const int32_t bos = tok->bos_id(), eos = tok->eos_id();
  ASSERT_GE(bos, 0);
  ASSERT_GE(eos, 0);
  std::vector<int32_t> want{bos};
  for (int32_t id : tok->encode("Hello world")) want.push_back(id);
  want.push_back(eos), want.push_back(bos);
  for (int32_t id : tok->encode("Caf\u00e9 \u4e2d\n12345")) want.push_back(id);
  want.push_back(eos);
  const DataSource d = open_data_source({jsonl, DataFormat::Auto, llama3(), true, {}});
  EXPECT_EQ(d.tokenizer_name(), "hf");
  EXPECT_EQ(shard_tokens(d.path), want);
  EXPECT_EQ(read_shard_info(d.path)->tokenizer.kind, "hf");
  // The same bytes as text: one document, keyed apart.
  const DataSource as_text = open_data_source({jsonl, DataFormat::Text, llama3(), true, {}});
  EXPECT_NE(as_text.path, d.path);
  std::ifstream in(jsonl, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> text_ids{bos};
  for (int32_t id : tok->encode(bytes)) text_ids.push_back(id);
  EXPECT_EQ(shard_tokens(as_text.path), text_ids);
  EXPECT_NE(token_cache_key(jsonl, llama3(), DataFormat::Jsonl), token_cache_key(jsonl, llama3(), DataFormat::Text));
  EXPECT_EQ(token_cache_key(jsonl, llama3(), DataFormat::Auto), token_cache_key(jsonl, llama3(), DataFormat::Jsonl));
}

// A line that is not JSON, lacks "text" or holds no string there is an error naming the file and the line;
// the byte tokenizer (no EOS to join documents) is refused for JSONL.
TEST(DataSource, BadJsonlLinesAreNamedByFileAndLine) {
  Scratch s;
  const auto jsonl = s.dir / "bad.jsonl";
  const auto error = [&](const std::string& contents, const TokenizerFiles& files) {
    write_text(jsonl, contents);
    return error_of([&] { open_data_source({jsonl, DataFormat::Auto, files, true, s.dir / "cache"}); });
  };
  const std::string at = "data.path: " + jsonl.string() + ":";
  EXPECT_NE(error("{\"text\": \"a\"}\n{\"text\": \"b\"\n", llama3()).find(at + "2: not JSON"), std::string::npos);
  EXPECT_NE(error("{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n", llama3()).find(at + "3: no \"text\" field"),
            std::string::npos);
  EXPECT_NE(error("{\"text\": 7}\n", llama3()).find(at + "1: \"text\" is not a string"), std::string::npos);
  EXPECT_NE(error("[1]\n", wordpiece()).find(at + "1: not a JSON object"),
            std::string::npos);  // [SEP] ends its documents
  EXPECT_NE(error("{\"text\": \"a\"}\n", {}).find("the byte tokenizer has none"), std::string::npos);
  EXPECT_NE(error("{\"text\": \"a\"}\n", gpt2()).find("has none; name it as eos_token"), std::string::npos)
      << "the test's GPT-2 vocabulary has no <|endoftext|>";
}

}  // namespace
}  // namespace ferry::dataset
