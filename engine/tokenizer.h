// Tokenizers: text to token ids and back. Byte-level (one token per byte) and GPT-2's byte-level BPE
// (vocab.json + merges.txt, as Hugging Face and OpenAI ship them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::engine {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int vocab_size() const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();
// Errors name the file and what is wrong (malformed JSON, a merge of unknown symbols, ...).
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);

}  // namespace ferry::engine
