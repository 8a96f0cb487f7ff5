// A Hugging Face folder is read only where it holds regular files inside itself: a directory, a FIFO, a link
// or an index entry leading out of it is refused by name (never bad_alloc, a hang or /etc/passwd read as
// weights), and a snapshot of the Hugging Face cache, whose files link into the model's blobs/, still loads.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/export.h"
#include "formats/hf_config.h"
#include "formats/hf_source.h"
#include "foundation/regular_file.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "models/gpt2.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::error_without_blocking;

const models::ModelSpec& spec() {
  static const models::ModelSpec s = models::build_gpt2({1, 2, 8, 16, 4}, 1, 4);
  return s;
}

// A folder of the scratch space holding a valid model.safetensors of spec()'s parameters (each holds its index).
struct Folder {
  fs::path root = testing::scratch_path("model_folder"), dir = root / "model";
  std::vector<std::vector<float>> data;

  Folder() {
    fs::remove_all(root);
    fs::create_directories(dir);
    write_weights(dir / "model.safetensors");
  }
  ~Folder() { fs::remove_all(root); }

  void write_weights(const fs::path& path) {
    std::vector<SafetensorsTensorRef> refs;
    data.clear();
    data.reserve(spec().params.size());
    for (size_t i = 0; i < spec().params.size(); ++i) {
      data.emplace_back(models::numel(spec().params[i].shape), float(i));
      refs.push_back({spec().params[i].name, spec().params[i].file_shape(), data.back().data()});
    }
    write_safetensors(path, refs);
  }
  // An index whose weight_map puts every tensor in `shard`.
  void write_index(const std::string& shard) {
    nlohmann::json map;
    for (const auto& p : spec().params) map[p.name] = shard;
    std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  }
  std::string load_error() {
    models::ParameterStore store(spec().params);
    return error_of([&] { load_weights(dir, spec(), store); });
  }
};

void make_fifo(const fs::path& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path; }

TEST(ModelFolder, AWeightsFileThatIsADirectoryIsRefusedByName) {
  Folder f;
  fs::remove(f.dir / "model.safetensors");
  fs::create_directory(f.dir / "model.safetensors");
  const std::string err = f.load_error();
  EXPECT_NE(err.find("model.init_from: '" + (f.dir / "model.safetensors").string() + "' is a directory, not a file"),
            std::string::npos)
      << err;
  // The reader itself refuses one too, whoever names it: no size read off a directory, no bad_alloc.
  EXPECT_NE(error_of([&] { SafetensorsFile::open(f.dir / "model.safetensors"); }).find("is a directory, not a file"),
            std::string::npos);
}

TEST(ModelFolder, AShardThatIsAFifoIsRefusedWithoutWaitingForAWriter) {
  Folder f;
  f.write_index("model-00001-of-00001.safetensors");
  make_fifo(f.dir / "model-00001-of-00001.safetensors");
  const std::string err = error_without_blocking(f.dir / "model-00001-of-00001.safetensors", [&] {
    models::ParameterStore store(spec().params);
    load_weights(f.dir, spec(), store);
  });
  EXPECT_NE(err.find("model.init_from: '" + (f.dir / "model-00001-of-00001.safetensors").string() +
                     "' (named by model.safetensors.index.json) is a FIFO (a named pipe), not a file"),
            std::string::npos)
      << err;
  // Named directly, a FIFO is refused on its open descriptor (opened without blocking), not after a read.
  EXPECT_NE(error_without_blocking(f.dir / "model-00001-of-00001.safetensors",
                                   [&] { read_regular_file(f.dir / "model-00001-of-00001.safetensors", "x"); })
                .find("x: '" + (f.dir / "model-00001-of-00001.safetensors").string() +
                      "' is a FIFO (a named pipe), not a file"),
            std::string::npos);
}

TEST(ModelFolder, AConfigJsonThatIsAFifoOrADirectoryIsRefused) {
  Folder f;
  make_fifo(f.dir / "config.json");
  models::ModelConfig model;
  model.init_from = f.dir;
  const std::string err = error_without_blocking(f.dir / "config.json", [&] { apply_hf_config(model, {}); });
  EXPECT_NE(err.find((f.dir / "config.json").string() + "' is a FIFO (a named pipe), not a file"), std::string::npos)
      << err;
  fs::remove(f.dir / "config.json");
  fs::create_directory(f.dir / "config.json");
  EXPECT_NE(error_of([&] { apply_hf_config(model, {}); }).find("config.json' is a directory, not a file"),
            std::string::npos);
}

TEST(ModelFolder, AnIndexEntryThatLeavesTheFolderIsRefusedBeforeItIsOpened) {
  Folder f;
  for (const std::string shard :
       {"../../../../../../../../etc/passwd", "/etc/passwd", "sub/../../model/model.safetensors"}) {
    f.write_index(shard);
    const std::string err = f.load_error();
    EXPECT_NE(err.find("model.init_from: '" + (f.dir / "model.safetensors.index.json").string() + "' names '" + shard +
                       "', which leaves the folder"),
              std::string::npos)
        << shard << ": " << err;
    EXPECT_EQ(err.find("not a valid safetensors file"), std::string::npos) << "the file was read: " << err;
  }
  f.write_index("./model.safetensors");  // inside, however written
  EXPECT_EQ(f.load_error(), "");
}

TEST(ModelFolder, ALinkOutOfTheFolderIsRefusedAndOneInsideItLoads) {
  Folder f;
  f.write_weights(f.root / "elsewhere.safetensors");
  fs::remove(f.dir / "model.safetensors");
  fs::create_symlink(f.root / "elsewhere.safetensors", f.dir / "model.safetensors");
  const std::string err = f.load_error();
  EXPECT_NE(err.find("model.init_from: '" + (f.dir / "model.safetensors").string() + "' is a link to '" +
                     (f.root / "elsewhere.safetensors").string() + "', outside the folder"),
            std::string::npos)
      << err;
  fs::remove(f.dir / "model.safetensors");
  fs::rename(f.root / "elsewhere.safetensors", f.dir / "weights.bin");
  fs::create_symlink("weights.bin", f.dir / "model.safetensors");
  EXPECT_EQ(f.load_error(), "");
  fs::remove(f.dir / "weights.bin");
  EXPECT_NE(f.load_error().find("is a link to 'weights.bin', which does not exist"), std::string::npos)
      << f.load_error();
}

// huggingface_hub's layout: models--org--name/snapshots/REVISION/<file> -> ../../blobs/<hash>.
TEST(ModelFolder, ASnapshotOfTheHuggingFaceCacheLoadsThroughItsLinksIntoBlobs) {
  Folder f;
  const fs::path repo = f.root / "models--org--tiny", snapshot = repo / "snapshots" / "0123abc";
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  f.write_weights(repo / "blobs" / "9f86d08");
  std::ofstream(repo / "blobs" / "c0ffee") << nlohmann::json{{"model_type", "gpt2"}, {"n_layer", 1}}.dump();
  fs::create_symlink("../../blobs/9f86d08", snapshot / "model.safetensors");
  fs::create_symlink("../../blobs/c0ffee", snapshot / "config.json");
  models::ParameterStore store(spec().params);
  load_weights(snapshot, spec(), store);
  for (int i = 0; i < store.count(); ++i) EXPECT_EQ(store.value(i)[0], float(i)) << spec().params[i].name;
  EXPECT_EQ(hf_config_path(snapshot), snapshot / "config.json");
  EXPECT_EQ(open_hf_weights(snapshot, "--source").files.size(), 1u);
  // The blobs of another model are as far out of the folder as anything else.
  fs::create_directories(f.root / "models--org--other" / "blobs");
  fs::rename(repo / "blobs" / "9f86d08", f.root / "models--org--other" / "blobs" / "9f86d08");
  fs::remove(snapshot / "model.safetensors");
  fs::create_symlink("../../../models--org--other/blobs/9f86d08", snapshot / "model.safetensors");
  EXPECT_NE(error_of([&] { open_hf_weights(snapshot, "--source"); })
                .find("--source: '" + (snapshot / "model.safetensors").string() + "' is a link to '" +
                      (f.root / "models--org--other" / "blobs" / "9f86d08").string() +
                      "', outside the folder and its Hugging Face cache's blobs/"),
            std::string::npos)
      << error_of([&] { open_hf_weights(snapshot, "--source"); });
}

}  // namespace
}  // namespace ferry::formats
