// Pre-tokenizers: how byte-level BPE cuts text into the pieces it merges within (GPT-2's pattern, Llama 3's
// and Qwen2's, Hugging Face's Digits), over code points classified by dataset/unicode.h; and GPT-2's map of
// bytes to printable symbols.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::dataset {

enum class SplitPattern {
  Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
           // ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Qwen2,   // Llama 3's with \p{N} alone: digits one by one
  Digits,  // Hugging Face's Digits(individual_digits: true): each \p{N} a piece of its own
};

// The pieces of `text` under `pattern`: byte ranges of it, in order, that cover it.
std::vector<std::string_view> split_pieces(std::string_view text, SplitPattern pattern);

// GPT-2's reversible map of the 256 bytes to printable symbols (UTF-8), which byte-level vocabularies spell.
std::vector<std::string> bytes_to_unicode();

}  // namespace ferry::dataset
