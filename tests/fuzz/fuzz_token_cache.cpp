// libFuzzer target: a token cache entry of any content (the shard `.bin` and its sidecar `.bin.json`, where
// a text tokenised with WordPiece is looked up) is reused or made again, never a crash: the text is opened as
// a run opens data.path, and the tokens it gets are read through. The input: a flags byte, then the records of
// the shard and the sidecar (fuzz_files.h). Flag 1: the harness writes into the sidecar this text's cache key
// and the shard's size and CRC32C, so that mutations get past the checks to the shard's reader as a cache
// hit does; flag 2: no sidecar.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "dataset/data_source.h"
#include "dataset/token_shard.h"
#include "fuzz_files.h"

namespace {

namespace fs = std::filesystem;
using namespace ferry::dataset;

struct Cache {
  fs::path root, text, cache_dir, shard;
  TokenizerFiles tokenizer;
  std::string key;
};

// The text and the vocabulary, written once: the cache key (their sizes, the text's time) stays this process's.
Cache make_cache(const fs::path& root) {
  Cache c{root, root / "train.txt", root / "cache", {}, {"wordpiece", root / "vocab.txt", {}, true}, {}};
  fs::create_directories(c.cache_dir);
  std::ofstream(c.text) << "hello world\nhello fuzz\n";
  std::ofstream(c.tokenizer.vocab) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##z\nfu\n";
  c.key = token_cache_key(c.text, c.tokenizer);
  c.shard = token_cache_path(c.text, c.cache_dir, c.tokenizer, c.key);
  return c;
}

void fix_up_sidecar(const Cache& c) {
  std::ifstream in(shard_info_path(c.shard));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  const ferry::FileChecksum sum = ferry::checksum_file(c.shard);
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", sum.crc32c);
  j["cache_key"] = c.key, j["shard_bytes"] = sum.bytes, j["shard_crc32c"] = crc;
  std::ofstream(shard_info_path(c.shard), std::ios::trunc) << j.dump(2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ferry::fuzz::ScratchDir scratch("ferry_fuzz_token_cache");
  static const Cache cache = make_cache(scratch.path);
  for (const auto& e : fs::directory_iterator(cache.cache_dir))
    fs::remove_all(e.path());  // the last input's, or the rebuilt entry
  const std::string shard = cache.shard.filename().string(), sidecar = shard_info_path(cache.shard).filename().string();
  const char* files[] = {shard.c_str(), sidecar.c_str()};
  const uint8_t flags = ferry::fuzz::write_records(data, size, cache.cache_dir, files);
  if (flags & 2) fs::remove(shard_info_path(cache.shard));
  else if ((flags & 1) && fs::exists(cache.shard)) fix_up_sidecar(cache);
  try {
    const DataSource source = open_data_source({cache.text, DataFormat::Auto, cache.tokenizer, true, cache.cache_dir});
    const TokenShard tokens(source.path);
    uint64_t sum = 0;
    for (int32_t t : tokens.ids()) sum += static_cast<uint32_t>(t);  // every token the header promised
    (void)sum;
  } catch (const std::runtime_error&) {}
  return 0;
}
