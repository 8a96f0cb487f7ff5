// Pre-tokenised data shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, the
// token count), then the tokens as uint16. Read by memory mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

namespace ferry::dataset {

constexpr int32_t kShardMagic = 20240520;

// Writes atomically (a temporary file renamed into place). Token ids must fit in uint16.
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens);

// Whether the file starts with the shard magic.
bool is_token_shard(const std::filesystem::path& path);

class TokenShard {
 public:
  // Validates the header and that the file holds exactly the tokens it announces.
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
