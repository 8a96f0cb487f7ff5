// Safetensors files (Hugging Face's tensor format): a validating reader and an atomic writer.
// Layout: u64 little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "foundation/atomic_file.h"
#include "memory/dtype.h"

namespace ferry::formats {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "I32", "I64", ...
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsFile {
 public:
  // Reads and validates a whole file; every defect is an error naming the file and what is wrong.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Validates bytes already in memory; `origin` names them in errors.
  static SafetensorsFile parse(std::vector<std::byte> bytes, const std::string& origin);

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A tensor's bytes as stored (entry.dtype), in place: for writers that pass tensors through unconverted.
  const std::byte* data(const SafetensorsEntry& entry) const { return bytes_.data() + data_start_ + entry.begin; }

  // A tensor converted to fp32 (from F32, F16 or BF16) or to int32 (from I32 or I64, range-checked).
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<int32_t> read_i32(const std::string& name) const;

 private:
  const SafetensorsEntry& require(const std::string& name) const;
  std::string origin_;
  std::vector<std::byte> bytes_;
  size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const void* data;  // numel(shape) values stored as dtype
  DType dtype = DType::F32;  // F32, BF16 or F16
  // Bytes passed through as another file's entry stored them (any safetensors dtype: I64 position ids, ...):
  // when set, `data` holds raw_bytes bytes of raw_dtype, and `dtype` is not used.
  std::string raw_dtype{};
  size_t raw_bytes = 0;
  // A tensor that lives elsewhere (on a device): when set, `data` is null and fill writes the tensor's bytes
  // into a transient buffer of its size, just before they are written (one such tensor in memory at a time).
  std::function<void(std::byte* out)> fill{};
};

// Writes tensors to `path` atomically (a temporary file renamed into place; removed on failure).
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same into an AtomicFile the caller commits (with the files that belong with it).
void write_safetensors(AtomicFile& out, const std::vector<SafetensorsTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ferry::formats
