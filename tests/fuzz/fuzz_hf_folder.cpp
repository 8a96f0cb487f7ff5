// libFuzzer target: a Hugging Face model folder of any content (config.json, model.safetensors.index.json,
// its two shards, model.safetensors) is read as model.init_from reads it: the config's model section from
// config.json, then the weights the index lists into the parameters of that model; a model or a runtime_error,
// never a crash. The input: a flags byte, then one record per file in kFiles' order (fuzz_files.h); flag bit k
// (k = 0..4) leaves file k out, so the folder without an index, or without config.json, is read too.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataset/token_shard.h"
#include "engine/config.h"
#include "formats/weights.h"
#include "models/parameter_store.h"
#include "models/registry.h"
#include "fuzz_files.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kFiles[] = {"hf/config.json", "hf/model.safetensors.index.json",
                                  "hf/model-00001-of-00002.safetensors", "hf/model-00002-of-00002.safetensors",
                                  "hf/model.safetensors"};
// config.json may describe any size of model; the reader's work is the same for a small one, and allocating
// a large one's parameters would only measure the machine's memory.
constexpr int64_t kMostParameters = int64_t(1) << 22;

void read_folder(const fs::path& root) {
  const std::string yaml = "model: {init_from: '" + (root / "hf").string() + "', init_missing: [head]}\n" +
                           "data: {path: '" + (root / "train.bin").string() + "'}\n";
  const ferry::engine::Config cfg = ferry::engine::parse_config(yaml, "fuzz.yaml", root);
  const ferry::models::ModelSpec spec = ferry::models::build_model(cfg.model, 1, 1);
  if (spec.param_count() > kMostParameters) return;
  ferry::models::ParameterStore params(spec.params);
  (void)ferry::formats::load_weights(cfg.model.init_from, spec, params, {cfg.model.init_missing});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ferry::fuzz::ScratchDir scratch("ferry_fuzz_hf_folder");
  const fs::path& root = scratch.path;
  fs::remove_all(root);
  fs::create_directories(root / "hf");
  // data.path, which a config needs: tokens that any vocabulary holds (a text would need 256)
  ferry::dataset::write_token_shard(root / "train.bin", std::vector<int32_t>(64, 1));
  const uint8_t flags = ferry::fuzz::write_records(data, size, root, kFiles);
  for (size_t k = 0; k < std::size(kFiles); ++k)
    if (flags & (1u << k)) fs::remove(root / kFiles[k]);
  try {
    read_folder(root);
  } catch (const std::runtime_error&) {}
  return 0;
}
