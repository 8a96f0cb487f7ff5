// `ferry tokenize`: a text or JSONL file to a token shard (llm.c's format) with the byte, GPT-2 BPE, WordPiece
// or a tokenizer.json's tokenizer, its sidecar (<shard>.json: the tokenizer, its files, [MASK]), and the
// vocabulary size the config then needs. (Training tokenises raw text itself too, through the token cache.)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli/commands.h"
#include "dataset/token_cache.h"
#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"
#include "engine/config.h"
#include "foundation/output_paths.h"
#include "memory/host_buffer.h"
#include "foundation/console.h"

namespace ferry::cli {
namespace {

struct TokenizeArgs {
  std::string kind = "byte", vocab, merges, input, out, max_input = "1GiB", format = "auto";
  bool cased = false;
};

// The shard and its sidecar must not replace a file this run reads (--input X --out X would lose the text).
void refuse_to_overwrite_inputs(const TokenizeArgs& args) {
  using Kind = PathUse::Kind;
  refuse_outputs_over_inputs({{"--input", args.input},
                              {"--vocab", args.vocab},
                              {"--merges", args.merges},
                              {"--out", args.out, Kind::Output},
                              {"--out's sidecar", dataset::shard_info_path(args.out), Kind::Output}});
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

// What the config needs for this vocabulary. BERT's [MASK] is the vocabulary's, which training finds in the
// shard's sidecar; a WordPiece vocabulary without one needs an id of its own beyond it.
void print_config_advice(const TokenizeArgs& args, int vocab_size, int32_t mask) {
  if (args.kind != "wordpiece") {
    console::print("set model.vocab_size to at least {}\n", vocab_size);
    return;
  }
  if (mask >= 0) {
    console::print(
        "set model.vocab_size to at least {}; BERT's [MASK] is {} (the vocabulary's; training reads it from {})\n",
        vocab_size, mask, dataset::shard_info_path(args.out).string());
    return;
  }
  console::print(
      "set model.vocab_size to at least {}; '{}' has no [MASK]: for BERT, set data.mask_token_id: {} and "
      "model.vocab_size: {} "
      "(an id beyond the vocabulary)\n",
      vocab_size, args.vocab, vocab_size, vocab_size + 1);
}

int run_tokenize(const TokenizeArgs& args) {
  if (args.kind == "gpt2" && (args.vocab.empty() || args.merges.empty()))
    throw std::runtime_error("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
  if (args.kind == "wordpiece" && args.vocab.empty()) throw std::runtime_error("--tokenizer wordpiece needs --vocab vocab.txt");
  if (args.kind == "hf" && args.vocab.empty()) throw std::runtime_error("--tokenizer hf needs --vocab tokenizer.json");
  refuse_to_overwrite_inputs(args);
  int64_t limit = 0;
  try {
    limit = engine::parse_bytes(args.max_input);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("--max-input: ") + e.what());
  }
  const dataset::TokenizerFiles files{args.kind, args.vocab, args.merges, !args.cased};
  const auto tokenizer = dataset::load_tokenizer(files);
  const std::string text = read_input(args.input, limit);
  const dataset::DataFormat format = dataset::text_format(args.input, dataset::parse_data_format(args.format));
  const auto ids = dataset::tokenize_data(text, format, *tokenizer, "--input " + args.input,
                                          [](const std::string& line) { console::print("{}\n", line); });
  dataset::write_token_shard(args.out, ids);
  const dataset::ShardInfo info = dataset::describe_shard(files, *tokenizer);
  dataset::write_shard_info(args.out, info);  // what made it: the [MASK] id and the vocabulary for training and export
  console::print("{}: {} bytes -> {} tokens (vocabulary {}); its tokenizer recorded in {}\n", args.out, text.size(),
                 ids.size(), tokenizer->vocab_size(), dataset::shard_info_path(args.out).string());
  print_config_advice(args, tokenizer->vocab_size(), info.mask_token_id);
  if (!dataset::reads_as_token_shard(args.out, dataset::DataFormat::Auto))
    console::print("note: data.path reads a token shard by its .bin name; for '{}' set data.format: shard\n", args.out);
  return 0;
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* tokenize = app.add_subcommand("tokenize",
                                      "Tokenise a text or JSONL file into a token shard (llm.c's format: uint16 "
                                      "ids, uint32 beyond 65535) that data.path can name");
  tokenize
      ->add_option("--tokenizer", args->kind, "byte | gpt2 | wordpiece | hf (a tokenizer.json as it is; default byte)")
      ->check(CLI::IsMember({"byte", "gpt2", "wordpiece", "hf"}));
  tokenize->add_option("--vocab", args->vocab, "gpt2: vocab.json; wordpiece: vocab.txt; hf: tokenizer.json")
      ->check(CLI::ExistingFile);
  tokenize
      ->add_option(
          "--format", args->format,
          "text | jsonl (one document a line, its \"text\" field, each ended by EOS) | auto: jsonl for a *.jsonl "
          "input (default)")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}));
  tokenize->add_flag("--cased", args->cased, "wordpiece: keep case and accents (cased BERT vocabularies)");
  tokenize->add_option("--merges", args->merges, "gpt2: merges.txt")->check(CLI::ExistingFile);
  tokenize->add_option("--input", args->input, "Text or JSONL file")->required()->check(CLI::ExistingFile);
  tokenize->add_option("--out", args->out, "Shard to write (name it *.bin: data.path recognises shards by that)")->required();
  tokenize->add_option("--max-input", args->max_input, "Refuse a larger input, e.g. 4GiB (default 1GiB): it is held in memory");
  return {tokenize, [args] { return run_tokenize(*args); }};
}

}  // namespace ferry::cli
