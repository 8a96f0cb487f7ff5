// Pre-tokenised data shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, the
// token count), then the tokens as uint16. Read by memory mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace ferry::dataset {

constexpr int32_t kShardMagic = 20240520;

// How data.path is read (data.format): `auto` goes by the name (a token shard is `*.bin`, as llm.c's and
// `ferry tokenize`'s are; JSONL `*.jsonl`), never by the bytes: a shard with a damaged header must be an
// error, not text. JSONL: one document a line, its `text` field.
enum class DataFormat { Auto, Text, Shard, Jsonl };
DataFormat parse_data_format(std::string_view format);  // "auto" | "text" | "shard" | "jsonl"
bool reads_as_token_shard(const std::filesystem::path& path, DataFormat format);
// What a file that is not a token shard is read as: Jsonl, or Text (`auto` by the name).
DataFormat text_format(const std::filesystem::path& path, DataFormat format);
std::string_view format_name(DataFormat format);

// Writes atomically (a temporary file renamed into place). Token ids must fit in uint16.
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens);

// Whether the file starts with the shard magic (to catch a shard about to be read as text, not to decide).
bool starts_with_shard_magic(const std::filesystem::path& path);

class TokenShard {
 public:
  // Validates the header and that the file holds exactly the tokens it announces; an error names the file
  // and the header field that is wrong.
  explicit TokenShard(const std::filesystem::path& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  std::span<const uint16_t> tokens() const { return tokens_; }

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::span<const uint16_t> tokens_;
};

}  // namespace ferry::dataset
