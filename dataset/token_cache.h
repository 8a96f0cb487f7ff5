// Raw text or JSONL tokenised by GPT-2 BPE, WordPiece or a tokenizer.json at start-up, once: the token shard is cached
// in the user's cache folder (or data.cache_dir) and reused while the text, the tokenizer and its files are unchanged
// and the shard still has the checksum it was written with. Also the sidecar `<shard>.json` that says what made a shard
// (ferry tokenize and the cache write one), so a run knows its vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"
#include "foundation/crc32c.h"

namespace ferry::dataset {

// A tokenizer and its files (data.tokenizer, data.vocab, data.merges, data.lowercase).
struct TokenizerFiles {
  std::string kind = "byte";            // byte | gpt2 | wordpiece | hf
  std::filesystem::path vocab, merges;  // gpt2: vocab.json and merges.txt; wordpiece: vocab.txt; hf: tokenizer.json
  bool lowercase = true;                // wordpiece: the uncased models' lowercasing and accent stripping
};
std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerFiles& files);

// What a token shard was made with, as its sidecar records it.
struct ShardInfo {
  TokenizerFiles tokenizer;
  int vocab_size = 0;
  int32_t mask_token_id = -1;  // the vocabulary's [MASK]; -1: it has none
  std::string key;             // the token cache's key; empty for `ferry tokenize`'s shards
  std::optional<FileChecksum> checksum;  // the token cache's: its shard file as written (size, CRC32C)
};
std::filesystem::path shard_info_path(const std::filesystem::path& shard);  // the shard's name + ".json"
ShardInfo describe_shard(const TokenizerFiles& files, const Tokenizer& tokenizer, const std::string& key = {});
void write_shard_info(const std::filesystem::path& shard, const ShardInfo& info);
// nullopt when the shard has no sidecar (llm.c's shards); a damaged sidecar is an error naming it.
std::optional<ShardInfo> read_shard_info(const std::filesystem::path& shard);

using ReportFn = std::function<void(const std::string&)>;

// Tokens of `text` in parts cut after a newline between two non-space characters, where neither GPT-2's
// pre-tokenizer nor WordPiece's split can join across the cut (in one part when the tokenizer could:
// encodes_in_parts); `report` hears of progress every few seconds. (part_bytes: the least length of a part;
// tests make it small.)
std::vector<int32_t> tokenize_in_parts(std::string_view text, const Tokenizer& tokenizer, const ReportFn& report = {},
                                       size_t part_bytes = size_t(1) << 20);

// The tokens of a data file's bytes as `format` (text or jsonl; auto: text) reads them. Text is one document,
// after the tokenizer's BOS if it has one. JSONL is one document a line (blank lines skipped), its "text"
// field (other fields ignored), each as [BOS] tokens EOS: the tokenizer's end-of-text token ends each, so
// packed documents are joined by it. Errors name `origin` and the line (not JSON, no "text" string), or say
// the tokenizer has no EOS to join documents with.
std::vector<int32_t> tokenize_data(std::string_view bytes, DataFormat format, const Tokenizer& tokenizer,
                                   const std::string& origin, const ReportFn& report = {});

// The cache's key: the text file's size and modification time, how it is read (text or jsonl), the
// tokenizer kind and case rule, and the contents of its vocabulary and merges files (and, for a
// tokenizer.json, of the tokenizer_config.json beside it, which names BOS and EOS).
std::string token_cache_key(const std::filesystem::path& text, const TokenizerFiles& files,
                            DataFormat format = DataFormat::Auto);
// cache_dir/<text file name>.<hash of its absolute path>.<kind>.<key>.bin
std::filesystem::path token_cache_path(const std::filesystem::path& text, const std::filesystem::path& cache_dir,
                                       const TokenizerFiles& files, const std::string& key);
// The default cache folder: tokens/ in the user's cache folder (ferry_cache_dir(): $FERRY_CACHE_DIR,
// else $XDG_CACHE_HOME/ferry, else ~/.cache/ferry), never beside the data, which may be a source tree.
std::filesystem::path default_token_cache_dir();

struct CachedTokens {
  std::filesystem::path shard;
  ShardInfo info;
  bool built = false;  // tokenised now; false: reused
};
// The shard of `text` (read as `format`) for `files`: reused when cache_dir holds one with this key whose bytes still
// have the checksum its sidecar records (a shard changed on disk is tokenised again, and `report` says so), else
// tokenised and written there (atomically), replacing the shards of earlier versions of the text (same file
// name and tokenizer).
CachedTokens cached_tokens(const std::filesystem::path& text, const TokenizerFiles& files,
                           const std::filesystem::path& cache_dir, const ReportFn& report = {},
                           DataFormat format = DataFormat::Auto);

}  // namespace ferry::dataset
