// `ferry tokenize`: a text file to a uint16 token shard (llm.c's format) with the byte, GPT-2 BPE or
// WordPiece tokenizer, and the vocabulary size (and BERT's [MASK] id) the config then needs.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli/commands.h"
#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"

namespace ferry::cli {
namespace {

struct TokenizeArgs {
  std::string kind = "byte", vocab, merges, input, out;
  bool cased = false;
};

int run_tokenize(const TokenizeArgs& args) {
  if (args.kind == "gpt2" && (args.vocab.empty() || args.merges.empty()))
    throw std::runtime_error("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
  if (args.kind == "wordpiece" && args.vocab.empty()) throw std::runtime_error("--tokenizer wordpiece needs --vocab vocab.txt");
  const auto tokenizer = args.kind == "gpt2"        ? dataset::load_gpt2_bpe(args.vocab, args.merges)
                         : args.kind == "wordpiece" ? dataset::load_wordpiece(args.vocab, !args.cased)
                                                    : dataset::make_byte_tokenizer();
  std::ifstream in(args.input, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = tokenizer->encode(text);
  dataset::write_token_shard(args.out, ids);
  fmt::print("{}: {} bytes -> {} tokens (vocabulary {}); set model.vocab_size to at least {}\n", args.out,
             text.size(), ids.size(), tokenizer->vocab_size(), tokenizer->vocab_size());
  if (args.kind == "wordpiece")
    fmt::print("for BERT, set data.mask_token_id to {} (the vocabulary's [MASK])\n",
               dataset::wordpiece_token_id(args.vocab, "[MASK]"));
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
  tokenize->add_option("--out", args->out, "Shard to write")->required();
  return {tokenize, [args] { return run_tokenize(*args); }};
}

}  // namespace ferry::cli
