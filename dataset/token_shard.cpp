// Token shards: llm.c's header, validated; memory-mapped reads.
#include "dataset/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::dataset {

void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = kShardMagic, header[1] = 1, header[2] = static_cast<int32_t>(tokens.size());
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) throw std::runtime_error("shard: more than 2^31 tokens; split the input");
  std::vector<uint16_t> data(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535)
      throw std::runtime_error("shard: token id " + std::to_string(tokens[i]) + " does not fit in uint16");
    data[i] = static_cast<uint16_t>(tokens[i]);
  }
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 2));
    if (!out) throw std::runtime_error(tmp.string() + ": write failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

bool is_token_shard(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), 4) && magic == kShardMagic;
}

TokenShard::TokenShard(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot open the token shard");
  const auto size = static_cast<size_t>(std::filesystem::file_size(path));
  if (size < 1024) {
    ::close(fd);
    throw std::runtime_error(path.string() + ": shorter than the 1024-byte shard header");
  }
  map_ = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) throw std::runtime_error(path.string() + ": cannot map the token shard");
  map_bytes_ = size;
  const auto* header = static_cast<const int32_t*>(map_);
  std::string problem;
  if (header[0] != kShardMagic) problem = "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kShardMagic) + ")";
  else if (header[1] != 1) problem = "unsupported version " + std::to_string(header[1]);
  else if (header[2] < 0 || 1024 + size_t(header[2]) * 2 != size)
    problem = "the header announces " + std::to_string(header[2]) + " tokens but the file holds " + std::to_string((size - 1024) / 2);
  if (!problem.empty()) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw std::runtime_error(path.string() + ": not a valid token shard: " + problem);
  }
  tokens_ = {reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + 1024), static_cast<size_t>(header[2])};
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

}  // namespace ferry::dataset
