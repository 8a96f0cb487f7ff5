// Token shards: llm.c's header, validated; memory-mapped reads.
#include "dataset/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "foundation/atomic_file.h"

namespace ferry::dataset {

DataFormat parse_data_format(std::string_view format) {
  if (format == "auto") return DataFormat::Auto;
  if (format == "text") return DataFormat::Text;
  if (format == "shard") return DataFormat::Shard;
  if (format == "jsonl") return DataFormat::Jsonl;
  throw std::invalid_argument("data.format: '" + std::string(format) + "' is not one of auto, text, shard, jsonl");
}

bool reads_as_token_shard(const std::filesystem::path& path, DataFormat format) {
  return format == DataFormat::Shard || (format == DataFormat::Auto && path.extension() == ".bin");
}

DataFormat text_format(const std::filesystem::path& path, DataFormat format) {
  if (format == DataFormat::Auto) return path.extension() == ".jsonl" ? DataFormat::Jsonl : DataFormat::Text;
  return format;
}

std::string_view format_name(DataFormat format) {
  switch (format) {
    case DataFormat::Auto: return "auto";
    case DataFormat::Text: return "text";
    case DataFormat::Shard: return "shard";
    case DataFormat::Jsonl: return "jsonl";
  }
  return "?";
}

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
  AtomicFile out(path, "token shard");
  out.write(header.data(), 1024);
  out.write(data.data(), data.size() * 2);
  out.commit();
}

bool starts_with_shard_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), 4) && magic == kShardMagic;
}

namespace {

// What is wrong with a shard's header, naming the field; empty when it is valid for a file of `size` bytes.
std::string header_problem(const int32_t* header, size_t size) {
  auto field = [](const char* name, int byte, int32_t value) {
    return "header field '" + std::string(name) + "' (int32 at byte " + std::to_string(byte) + ") is " + std::to_string(value);
  };
  if (header[0] != kShardMagic) return field("magic", 0, header[0]) + ", expected " + std::to_string(kShardMagic);
  if (header[1] != 1) return field("version", 4, header[1]) + ", expected 1 (uint16 tokens)";
  if (header[2] < 0 || 1024 + size_t(header[2]) * 2 != size)
    return field("token count", 8, header[2]) + " but the file holds " + std::to_string((size - 1024) / 2) + " tokens" +
           ((size - 1024) % 2 ? " and a stray byte" : "");
  return {};
}

}  // namespace

TokenShard::TokenShard(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("'" + path.string() + "': cannot open the token shard: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("'" + path.string() + "': a token shard must be a regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < 1024) {
    ::close(fd);
    throw std::runtime_error("'" + path.string() + "': not a valid token shard: " + std::to_string(size) +
                             " bytes, shorter than the 1024-byte header");
  }
  map_ = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("'" + path.string() + "': cannot map the token shard: " + std::strerror(errno));
  }
  map_bytes_ = size;
  const auto* header = static_cast<const int32_t*>(map_);
  if (const std::string problem = header_problem(header, size); !problem.empty()) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw std::runtime_error("'" + path.string() + "': not a valid token shard: " + problem);
  }
  tokens_ = {reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + 1024), static_cast<size_t>(header[2])};
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

}  // namespace ferry::dataset
