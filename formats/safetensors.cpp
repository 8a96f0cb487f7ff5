// Safetensors reader/writer. The reader trusts nothing in the file: header size, JSON, dtypes, shapes
// and offsets are all checked before any tensor is touched, so a malformed file is an error, not a crash.
#include "formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

#include "foundation/precision.h"
#include "foundation/atomic_file.h"
#include "foundation/regular_file.h"

namespace ferry::formats {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes{{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                   {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw std::runtime_error(origin + ": not a valid safetensors file: " + what);
}

// The JSON header, after the 8-byte length that says where it ends and the data section begins.
struct Header {
  nlohmann::json json;
  size_t data_start;
};

Header read_header(const std::vector<std::byte>& bytes, const std::string& origin) {
  if (bytes.size() < 8) fail(origin, "shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8)
    fail(origin, "header length " + std::to_string(header_len) + " exceeds the file (" +
                     std::to_string(bytes.size()) + " bytes)");
  const std::string text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(origin, "header is not a JSON object");
  return {std::move(j), 8 + header_len};
}

std::map<std::string, std::string> read_metadata(const nlohmann::json& v, const std::string& origin) {
  if (!v.is_object()) fail(origin, "__metadata__ is not an object");
  std::map<std::string, std::string> metadata;
  for (const auto& [k, s] : v.items()) {
    if (!s.is_string()) fail(origin, "__metadata__." + k + " is not a string");
    metadata[k] = s.get<std::string>();
  }
  return metadata;
}

// Fills e.shape and returns its element count; `where` names the tensor in errors.
uint64_t read_shape(const nlohmann::json& shape, SafetensorsEntry& e, const std::string& origin, const std::string& where) {
  if (!shape.is_array()) fail(origin, where + "shape is not an array");
  uint64_t numel = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) fail(origin, where + "shape has a negative or non-integer dimension");
    const uint64_t dim = d.get<uint64_t>();
    // Bounded so that numel times any element size still fits in 64 bits.
    if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / dim) fail(origin, where + "shape overflows");
    numel *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  return numel;
}

// Fills e.begin and e.end, checked to lie in the data section and to hold exactly `bytes_needed`.
void read_offsets(const nlohmann::json& off, SafetensorsEntry& e, uint64_t bytes_needed, size_t data_size,
                  const std::string& origin, const std::string& where) {
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(origin, where + "data_offsets must be two non-negative integers");
  e.begin = off[0].get<size_t>();
  e.end = off[1].get<size_t>();
  if (e.begin > e.end || e.end > data_size)
    fail(origin, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] lie outside the data section (" + std::to_string(data_size) + " bytes)");
  if (e.end - e.begin != bytes_needed)
    fail(origin, where + "holds " + std::to_string(e.end - e.begin) + " bytes but its shape and dtype need " +
                     std::to_string(bytes_needed));
}

SafetensorsEntry read_entry(const std::string& name, const nlohmann::json& v, size_t data_size, const std::string& origin) {
  const std::string where = "tensor '" + name + "': ";
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    fail(origin, where + "needs dtype, shape and data_offsets");
  SafetensorsEntry e;
  e.name = name;
  if (!v.at("dtype").is_string()) fail(origin, where + "dtype is not a string");
  e.dtype = v.at("dtype").get<std::string>();
  const size_t esize = dtype_size(e.dtype);
  if (esize == 0) fail(origin, where + "unknown dtype " + e.dtype);
  const uint64_t numel = read_shape(v.at("shape"), e, origin, where);
  read_offsets(v.at("data_offsets"), e, numel * esize, data_size, origin, where);
  return e;
}

// Tensors must not overlap one another (an empty one may sit anywhere).
void check_disjoint(const std::vector<SafetensorsEntry>& entries, const std::string& origin) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->begin < sorted[i - 1]->end && sorted[i]->begin != sorted[i]->end)
      fail(origin, "tensors '" + sorted[i - 1]->name + "' and '" + sorted[i]->name + "' overlap");
}

// A tensor's bytes as the T they hold.
template <class T>
std::vector<T> copy_as(std::span<const std::byte> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// A tensor's bytes read as Stored values, each passed through `convert` (memcpy: the data section need
// not be aligned for Stored).
template <class Stored, class Convert>
auto decode(std::span<const std::byte> bytes, Convert convert) {
  std::vector<decltype(convert(Stored{}))> out(bytes.size() / sizeof(Stored));
  for (size_t i = 0; i < out.size(); ++i) {
    Stored v;
    std::memcpy(&v, bytes.data() + sizeof(Stored) * i, sizeof(Stored));
    out[i] = convert(v);
  }
  return out;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  return parse(read_regular_file_bytes(path, "safetensors"), path.string());
}

SafetensorsFile SafetensorsFile::parse(std::vector<std::byte> bytes, const std::string& origin) {
  SafetensorsFile f;
  f.origin_ = origin;
  const Header header = read_header(bytes, origin);
  f.data_start_ = header.data_start;
  const size_t data_size = bytes.size() - f.data_start_;
  for (const auto& [name, v] : header.json.items()) {
    if (name == "__metadata__")
      f.metadata_ = read_metadata(v, origin);
    else
      f.entries_.push_back(read_entry(name, v, data_size, origin));
  }
  check_disjoint(f.entries_, origin);
  f.bytes_ = std::move(bytes);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const SafetensorsEntry& SafetensorsFile::require(const std::string& name) const {
  const auto* e = find(name);
  if (!e) throw std::runtime_error(origin_ + ": no tensor named '" + name + "'");
  return *e;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const auto& e = require(name);
  const std::span<const std::byte> bytes(bytes_.data() + data_start_ + e.begin, e.end - e.begin);
  if (e.dtype == "F32") return copy_as<float>(bytes);
  if (e.dtype == "BF16") return decode<uint16_t>(bytes, bf16_to_float);
  if (e.dtype == "F16") return decode<uint16_t>(bytes, half_to_float);
  throw std::runtime_error(origin_ + ": tensor '" + name + "' is " + e.dtype + ", expected F32, F16 or BF16");
}

std::vector<int32_t> SafetensorsFile::read_i32(const std::string& name) const {
  const auto& e = require(name);
  const std::span<const std::byte> bytes(bytes_.data() + data_start_ + e.begin, e.end - e.begin);
  if (e.dtype == "I32") return copy_as<int32_t>(bytes);
  if (e.dtype == "I64")
    return decode<int64_t>(bytes, [&](int64_t v) {
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        throw std::runtime_error(origin_ + ": tensor '" + name + "' has a value outside int32");
      return static_cast<int32_t>(v);
    });
  throw std::runtime_error(origin_ + ": tensor '" + name + "' is " + e.dtype + ", expected I32 or I64");
}

void write_safetensors(AtomicFile& out, const std::vector<SafetensorsTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  const auto bytes_of = [](const SafetensorsTensorRef& t) {
    if (!t.raw_dtype.empty()) return t.raw_bytes;
    size_t n = static_cast<size_t>(dtype_bytes(t.dtype));
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    return n;
  };
  for (const auto& t : tensors) {
    if (t.raw_dtype.empty() && t.dtype == DType::I32)
      throw std::logic_error("write_safetensors: " + t.name + " is int32; only fp32, bf16 and fp16 are written");
    const std::string type = !t.raw_dtype.empty() ? t.raw_dtype : t.dtype == DType::BF16 ? "BF16" : t.dtype == DType::F16 ? "F16" : "F32";
    header[t.name] = {{"dtype", type}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes_of(t)}}};
    offset += bytes_of(t);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned, as the format recommends
  const uint64_t len = h.size();
  char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(le, 8);
  out.write(h);
  std::vector<std::byte> transient;
  for (const auto& t : tensors) {
    if (!t.fill) {
      out.write(t.data, bytes_of(t));
      continue;
    }
    transient.resize(bytes_of(t));
    t.fill(transient.data());
    out.write(transient.data(), transient.size());
  }
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  AtomicFile out(path, "safetensors");
  write_safetensors(out, tensors, metadata);
  out.commit();
}

}  // namespace ferry::formats
