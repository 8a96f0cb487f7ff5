// Tokenizers: text to token ids and back. Byte-level (one token per byte), GPT-2's byte-level BPE
// (vocab.json + merges.txt, as Hugging Face and OpenAI ship them), BERT's WordPiece (vocab.txt), and the
// BPE tokenizer.json files of today's decoder models (Llama 2/3, Mistral, Qwen2, SmolLM2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::dataset {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int vocab_size() const = 0;
  // The id of a token of the vocabulary ("[MASK]"), -1 when absent; the token of an id, "" when none.
  // The byte tokenizer has no named tokens.
  virtual int32_t id_of(const std::string& /*token*/) const { return -1; }
  virtual std::string token_of(int32_t /*id*/) const { return {}; }
  // The token put before a text (Llama's <s>, <|begin_of_text|>) and the one that ends a document (it joins
  // documents when packing them); -1 when the tokenizer has none.
  virtual int32_t bos_id() const { return -1; }
  virtual int32_t eos_id() const { return -1; }
  // Whether the parts of a text cut after a newline between two non-space characters encode to the whole
  // text's tokens: true where the pre-tokenizer splits there; not for SentencePiece-style BPE, which marks
  // the start of a text and merges across lines.
  virtual bool encodes_in_parts() const { return true; }
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();
// Errors name the file and what is wrong (malformed JSON, a merge of unknown symbols, ...).
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);

// BERT's WordPiece from vocab.txt; lowercase: the uncased models' lowercasing and accent stripping.
// Encoding adds no [CLS]/[SEP]. Errors name the file (an empty line, a duplicate, no [UNK]).
std::unique_ptr<Tokenizer> load_wordpiece(const std::filesystem::path& vocab_txt, bool lowercase);
// A Hugging Face tokenizer.json's model, when it is one of these (what transformers' BertTokenizer and
// GPT2Tokenizer save): `vocab` and `merges` are its model.vocab and model.merges; `origin` names the file.
std::unique_ptr<Tokenizer> wordpiece_from_json(const nlohmann::json& vocab, const std::string& origin, bool lowercase);
std::unique_ptr<Tokenizer> gpt2_bpe_from_json(const nlohmann::json& vocab, const nlohmann::json& merges, const std::string& origin);
// A Hugging Face tokenizer.json as the `tokenizers` library runs it (data.tokenizer: hf): byte-level BPE behind
// a Split with Llama 3's or Qwen2's pattern, Digits or ByteLevel (Llama 3, Qwen2, SmolLM2, GPT-2), or
// SentencePiece-style BPE with byte fallback (Llama 2, TinyLlama, Mistral: Prepend + Replace normalizer, or
// the Metaspace pre-tokenizer of files converted with legacy: false); its added tokens; BOS and EOS from
// its post-processor and the tokenizer_config.json beside it; the NFC normalizer (Qwen2's). Anything else is
// refused by name (NFD, NFKC, NFKD, Lowercase, a Replace of a regex, ...).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json);
// Whether `file` is a Hugging Face tokenizer.json (a JSON object with a model section), whatever its name:
// Ferry tells one by its name, so under another name it would be read as a vocab.txt or vocab.json.
bool is_tokenizer_json(const std::filesystem::path& file);
// What such a file given where a vocab.txt or vocab.json (`expected`) is read is, and what to give instead.
std::string renamed_tokenizer_json(const std::filesystem::path& file, const std::string& expected);
// The id of a token (e.g. "[MASK]") in a vocab.txt; -1 when absent.
int32_t wordpiece_token_id(const std::filesystem::path& vocab_txt, const std::string& token);

}  // namespace ferry::dataset
