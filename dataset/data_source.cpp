// open_data_source: a shard and its sidecar, or a text through the token cache; bert_mask_id: [MASK] from
// the vocabulary, checked against the tokens the data can hold.
#include "dataset/data_source.h"

#include <fmt/format.h>

#include <stdexcept>

namespace ferry::dataset {
namespace {

// data.tokenizer: byte describes text (the shipped configs say it for theirs), not a shard: a shard's tokenizer
// is what its sidecar says, or a gpt2/wordpiece the config names; two different ones are an error.
DataSource open_shard(const DataRequest& r, const ReportFn& report) {
  DataSource s;
  s.path = r.path, s.format = r.format, s.origin = fmt::format("the token shard '{}'", r.path.string());
  const bool given = r.tokenizer_given && r.tokenizer.kind != "byte";
  if (const std::optional<ShardInfo> sidecar = read_shard_info(r.path)) {
    s.known = true, s.info = *sidecar, s.origin = fmt::format("'{}'", shard_info_path(r.path).string());
    const std::string& made_by = sidecar->tokenizer.kind;
    if (given && made_by != r.tokenizer.kind)
      throw std::runtime_error(fmt::format("data.tokenizer: {}, and {} says the shard '{}' was made by {}: set data.tokenizer: {} (or "
                                           "remove the key), or point data.path at the shard of that tokenizer",
                                           r.tokenizer.kind, s.origin, r.path.string(), made_by, made_by));
    if (r.tokenizer_given && !given && made_by != "byte" && report)
      report(fmt::format("data.path: the shard '{}' was made by {} ({} says so); data.tokenizer: byte is for text", r.path.string(),
                         made_by, s.origin));
  }
  if (given) {
    s.known = true, s.info.tokenizer.kind = r.tokenizer.kind;
    // The sidecar's files made the shard; the config's (data.vocab, or model.init_from's) stand in without one.
    const bool sidecar_files = !s.info.tokenizer.vocab.empty() && std::filesystem::exists(s.info.tokenizer.vocab);
    if (!sidecar_files && !r.tokenizer.vocab.empty()) s.info.tokenizer = r.tokenizer;
  }
  if (!s.known) return s;
  const TokenizerFiles& files = s.info.tokenizer;
  const bool files_at_hand = files.kind == "byte" || (!files.vocab.empty() && std::filesystem::exists(files.vocab) &&
                                                      (files.kind != "gpt2" || files.vocab.filename() == "tokenizer.json" ||
                                                       std::filesystem::exists(files.merges)));
  if (files_at_hand) {
    s.vocabulary = load_tokenizer(files);
    const std::string key = s.info.key;
    s.info = describe_shard(files, *s.vocabulary, key);
    if (!files.vocab.empty()) s.origin = fmt::format("'{}'", files.vocab.string());
  }
  return s;
}

}  // namespace

DataSource open_data_source(const DataRequest& r, const ReportFn& report) {
  if (reads_as_token_shard(r.path, r.format)) return open_shard(r, report);
  DataSource s;
  s.known = true;
  if (r.tokenizer.kind == "byte") {
    if (text_format(r.path, r.format) == DataFormat::Jsonl)
      throw std::runtime_error(
          fmt::format("data.path: '{}' is read as JSONL, whose documents are joined with the tokenizer's "
                      "end-of-text token, and the byte tokenizer has none; set data.tokenizer (gpt2, wordpiece "
                      "or hf) and data.vocab, or data.format: text to train on its bytes",
                      r.path.string()));
    s.path = r.path, s.format = r.format, s.origin = "the byte tokenizer";
    s.vocabulary = make_byte_tokenizer();
    s.info = describe_shard(r.tokenizer, *s.vocabulary);
    return s;
  }
  const CachedTokens cached = cached_tokens(
      r.path, r.tokenizer, r.cache_dir.empty() ? default_token_cache_dir() : r.cache_dir, report, r.format);
  if (report && !cached.built) report(fmt::format("data.path: the {} tokens of '{}' from the cache '{}'", r.tokenizer.kind, r.path.string(),
                                                  cached.shard.string()));
  s.path = cached.shard, s.format = DataFormat::Shard, s.info = cached.info, s.origin = fmt::format("'{}'", r.tokenizer.vocab.string());
  s.vocabulary = load_tokenizer(r.tokenizer);
  return s;
}

namespace {

// A given [MASK] id that names a real token: one of the byte tokenizer's bytes, or a vocabulary token other
// than its [MASK] and its unused slots ([unused0], ...).
void check_given_mask(const DataSource& data, int32_t given) {
  const std::string kind = data.tokenizer_name();
  if (kind == "byte" && given < 256)
    throw std::runtime_error(fmt::format("data.mask_token_id: {} is byte {} of the byte tokenizer, a real token of the text, so BERT "
                                         "could not tell [MASK] from it; use an id of 256 or more (below model.vocab_size), or remove "
                                         "the key to use the last id",
                                         given, given));
  if ((kind != "wordpiece" && kind != "gpt2" && kind != "hf") || !data.vocabulary || given >= data.info.vocab_size ||
      given == data.info.mask_token_id)
    return;
  const std::string token = data.vocabulary->token_of(given);
  if (token.empty() || token.starts_with("[unused")) return;
  throw std::runtime_error(fmt::format("data.mask_token_id: {} is the token '{}' of the vocabulary {}, a real token, so BERT could "
                                       "not tell [MASK] from it; {}",
                                       given, token, data.origin,
                                       data.info.mask_token_id >= 0 ? fmt::format("its [MASK] is {}: remove the key to use it",
                                                                                   data.info.mask_token_id)
                                                                    : fmt::format("use an id beyond its {} tokens", data.info.vocab_size)));
}

}  // namespace

int32_t bert_mask_id(const DataSource& data, int32_t given, int model_vocab, int32_t max_data_token) {
  if (given >= 0) {
    check_given_mask(data, given);
    return given;
  }
  const std::string kind = data.tokenizer_name();
  if (kind == "wordpiece" || kind == "gpt2" || kind == "hf") {
    if (data.info.mask_token_id >= 0) return data.info.mask_token_id;
    if (data.info.vocab_size == 0)
      throw std::runtime_error(fmt::format("data.mask_token_id: not given, and no {} vocabulary is known for {} (no sidecar naming one, "
                                           "no data.vocab): set data.vocab to the vocabulary that made it, or data.mask_token_id",
                                           kind, data.origin));
    if (kind != "wordpiece" && model_vocab - 1 >= data.info.vocab_size) return model_vocab - 1;
    throw std::runtime_error(fmt::format("data.mask_token_id: not given, and the {} vocabulary {} has no [MASK] token; add one to it, "
                                         "or set data.mask_token_id to an id beyond its {} tokens (e.g. {}, with model.vocab_size at "
                                         "least {})",
                                         kind, data.origin, data.info.vocab_size, data.info.vocab_size, data.info.vocab_size + 1));
  }
  if (kind == "unknown" && max_data_token >= 256)
    throw std::runtime_error(fmt::format("data.mask_token_id: not given, and nothing says which tokenizer made {} (no sidecar '{}', no "
                                         "data.tokenizer); its ids reach {}, so it is not byte-level and the last id may be a real "
                                         "token: set data.mask_token_id to its vocabulary's [MASK] (ferry tokenize prints it), or "
                                         "data.tokenizer and data.vocab",
                                         data.origin, shard_info_path(data.path).string(), max_data_token));
  const int32_t last = model_vocab - 1;  // byte-level: the id after the bytes (an unknown shard's: the trainer checks its ids)
  if (kind == "byte" && last < 256)
    throw std::runtime_error(fmt::format("model.vocab_size: {} makes BERT's [MASK] (the last id, {}) byte {} of the byte tokenizer, a "
                                         "real token; raise model.vocab_size to at least 257, or set data.mask_token_id",
                                         model_vocab, last, last));
  return last;
}

}  // namespace ferry::dataset
