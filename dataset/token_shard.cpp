// Token shards: llm.c's header, validated; memory-mapped reads.
#include "dataset/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

namespace {

template <class T>
std::vector<T> narrowed(std::span<const int32_t> tokens) {
  return std::vector<T>(tokens.begin(), tokens.end());
}

}  // namespace

void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) throw std::runtime_error("shard: more than 2^31 tokens; split the input");
  int32_t max_id = 0;
  for (int32_t t : tokens) {
    if (t < 0) throw std::runtime_error("shard: token id " + std::to_string(t) + " is negative");
    max_id = std::max(max_id, t);
  }
  const bool wide = max_id > 65535;
  std::vector<int32_t> header(256, 0);
  header[0] = wide ? kShardMagic32 : kShardMagic, header[1] = wide ? 7 : 1,
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFile out(path, "token shard");
  out.write(header.data(), 1024);
  if (wide) out.write(narrowed<uint32_t>(tokens).data(), tokens.size() * 4);
  else out.write(narrowed<uint16_t>(tokens).data(), tokens.size() * 2);
  out.commit();
}

bool starts_with_shard_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), 4) && (magic == kShardMagic || magic == kShardMagic32);
}

namespace {

// What is wrong with a shard's header, naming the field; empty when it is valid for a file of `size` bytes.
std::string header_problem(const int32_t* header, size_t size) {
  auto field = [](const char* name, int byte, int32_t value) {
    return "header field '" + std::string(name) + "' (int32 at byte " + std::to_string(byte) + ") is " + std::to_string(value);
  };
  if (header[0] != kShardMagic && header[0] != kShardMagic32)
    return field("magic", 0, header[0]) + ", expected " + std::to_string(kShardMagic) + " (uint16 tokens) or " +
           std::to_string(kShardMagic32) + " (uint32)";
  const bool wide = header[0] == kShardMagic32;
  if (header[1] != (wide ? 7 : 1))
    return field("version", 4, header[1]) + (wide ? ", expected 7 (uint32 tokens)" : ", expected 1 (uint16 tokens)");
  const size_t width = wide ? 4 : 2;
  if (header[2] < 0 || 1024 + size_t(header[2]) * width != size)
    return field("token count", 8, header[2]) + " but the file holds " + std::to_string((size - 1024) / width) +
           " tokens" + ((size - 1024) % width ? " and stray bytes" : "");
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
  data_ = static_cast<const char*>(map_) + 1024, count_ = static_cast<size_t>(header[2]),
  wide_ = header[0] == kShardMagic32;
}

std::vector<int32_t> TokenShard::ids() const {
  std::vector<int32_t> out(count_);
  for (size_t i = 0; i < count_; ++i) {
    if (wide_) {
      uint32_t t;
      std::memcpy(&t, data_ + 4 * i, 4);
      out[i] = static_cast<int32_t>(t);
    } else {
      uint16_t t;
      std::memcpy(&t, data_ + 2 * i, 2);
      out[i] = t;
    }
  }
  return out;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

}  // namespace ferry::dataset
