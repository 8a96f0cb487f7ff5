// libFuzzer target: a checkpoint dir of any content (state.json, the three safetensors files, ferry-run.json)
// is read as `--resume`, `ferry export` and `ferry sample` read it: a checkpoint or a runtime_error, never a
// crash. The input: a flags byte, then up to five records (u32 little-endian length, bytes), one per file
// in kFiles' order; with flag 1 the harness rewrites state.json's checksums to match the files, so that
// mutations get past them to the safetensors and weight loaders.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "foundation/crc32c.h"
#include "models/registry.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

namespace fs = std::filesystem;
using ferry::crc32c;

constexpr const char* kFiles[] = {"step-00000001/state.json", "step-00000001/model.safetensors",
                                  "step-00000001/optimizer.safetensors", "step-00000001/pending_update.safetensors",
                                  "ferry-run.json"};

std::string hex32(uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof s, "%08x", v);
  return s;
}

// state.json's "files" and "state_crc32c" made to match what was written (where state.json is an object).
void fix_up_checksums(const fs::path& folder) {
  std::ifstream in(folder / "state.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  j["files"] = nlohmann::json::object();
  for (const char* name : {"model.safetensors", "optimizer.safetensors", "pending_update.safetensors"}) {
    if (!fs::exists(folder / name)) continue;
    const auto sum = ferry::checksum_file(folder / name);
    j["files"][name] = {{"bytes", sum.bytes}, {"crc32c", hex32(sum.crc32c)}};
  }
  j.erase("state_crc32c");
  const std::string text = j.dump();
  j["state_crc32c"] = hex32(crc32c(0, std::as_bytes(std::span(text.data(), text.size()))));
  std::ofstream(folder / "state.json", std::ios::trunc) << j.dump(2);
}

// As `ferry export` and `ferry sample` read it, and as --resume reads it into the model it describes.
void read_checkpoint(const fs::path& root) {
  const auto [state, dir] = ferry::formats::read_checkpoint_state(root);
  if (state.model.n_layer <= 0) return;
  const ferry::models::ModelSpec spec = ferry::models::build_model(state.model, 1, 1);
  bool verified = false;
  try {
    (void)ferry::formats::read_checkpoint_weights(dir, state, spec, &verified);
  } catch (const std::runtime_error&) {
    return;  // the weights do not fit the shape: --resume's would not either (its shape is the config's)
  }
  ferry::models::ParameterStore params(spec.params);
  std::vector<float> m(params.values().size()), v(params.values().size());
  (void)ferry::formats::load_checkpoint(dir, spec, params, m, v,
                                        {state.config_hash, state.config, std::numeric_limits<int>::max()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ferry::fuzz::ScratchDir scratch("ferry_fuzz_checkpoint");
  const fs::path& root = scratch.path;
  fs::remove_all(root);
  fs::create_directories(root / "step-00000001");
  const uint8_t flags = ferry::fuzz::write_records(data, size, root, kFiles);
  if (flags & 1) fix_up_checksums(root / "step-00000001");
  try {
    read_checkpoint(root);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
