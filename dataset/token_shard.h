// Pre-tokenised data shards in llm.c's formats: a header of 256 int32 (magic, version, the token count),
// then the tokens: uint16 (GPT-2's: magic 20240520, version 1), or uint32 where an id is beyond 65535 (its
// Llama 3 shards: magic 20240801, version 7; Llama 3's and Qwen2's vocabularies are). Read by memory mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::dataset {

constexpr int32_t kShardMagic = 20240520;    // uint16 tokens
constexpr int32_t kShardMagic32 = 20240801;  // uint32 tokens

// How data.path is read (data.format): `auto` goes by the name (a token shard is `*.bin`, as llm.c's and
// `ferry tokenize`'s are; JSONL `*.jsonl`), never by the bytes: a shard with a damaged header must be an
// error, not text. JSONL: one document a line, its `text` field.
enum class DataFormat { Auto, Text, Shard, Jsonl };
DataFormat parse_data_format(std::string_view format);  // "auto" | "text" | "shard" | "jsonl"
bool reads_as_token_shard(const std::filesystem::path& path, DataFormat format);
// What a file that is not a token shard is read as: Jsonl, or Text (`auto` by the name).
DataFormat text_format(const std::filesystem::path& path, DataFormat format);
std::string_view format_name(DataFormat format);

// Writes atomically (a temporary file renamed into place): uint16 tokens when every id fits, else uint32.
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens);

// Whether the file starts with a shard magic (to catch a shard about to be read as text, not to decide).
bool starts_with_shard_magic(const std::filesystem::path& path);

class TokenShard {
 public:
  // Validates the header and that the file holds exactly the tokens it announces; an error names the file
  // and the header field that is wrong.
  explicit TokenShard(const std::filesystem::path& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  size_t size() const { return count_; }
  std::vector<int32_t> ids() const;

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const char* data_ = nullptr;  // the tokens, after the header
  size_t count_ = 0;
  bool wide_ = false;  // uint32 tokens
};

}  // namespace ferry::dataset
