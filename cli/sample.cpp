// `ferry sample`: its options, and sample(): a token at a time on the CPU with a key/value cache (ops::Decoder);
// past model.seq_len positions the window slides, its last half fed again. Text goes in and out through the
// run's tokenizer (its files as the checkpoint recorded them), as its data was made.
#include "cli/sample.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "dataset/token_cache.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "engine/ops/decoder.h"
#include "models/registry.h"
#include "foundation/rng.h"
#include "foundation/console.h"

namespace ferry::cli {

namespace {

// A checkpoint of a run that diverged, or a damaged file, samples garbage (nan logits pick token 0 every
// time): say so on stderr, naming the first tensor that is not finite.
void warn_if_not_finite(const models::ModelSpec& spec, const models::ParameterStore& params, const std::filesystem::path& file) {
  for (int p = 0; p < params.count(); ++p) {
    const auto v = params.value(p);
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad == v.end()) continue;
    console::print(
        stderr,
        "ferry: warning: '{}': tensor {} holds {} (element {}): the weights are not finite, so the text below is "
        "meaningless; sample an earlier checkpoint, or retrain with a lower optim.lr\n",
        file.string(), spec.params[p].name, *bad, bad - v.begin());
    return;
  }
}

// A token's text as the byte tokenizer writes it (ids past the bytes: '?').
char text_of(int32_t token) { return static_cast<char>(token < 256 ? token : '?'); }

// The run's tokenizer from the files its checkpoint names (byte: none); gone or changed files say so.
std::unique_ptr<dataset::Tokenizer> run_tokenizer(const formats::TrainState& state, const std::filesystem::path& dir) {
  if (state.tokenizer == "byte") return dataset::make_byte_tokenizer();
  const formats::TrainState::Origin& o = state.origin;
  for (const auto& [file, key] : {std::pair{o.vocab, "data.vocab"}, {o.merges, "data.merges"}}) {
    if (key == std::string("data.merges") && state.tokenizer != "gpt2") continue;
    if (file.empty())
      throw std::runtime_error(
          fmt::format("'{}': the run's tokenizer ({}) is not recorded in its state.json (a checkpoint of an "
                      "earlier build); sample a checkpoint of a run of this version",
                      dir.string(), state.tokenizer));
    if (!std::filesystem::is_regular_file(file))
      throw std::runtime_error(
          fmt::format("'{}': the run's {} '{}' ({} tokenizer) is gone; sampling reads text through it, "
                      "so put it back where the run read it",
                      dir.string(), key, file.string(), state.tokenizer));
  }
  return dataset::load_tokenizer({state.tokenizer, o.vocab, o.merges, o.lowercase});
}

// The ids the model starts from: the prompt's, after the tokenizer's BOS when it puts one before a text (as the
// run's documents were packed); an empty prompt is BOS alone, else the end of a document (GPT-2's way of
// sampling unconditionally), else a newline (the byte tokenizer).
std::vector<int32_t> prompt_ids(const dataset::Tokenizer& t, const std::vector<int32_t>& prompt) {
  std::vector<int32_t> ids;
  if (t.bos_id() >= 0) ids.push_back(t.bos_id());
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  if (ids.empty()) ids.push_back(t.eos_id() >= 0 ? t.eos_id() : '\n');
  return ids;
}

// The text of the tokens generated so far, told as it grows: decoded after the prompt's own tokens (so that
// SentencePiece's space before a word and a character split over byte tokens come out right), and held back
// while it ends in an incomplete character (U+FFFD) or would change what was already told.
class TextStream {
 public:
  TextStream(const dataset::Tokenizer& t, bool bytes, std::vector<int32_t> prompt)
      : t_(t), bytes_(bytes), ids_(std::move(prompt)), prompt_(bytes_ ? 0 : t_.decode(ids_).size()) {}
  // The new text once `token` is generated; "" while it is held back.
  std::string next(int32_t token) {
    ids_.push_back(token);
    if (bytes_) return told_ += text_of(token), std::string(1, text_of(token));
    const std::string text = t_.decode(ids_);
    if (text.ends_with("\xEF\xBF\xBD")) return {};
    return fresh(text);
  }
  // What is left to tell once generation ends (a held-back incomplete character).
  std::string rest() { return bytes_ ? std::string() : fresh(t_.decode(ids_)); }
  const std::string& told() const { return told_; }

 private:
  std::string fresh(const std::string& text) {
    if (text.size() < prompt_ || text.compare(prompt_, told_.size(), told_) != 0) return {};
    std::string added = text.substr(prompt_ + told_.size());
    told_ += added;
    return added;
  }
  const dataset::Tokenizer& t_;
  bool bytes_;
  std::vector<int32_t> ids_;  // the prompt's tokens (no BOS), then those generated
  size_t prompt_;             // the bytes of the prompt's tokens decoded
  std::string told_;
};

// The next token from one position's logits over the V ids of the vocabulary: the most likely at temperature 0,
// else drawn among the top_k (0: all) at the temperature.
int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, Rng& rng, std::vector<double>& probs) {
  int32_t next = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  if (o.temperature <= 0) return next;
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int k = o.top_k > 0 ? std::min<int>(o.top_k, static_cast<int>(V)) : static_cast<int>(V);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  double total = 0;
  for (int i = 0; i < k; ++i) total += probs[i] = std::exp((logits[order[i]] - logits[order[0]]) / o.temperature);
  double u = rng.uniform() * total;
  next = order[k - 1];
  for (int i = 0; i < k; ++i)
    if ((u -= probs[i]) <= 0) return order[i];
  return next;
}

}  // namespace

std::string why_not_sampleable(const formats::TrainState& state) {
  if ((state.model.kind != "gpt2" && state.model.kind != "llama") || state.model.n_layer <= 0)
    return "sampling needs a causal LM's checkpoint (model.kind gpt2 or llama) written by `ferry train`";
  return {};
}

std::string sample(const SampleOptions& o, const std::function<bool(std::string_view)>& on_text,
                   std::vector<int32_t>* generated) {
  if (o.tokens < 0) throw std::invalid_argument(fmt::format("--tokens: {} is out of range; expected an integer >= 0", o.tokens));
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw std::invalid_argument(fmt::format("--temperature: {} is not allowed; expected a finite number >= 0", o.temperature));
  if (o.top_k < 0) throw std::invalid_argument(fmt::format("--top-k: {} is out of range; expected an integer >= 0", o.top_k));
  const auto [state, dir] = formats::read_checkpoint_state(o.checkpoint);
  if (const std::string why = why_not_sampleable(state); !why.empty()) throw std::runtime_error("'" + dir.string() + "': " + why);
  const int64_t T = state.model.seq_len, V = state.model.vocab_size;
  const models::ModelSpec spec = models::build_model(state.model, 1, T);  // with the checkpoint's numeric choices
  bool verified = false;  // a checkpoint of an earlier build records no checksums
  models::ParameterStore params = formats::read_checkpoint_weights(dir, state, spec, &verified);
  if (!verified)
    console::print(stderr,
                   "note: '{}' was written before checkpoints recorded checksums; its weights are not verified\n",
                   dir.string());
  warn_if_not_finite(spec, params, dir / "model.safetensors");
  const std::unique_ptr<dataset::Tokenizer> tokenizer = run_tokenizer(state, dir);
  const bool bytes = state.tokenizer == "byte";
  ops::Decoder decoder(state.model, params);
  // Only the ids the tokenizer can write out are drawn (the byte tokenizer writes '?' for the ids past a byte).
  const int64_t drawn = bytes ? V : std::min<int64_t>(V, tokenizer->vocab_size());

  const std::vector<int32_t> prompt = tokenizer->encode(o.prompt);
  std::vector<int32_t> text = prompt_ids(*tokenizer, prompt);
  bool heard = !on_text || o.prompt.empty() || on_text(o.prompt);  // false: no one takes the text any more
  TextStream stream(*tokenizer, bytes, bytes ? std::vector<int32_t>() : prompt);
  std::span<const float> logits;
  const auto feed_last = [&](int64_t keep) {  // the text's last `keep` tokens, from position 0
    decoder.reset();
    for (auto it = text.end() - std::min<int64_t>(keep, static_cast<int64_t>(text.size())); it != text.end(); ++it)
      logits = decoder.step(*it);
  };
  feed_last(T);
  Rng rng(o.seed);
  std::vector<double> probs(drawn);
  for (int n = 0; n < o.tokens && heard; ++n) {
    const int32_t next = pick_token(logits.data(), drawn, o, rng, probs);
    if (generated) generated->push_back(next);
    if (!bytes && next == tokenizer->eos_id()) break;  // the end of a document: the model is done
    text.push_back(next);
    if (const std::string piece = stream.next(next); on_text && !piece.empty()) heard = on_text(piece);
    if (n + 1 == o.tokens) break;  // nothing more to predict
    if (decoder.position() < decoder.capacity()) logits = decoder.step(next);
    else feed_last(std::max<int64_t>(1, T / 2));  // every position taken: the window slides by half of it
  }
  if (const std::string rest = stream.rest(); on_text && heard && !rest.empty()) on_text(rest);
  return o.prompt + stream.told();
}

Command add_sample(CLI::App& app) {
  struct SampleArgs {
    SampleOptions options;
    std::string checkpoint;
  };
  auto args = std::make_shared<SampleArgs>();
  SampleOptions& o = args->options;
  auto* sample_cmd =
      app.add_subcommand("sample", "Generate text from a GPT-2 or Llama checkpoint written by `ferry train`");
  sample_cmd->add_option("--checkpoint", args->checkpoint, "A checkpoint folder; a run folder or train.checkpoint_dir (its newest); "
                                                           "an experiment folder, e.g. runs/gpt-tiny (its newest run's newest)")
      ->required();
  sample_cmd->add_option("--prompt", o.prompt, "Text to continue");
  sample_cmd->add_option("--tokens", o.tokens, "Tokens to generate (default 200)")->transform(integer_in(0, INT32_MAX));
  sample_cmd->add_option("--temperature", o.temperature, "Softmax temperature; 0 picks the most likely token (default 0.8)")
      ->check(finite_at_least(0, "(0: the most likely token)"));
  sample_cmd->add_option("--top-k", o.top_k, "Sample among the k most likely tokens; 0: all (default 0)")
      ->transform(integer_in(0, INT32_MAX, "(0: the whole vocabulary)"));
  sample_cmd->add_option("--seed", o.seed, "Seed of the sampling (default 1)")->transform(integer_in(0, UINT64_MAX));
  return {sample_cmd,
          [args] {
            args->options.checkpoint = args->checkpoint;
            // printed as it comes: a slow model shows its progress; stdout that takes no more (`| head -1`) stops it
            sample(args->options,
                   [](std::string_view text) { return console::write(stdout, text) && console::flush(stdout); });
            console::write(stdout, "\n");
            return 0;
          },
          true};
}

}  // namespace ferry::cli
