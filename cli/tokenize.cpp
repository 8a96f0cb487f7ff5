// `ferry tokenize`: a text file to a uint16 token shard (llm.c's format) with the byte, GPT-2 BPE or
// WordPiece tokenizer, and the vocabulary size (and BERT's [MASK] id) the config then needs.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli/commands.h"
#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"
#include "engine/config.h"
#include "memory/host_buffer.h"

namespace ferry::cli {
namespace {

struct TokenizeArgs {
  std::string kind = "byte", vocab, merges, input, out, max_input = "1GiB";
  bool cased = false;
};

// The shard must not replace a file this run reads (--input X --out X would lose the text).
void refuse_to_overwrite_inputs(const TokenizeArgs& args) {
  std::error_code ec;
  if (std::filesystem::is_directory(args.out, ec)) throw std::runtime_error("--out: '" + args.out + "' is a folder; name the shard file");
  for (const auto& [option, path] : {std::pair{"--input", args.input}, {"--vocab", args.vocab}, {"--merges", args.merges}})
    if (!path.empty() && std::filesystem::equivalent(path, args.out, ec))
      throw std::runtime_error(fmt::format("--out: '{}' is the {} file; writing the shard there would destroy it: choose another path",
                                           args.out, option));
}

// The whole input, refused beyond `limit` bytes: the text, its tokens and the shard are all in memory, and
// a device or a pipe (/dev/zero) need not end.
std::string read_input(const std::string& path, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("--input: cannot open '" + path + "': " + std::strerror(errno));
  auto too_big = [&] {
    return std::runtime_error(fmt::format("--input: '{}' holds more than {} (--max-input); tokenize it in parts, one shard each",
                                          path, memory::format_bytes(limit)));
  };
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && static_cast<int64_t>(std::filesystem::file_size(path, ec)) > limit) throw too_big();
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    if (static_cast<int64_t>(text.size()) + in.gcount() > limit) throw too_big();
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error("--input: reading '" + path + "' failed: " + std::strerror(errno));
  return text;
}

// What the config needs for this vocabulary. A WordPiece vocabulary without [MASK] still trains BERT: one
// more id than it has is [MASK] (data.mask_token_id: -1, the default, means the last id).
void print_config_advice(const TokenizeArgs& args, int vocab_size) {
  if (args.kind != "wordpiece") {
    fmt::print("set model.vocab_size to at least {}\n", vocab_size);
    return;
  }
  const int32_t mask = dataset::wordpiece_token_id(args.vocab, "[MASK]");
  if (mask >= 0) {
    fmt::print("set model.vocab_size to at least {}; for BERT, set data.mask_token_id to {} (the vocabulary's [MASK])\n", vocab_size, mask);
    return;
  }
  fmt::print("set model.vocab_size to at least {}; '{}' has no [MASK]: for BERT, set model.vocab_size to {} and leave "
             "data.mask_token_id unset, so that the extra last id is [MASK]\n",
             vocab_size, args.vocab, vocab_size + 1);
}

int run_tokenize(const TokenizeArgs& args) {
  if (args.kind == "gpt2" && (args.vocab.empty() || args.merges.empty()))
    throw std::runtime_error("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
  if (args.kind == "wordpiece" && args.vocab.empty()) throw std::runtime_error("--tokenizer wordpiece needs --vocab vocab.txt");
  refuse_to_overwrite_inputs(args);
  int64_t limit = 0;
  try {
    limit = engine::parse_bytes(args.max_input);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("--max-input: ") + e.what());
  }
  const auto tokenizer = args.kind == "gpt2"        ? dataset::load_gpt2_bpe(args.vocab, args.merges)
                         : args.kind == "wordpiece" ? dataset::load_wordpiece(args.vocab, !args.cased)
                                                    : dataset::make_byte_tokenizer();
  const std::string text = read_input(args.input, limit);
  const auto ids = tokenizer->encode(text);
  dataset::write_token_shard(args.out, ids);
  fmt::print("{}: {} bytes -> {} tokens (vocabulary {})\n", args.out, text.size(), ids.size(), tokenizer->vocab_size());
  print_config_advice(args, tokenizer->vocab_size());
  if (!dataset::reads_as_token_shard(args.out, dataset::DataFormat::Auto))
    fmt::print("note: data.path reads a token shard by its .bin name; for '{}' set data.format: shard\n", args.out);
  return 0;
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* tokenize = app.add_subcommand("tokenize", "Tokenise a text file into a uint16 token shard (llm.c's format) "
                                                  "that data.path can name");
  tokenize->add_option("--tokenizer", args->kind, "byte | gpt2 | wordpiece (default byte)")
      ->check(CLI::IsMember({"byte", "gpt2", "wordpiece"}));
  tokenize->add_option("--vocab", args->vocab, "gpt2: vocab.json; wordpiece: vocab.txt")->check(CLI::ExistingFile);
  tokenize->add_flag("--cased", args->cased, "wordpiece: keep case and accents (cased BERT vocabularies)");
  tokenize->add_option("--merges", args->merges, "gpt2: merges.txt")->check(CLI::ExistingFile);
  tokenize->add_option("--input", args->input, "Text file")->required()->check(CLI::ExistingFile);
  tokenize->add_option("--out", args->out, "Shard to write (name it *.bin: data.path recognises shards by that)")->required();
  tokenize->add_option("--max-input", args->max_input, "Refuse a larger input, e.g. 4GiB (default 1GiB): it is held in memory");
  return {tokenize, [args] { return run_tokenize(*args); }};
}

}  // namespace ferry::cli
