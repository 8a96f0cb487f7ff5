// The token cache: a key from the text's size and mtime and the tokenizer's files, a shard per key in the
// cache folder with its sidecar (which records the shard's checksum), tokenised in parts with a progress line.
#include "dataset/token_cache.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dataset/unicode.h"
#include "foundation/atomic_file.h"
#include "foundation/cache_dir.h"

namespace ferry::dataset {
namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open '{}': {}", what, path.string(), std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(fmt::format("{}: reading '{}' failed: {}", what, path.string(), std::strerror(errno)));
  return bytes;
}

// FNV-1a, 64 bits: stable across builds and platforms (the key names files on disk).
uint64_t fnv1a(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char ch : bytes) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// Whether the character that starts at byte `at` is whitespace to either tokenizer (GPT-2's \\s, BERT's).
bool is_space_at(std::string_view text, size_t at) {
  size_t end = at + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  const std::vector<char32_t> cp = utf8_decode(text.substr(at, end - at));
  return cp.size() != 1 || classify(cp[0]) == CharClass::Space || is_whitespace(cp[0]);
}

// The start of the character that ends just before byte `at`.
size_t previous_char(std::string_view text, size_t at) {
  size_t i = at - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

// The end of the part starting at `from`, at least `target` bytes long where the text allows: just after a
// '\n' between two characters that are not whitespace (a lone newline is its own piece for GPT-2's pattern,
// and a word boundary for WordPiece), so the parts' tokens are the whole text's.
size_t part_end(std::string_view text, size_t from, size_t target) {
  for (size_t i = from + target; i + 1 < text.size(); ++i)
    if (text[i] == '\n' && i > from && !is_space_at(text, previous_char(text, i)) && !is_space_at(text, i + 1)) return i + 1;
  return text.size();
}

// A Hugging Face tokenizer.json, when it is what BertTokenizer or GPT2Tokenizer saves: a WordPiece model
// behind BERT's normaliser and pre-tokenizer, or a BPE model behind the byte-level pre-tokenizer. Its added
// tokens ([MASK], <mask>, ...) join the vocabulary. Anything else is an error naming what differs.
std::unique_ptr<Tokenizer> load_tokenizer_json(const TokenizerFiles& f) {
  const std::string origin = f.vocab.string();
  const json j = json::parse(read_file(f.vocab, "data.vocab"), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw std::runtime_error(origin + ": not a Hugging Face tokenizer.json (no model)");
  const json& model = j["model"];
  const std::string want = f.kind == "wordpiece" ? "WordPiece" : "BPE";
  const auto type_of = [&](const char* key) { return j.contains(key) && j[key].is_object() ? j[key].value("type", "") : std::string(); };
  const bool simple = f.kind == "wordpiece" ? type_of("pre_tokenizer") == "BertPreTokenizer" && type_of("normalizer") == "BertNormalizer"
                                            : type_of("pre_tokenizer") == "ByteLevel";
  if (model.value("type", "") != want || !simple)
    throw std::runtime_error(
        fmt::format("{}: a {} model behind the {} pre-tokenizer, which Ferry's {} does not reproduce (it reads "
                    "what BertTokenizer and GPT2Tokenizer save); set data.tokenizer: hf to read it as the "
                    "tokenizer.json it is, or give data.vocab as vocab.txt or vocab.json + merges.txt",
                    origin, model.value("type", "?"), type_of("pre_tokenizer"), f.kind));
  json vocab = model.value("vocab", json::object());
  for (const auto& added : j.value("added_tokens", json::array()))
    if (added.is_object() && added.contains("content") && !vocab.contains(added["content"].get<std::string>()))
      vocab[added["content"].get<std::string>()] = added.value("id", -1);
  if (f.kind == "gpt2") return gpt2_bpe_from_json(vocab, model.value("merges", json::array()), origin);
  return wordpiece_from_json(vocab, origin, j["normalizer"].value("lowercase", f.lowercase));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerFiles& f) {
  if (f.kind == "hf") return load_hf_tokenizer(f.vocab);
  if (f.kind != "byte" && f.vocab.filename() == "tokenizer.json") return load_tokenizer_json(f);
  if (f.kind == "gpt2") return load_gpt2_bpe(f.vocab, f.merges);
  if (f.kind == "wordpiece") return load_wordpiece(f.vocab, f.lowercase);
  if (f.kind == "byte") return make_byte_tokenizer();
  throw std::invalid_argument("data.tokenizer: '" + f.kind + "' is not one of byte, gpt2, wordpiece, hf");
}

std::filesystem::path shard_info_path(const std::filesystem::path& shard) { return shard.string() + ".json"; }

ShardInfo describe_shard(const TokenizerFiles& files, const Tokenizer& tokenizer, const std::string& key) {
  ShardInfo info{files, tokenizer.vocab_size(), tokenizer.id_of("[MASK]"), key, {}};
  if (info.mask_token_id < 0) info.mask_token_id = tokenizer.id_of("<mask>");  // RoBERTa's spelling, in BPE vocabularies
  for (auto* path : {&info.tokenizer.vocab, &info.tokenizer.merges})
    if (!path->empty()) *path = std::filesystem::absolute(*path).lexically_normal();
  return info;
}

void write_shard_info(const std::filesystem::path& shard, const ShardInfo& info) {
  const TokenizerFiles& t = info.tokenizer;
  json j{{"tokenizer", t.kind}, {"vocab_size", info.vocab_size}};
  if (!t.vocab.empty()) j["vocab"] = t.vocab.string();
  if (!t.merges.empty()) j["merges"] = t.merges.string();
  if (t.kind == "wordpiece") j["lowercase"] = t.lowercase;
  if (info.mask_token_id >= 0) j["mask_token_id"] = info.mask_token_id;
  if (!info.key.empty()) j["cache_key"] = info.key;
  if (info.checksum)
    j["shard_bytes"] = info.checksum->bytes, j["shard_crc32c"] = fmt::format("{:08x}", info.checksum->crc32c);
  write_file_atomically(shard_info_path(shard), j.dump(2) + "\n", "token shard sidecar");
}

std::optional<ShardInfo> read_shard_info(const std::filesystem::path& shard) {
  const std::filesystem::path path = shard_info_path(shard);
  if (!std::filesystem::exists(path)) return std::nullopt;
  const json j = json::parse(read_file(path, "data.path"), nullptr, false);
  const auto bad = [&](const std::string& what) {
    return std::runtime_error(fmt::format("'{}' (what made the token shard '{}') {}; delete it, or write the shard again with "
                                          "ferry tokenize", path.string(), shard.string(), what));
  };
  if (j.is_discarded() || !j.is_object()) throw bad("is not a JSON object");
  ShardInfo info;
  try {
    info.tokenizer.kind = j.at("tokenizer").get<std::string>();
    info.tokenizer.vocab = j.value("vocab", std::string());
    info.tokenizer.merges = j.value("merges", std::string());
    info.tokenizer.lowercase = j.value("lowercase", true);
    info.vocab_size = j.value("vocab_size", 0);
    info.mask_token_id = j.value("mask_token_id", -1);
    info.key = j.value("cache_key", std::string());
    if (j.contains("shard_crc32c")) {
      const std::string crc = j.at("shard_crc32c").get<std::string>();
      if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw bad("holds shard_crc32c \"" + crc + "\", not 8 lowercase hex digits");
      info.checksum =
          FileChecksum{j.at("shard_bytes").get<uint64_t>(), static_cast<uint32_t>(std::stoul(crc, nullptr, 16))};
    }
  } catch (const json::exception& e) {
    throw bad(std::string("is malformed (") + e.what() + ")");
  }
  if (info.tokenizer.kind != "byte" && info.tokenizer.kind != "gpt2" && info.tokenizer.kind != "wordpiece" &&
      info.tokenizer.kind != "hf")
    throw bad("names tokenizer '" + info.tokenizer.kind + "', not byte, gpt2, wordpiece or hf");
  return info;
}

namespace {

// Progress of a tokenisation, every few seconds.
class Progress {
 public:
  Progress(const ReportFn& report, size_t total) : report_(report), total_(total) {}
  void at(size_t done, size_t tokens) {
    if (!report_ || Clock::now() - last_ < std::chrono::seconds(2)) return;
    last_ = Clock::now();
    const double s = std::chrono::duration<double>(last_ - t0_).count();
    report_(fmt::format("tokenising: {:.0f}% ({:.1f} of {:.1f} MB, {} tokens, {:.1f} MB/s)", 100.0 * done / total_,
                        done / 1e6, total_ / 1e6, tokens, done / 1e6 / s));
  }

 private:
  using Clock = std::chrono::steady_clock;
  const ReportFn& report_;
  size_t total_;
  Clock::time_point t0_ = Clock::now(), last_ = t0_;
};

// JSONL: each line's "text" as a document, [BOS] tokens EOS.
std::vector<int32_t> tokenize_jsonl(std::string_view bytes, const Tokenizer& tokenizer, const std::string& origin,
                                    const ReportFn& report) {
  if (tokenizer.eos_id() < 0)
    throw std::runtime_error(
        fmt::format("{}: JSONL documents are joined with the tokenizer's end-of-text token, and this tokenizer has "
                    "none; name it as eos_token in a tokenizer_config.json beside the tokenizer.json, or use "
                    "data.tokenizer gpt2 (<|endoftext|>), wordpiece ([SEP]) or hf",
                    origin));
  std::vector<int32_t> ids;
  Progress progress(report, bytes.size());
  size_t line_no = 0;
  for (size_t from = 0; from < bytes.size();) {
    const size_t nl = std::min(bytes.find('\n', from), bytes.size());
    std::string_view line = bytes.substr(from, nl - from);
    from = nl + 1, ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json doc;
    try {
      doc = json::parse(line);
    } catch (const json::parse_error& e) {
      throw std::runtime_error(
          fmt::format("{}:{}: not JSON ({}); JSONL holds one JSON object a line", origin, line_no, e.what()));
    }
    if (!doc.is_object() || !doc.contains("text") || !doc["text"].is_string())
      throw std::runtime_error(
          fmt::format("{}:{}: {}; each line must be an object with the document in a \"text\" string", origin, line_no,
                      !doc.is_object()        ? "not a JSON object"
                      : !doc.contains("text") ? "no \"text\" field"
                                              : "\"text\" is not a string"));
    if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
    const std::vector<int32_t> doc_ids = tokenizer.encode(doc["text"].get<std::string>());
    ids.insert(ids.end(), doc_ids.begin(), doc_ids.end());
    ids.push_back(tokenizer.eos_id());
    progress.at(std::min(from, bytes.size()), ids.size());
  }
  return ids;
}

}  // namespace

std::vector<int32_t> tokenize_in_parts(std::string_view text, const Tokenizer& tokenizer, const ReportFn& report,
                                       size_t part_bytes) {
  if (!tokenizer.encodes_in_parts()) part_bytes = text.size();  // one part: a cut would change the tokens
  Progress progress(report, text.size());
  std::vector<int32_t> ids;
  for (size_t from = 0; from < text.size();) {
    const size_t to = part_end(text, from, part_bytes);
    const std::vector<int32_t> part = tokenizer.encode(text.substr(from, to - from));
    ids.insert(ids.end(), part.begin(), part.end());
    from = to;
    progress.at(from, ids.size());
  }
  return ids;
}

std::vector<int32_t> tokenize_data(std::string_view bytes, DataFormat format, const Tokenizer& tokenizer,
                                   const std::string& origin, const ReportFn& report) {
  if (format == DataFormat::Jsonl) return tokenize_jsonl(bytes, tokenizer, origin, report);
  std::vector<int32_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const std::vector<int32_t> text = tokenize_in_parts(bytes, tokenizer, report);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

std::string token_cache_key(const std::filesystem::path& text, const TokenizerFiles& f, DataFormat format) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(text, ec);
  if (ec) throw std::runtime_error("data.path: cannot read the size of '" + text.string() + "': " + ec.message());
  const auto mtime = std::filesystem::last_write_time(text, ec).time_since_epoch().count();
  if (ec) throw std::runtime_error("data.path: cannot read the modification time of '" + text.string() + "': " + ec.message());
  uint64_t h = fnv1a(fmt::format("ferry token cache v1|{}|{}|{}|{}|", f.kind, f.lowercase, size, mtime));
  // Text keeps the key it had before JSONL was read; JSONL's documents are framed by BOS and EOS.
  if (text_format(text, format) == DataFormat::Jsonl) h = fnv1a("format|jsonl|", h);
  if (!f.vocab.empty()) h = fnv1a(read_file(f.vocab, "data.vocab"), fnv1a("vocab|", h));
  if (!f.merges.empty()) h = fnv1a(read_file(f.merges, "data.merges"), fnv1a("merges|", h));
  const std::filesystem::path config = f.vocab.parent_path() / "tokenizer_config.json";
  if (f.kind == "hf") h = fnv1a("nfc|", h);  // tokens of hf files cached before NFC was applied are not reused
  if (f.kind == "hf" && std::filesystem::exists(config))
    h = fnv1a(read_file(config, "data.vocab's tokenizer_config.json"), fnv1a("config|", h));
  return fmt::format("{:016x}", h);
}

namespace {

// What every cached shard of this text and tokenizer is named from: the text's name, a hash of its absolute
// path (two train.txt in one data.cache_dir are two texts), the tokenizer.
std::string cache_prefix(const std::filesystem::path& text, const std::string& kind) {
  const std::string where = std::filesystem::absolute(text).lexically_normal().string();
  return fmt::format("{}.{:08x}.{}.", text.filename().string(), fnv1a(where) & 0xffffffffu, kind);
}

}  // namespace

std::filesystem::path token_cache_path(const std::filesystem::path& text, const std::filesystem::path& cache_dir,
                                       const TokenizerFiles& files, const std::string& key) {
  return cache_dir / (cache_prefix(text, files.kind) + key + ".bin");
}

std::filesystem::path default_token_cache_dir() { return ferry_cache_dir() / "tokens"; }

namespace {

// A cached shard whose sidecar carries the key: the shard was renamed into place before its sidecar, so a
// sidecar means a complete shard; and its bytes must still have the checksum the sidecar records (a cache
// of an earlier build records none: it is made again).
std::optional<CachedTokens> reuse(const std::filesystem::path& shard, const std::string& key, const ReportFn& report) {
  if (!std::filesystem::exists(shard)) return std::nullopt;
  std::optional<ShardInfo> info;
  try {
    info = read_shard_info(shard);
    if (!info || info->key != key || !info->checksum) return std::nullopt;
    const TokenShard check(shard);  // a damaged header is rebuilt, not read
    const FileChecksum now = checksum_file(shard);
    if (now.bytes != info->checksum->bytes || now.crc32c != info->checksum->crc32c) {
      if (report)
        report(
            fmt::format("data.path: the cached tokens '{}' changed on disk since they were written (CRC32C {:08x}, "
                        "recorded {:08x}); "
                        "tokenising again",
                        shard.string(), now.crc32c, info->checksum->crc32c));
      return std::nullopt;
    }
  } catch (const std::runtime_error&) {
    return std::nullopt;
  }
  return CachedTokens{shard, *info, false};
}

// The shards of earlier versions of the text (or of earlier tokenizer files), which no run will read again.
void remove_stale(const std::filesystem::path& cache_dir, const std::filesystem::path& keep, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(cache_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path() == keep || e.path() == shard_info_path(keep) || !name.starts_with(prefix)) continue;
    if (name.ends_with(".bin") || name.ends_with(".bin.json")) std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace

CachedTokens cached_tokens(const std::filesystem::path& text, const TokenizerFiles& files,
                           const std::filesystem::path& cache_dir, const ReportFn& report, DataFormat format) {
  format = text_format(text, format);
  const std::string key = token_cache_key(text, files, format);
  const std::filesystem::path shard = token_cache_path(text, cache_dir, files, key);
  if (auto cached = reuse(shard, key, report)) return *cached;
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("data.cache_dir: cannot create '{}' for the tokens of '{}': {}; set data.cache_dir to a "
                                         "writable folder",
                                         cache_dir.string(), text.string(), ec.message()));
  const auto tokenizer = load_tokenizer(files);
  const std::string bytes = read_file(text, "data.path");
  if (report)
    report(fmt::format("data.path: tokenising '{}' ({:.1f} MB, {}) with {} into {}", text.string(), bytes.size() / 1e6,
                       format_name(format), files.kind, shard.string()));
  const std::vector<int32_t> ids = tokenize_data(bytes, format, *tokenizer, "data.path: " + text.string(), report);
  CachedTokens out{shard, describe_shard(files, *tokenizer, key), true};
  try {
    write_token_shard(shard, ids);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("data.path: writing the tokens of '{}' to the cache '{}' failed: {}", text.string(),
                                         shard.string(), e.what()));
  }
  out.info.checksum = checksum_file(shard);  // what reached the file, read back
  write_shard_info(shard, out.info);  // last: its key marks the shard complete
  remove_stale(cache_dir, shard, cache_prefix(text, files.kind));
  return out;
}

}  // namespace ferry::dataset
