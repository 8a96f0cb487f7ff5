// Checkpoints on disk: CRC32C against published values, state.json's range checks over the committed
// corpus of bad files, checksums that catch changed files, and checkpoint dirs whose rotation, newest
// checkpoint and overwriting concern only the folders their run's ferry-run.json lists.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/checkpoint_dir.h"
#include "foundation/crc32c.h"
#include "models/registry.h"
#include "foundation/rng.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

uint32_t crc_of(const std::string& s) { return crc32c(0, std::as_bytes(std::span(s.data(), s.size()))); }

// Bit by bit, as the polynomial defines it: the reference for the table and the SSE4.2 paths.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t crc = ~0u;
  for (unsigned char ch : s) {
    crc ^= ch;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32c, MatchesPublishedValues) {
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720, B.4
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  std::iota(ascending.begin(), ascending.end(), '\0');
  EXPECT_EQ(crc_of(ascending), 0x46DD794Eu);
}

TEST(Crc32c, AnySplitGivesTheWholesChecksum) {
  Rng rng(3);
  std::string bytes(1000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng.uniform() * 256);
  const uint32_t whole = crc_of(bytes);
  EXPECT_EQ(whole, crc32c_bitwise(bytes));
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    const auto all = std::as_bytes(std::span(bytes.data(), bytes.size()));
    EXPECT_EQ(crc32c(crc32c(0, all.first(cut)), all.subspan(cut)), whole) << cut;
  }
  const auto path = testing::scratch_path("crc.bin");
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(checksum_file(path).crc32c, whole);
  EXPECT_EQ(checksum_file(path).bytes, 1000u);
  std::filesystem::remove(path);
}

using testing::file_text;

// Each bad state.json of the corpus (named FIELD--what.json) is refused with an error that names FIELD
// first (dashes read as spaces: "it-is-not-a-JSON-object"); each good one parses.
TEST(TrainState, TheCorpusOfBadStateFilesIsRefusedNamingTheField) {
  int bad = 0, good = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::source_path("tests/fuzz/corpus/checkpoint_state"))) {
    const std::string name = e.path().filename().string();
    std::string field = name.substr(0, name.find("--"));
    std::replace(field.begin(), field.end(), '-', ' ');
    if (field == "good") {
      EXPECT_NO_THROW(parse_train_state(file_text(e.path()), name)) << name;
      ++good;
      continue;
    }
    try {
      parse_train_state(file_text(e.path()), name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const std::runtime_error& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("'" + name + "' is damaged: " + field), std::string::npos) << name << ": " << what;
    }
    ++bad;
  }
  EXPECT_GE(bad, 30);
  EXPECT_GE(good, 3);
}

// A tiny GPT-2 with deterministic weights and moments.
struct Tiny {
  models::ModelConfig model{"gpt2", 1, 2, 8, 16, 4, {}, {}};
  models::ModelSpec spec = models::build_model(model, 1, 4);
  models::ParameterStore params{spec.params};
  std::vector<float> m, v;
  Tiny() {
    for (size_t i = 0; i < params.values().size(); ++i) params.values()[i] = 0.001f * static_cast<float>(i % 997);
    m.assign(params.values().size(), 0.25f);
    v.assign(params.values().size(), 0.5f);
    for (int i = 0; i < params.count(); ++i) {  // a padded vocabulary's rows stay zero in the engine (models/vocab.h)
      const auto value = params.value(i);
      const auto at = static_cast<size_t>(value.data() - params.values().data());
      for (size_t e = static_cast<size_t>(models::numel(spec.params[i].file_shape())); e < value.size(); ++e)
        value[e] = 0.0f, m[at + e] = 0.0f, v[at + e] = 0.0f;
    }
  }
  TrainState state(int64_t step) const {
    TrainState s;
    s.step = step;
    s.optimizer_steps = step;
    s.config_hash = "0123456789abcdef";
    s.model = model;
    s.config = {{"optim.lr", "0.001"}, {"train.steps", "10"}};
    return s;
  }
};

std::vector<std::string> entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

using testing::error_of;

TEST(Checkpoint, RoundTripsWithChecksumsThatCatchAnyChangedFile) {
  const auto root = testing::scratch_path("ckpt-roundtrip");
  std::filesystem::remove_all(root);
  const Tiny t;
  TrainState s = t.state(3);
  s.val_loss = 2.5;
  const auto folder = save_checkpoint(root, t.spec, t.params, t.m, t.v, s, 2);
  EXPECT_EQ(folder, root / "step-00000003");
  const auto [read, dir] = read_checkpoint_state(root);
  EXPECT_EQ(dir, folder);
  EXPECT_EQ(read.step, 3);
  EXPECT_EQ(read.val_loss, 2.5);
  EXPECT_EQ(read.config, s.config);
  EXPECT_FALSE(read.run_id.empty());
  ASSERT_EQ(read.files.size(), 2u);
  EXPECT_EQ(read.files.at("model.safetensors").bytes, std::filesystem::file_size(folder / "model.safetensors"));
  EXPECT_TRUE(verify_checkpoint_file(dir, read, "optimizer.safetensors"));

  Tiny back;
  std::fill(back.m.begin(), back.m.end(), 0.0f);
  load_checkpoint(root, back.spec, back.params, back.m, back.v, {"0123456789abcdef", s.config, 10});
  for (int i = 0; i < t.params.count(); ++i) {
    EXPECT_TRUE(std::equal(back.params.value(i).begin(), back.params.value(i).end(), t.params.value(i).begin())) << i;
    const size_t at = static_cast<size_t>(t.params.value(i).data() - t.params.values().data());
    EXPECT_EQ(back.m[at], t.m[at]);
    EXPECT_TRUE(std::equal(back.v.begin() + at, back.v.begin() + at + t.params.value(i).size(), t.v.begin() + at)) << i;
  }

  // One byte of the moments changed: named, with both checksums.
  std::string optimizer = file_text(folder / "optimizer.safetensors");
  optimizer[optimizer.size() - 3] ^= 1;
  std::ofstream(folder / "optimizer.safetensors", std::ios::binary | std::ios::trunc) << optimizer;
  const std::string what = error_of([&] { load_checkpoint(root, back.spec, back.params, back.m, back.v, {"0123456789abcdef", s.config, 10}); });
  EXPECT_NE(what.find("optimizer.safetensors' is damaged: its CRC32C is "), std::string::npos) << what;
  // A truncated one: named by its size.
  std::filesystem::resize_file(folder / "model.safetensors", 100);
  bool verified = false;
  const std::string truncated = error_of([&] { read_checkpoint_weights(dir, read, t.spec, &verified); });
  EXPECT_NE(truncated.find("model.safetensors' is damaged: it has 100 bytes, state.json records "), std::string::npos) << truncated;
  std::filesystem::remove_all(root);
}

// What a resume restores from state.json comes back as written, none of it at its default: the updates applied
// (fewer than the steps: fp16 skipped some), fp16's loss scale and its progress toward growing, the delayed update
// with the parameters the device tier updated itself, a tied Llama's choices with q/k/v biases. A checkpoint past
// train.steps is refused from one step beyond it, and a file that grew is named by its size.
TEST(Checkpoint, StateJsonKeepsEveryCountAndChoiceAResumeNeeds) {
  const auto dir = testing::scratch_path("ckpt-state");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Tiny t;
  TrainState s = t.state(5);
  s.optimizer_steps = 3;
  s.loss_scale = 4096;
  s.loss_scale_good_steps = 17;
  s.pending = TrainState::PendingUpdate{4, 0.002, 0.75, 0.5f, false, {"transformer.wte.weight"}};
  s.model = {"llama", 2, 4, 32, 67, 128, {}, {}};
  s.model.n_kv_head = 2, s.model.intermediate_size = 48, s.model.rope_theta = 1e6;
  s.model.tie_word_embeddings = true, s.model.attention_bias = true;
  write_checkpoint_files(dir, t.spec, views_of(t.params, t.m, t.v), s);

  const auto [read, where] = read_checkpoint_state(dir);
  EXPECT_EQ(read.step, 5);
  EXPECT_EQ(read.optimizer_steps, 3);
  EXPECT_EQ(read.loss_scale, 4096);
  EXPECT_EQ(read.loss_scale_good_steps, 17);
  ASSERT_TRUE(read.pending.has_value());
  EXPECT_EQ(read.pending->adam_step, 4);
  EXPECT_EQ(read.pending->lr, 0.002);
  EXPECT_EQ(read.pending->grad_norm, 0.75);
  EXPECT_EQ(read.pending->grad_scale, 0.5f);
  EXPECT_FALSE(read.pending->skipped);
  EXPECT_EQ(read.pending->updated_in_step, s.pending->updated_in_step);
  EXPECT_EQ(read.model.kind, "llama");
  EXPECT_EQ(models::choices_of(read.model), models::choices_of(s.model));
  EXPECT_TRUE(read.model.tie_word_embeddings);
  EXPECT_TRUE(read.model.attention_bias);

  const ResumeCheck same{s.config_hash, s.config, 5};
  EXPECT_NO_THROW(check_resumable(read, where, same));
  const std::string beyond = error_of([&] { check_resumable(read, where, {s.config_hash, s.config, 4}); });
  EXPECT_NE(beyond.find("is at step 5, beyond train.steps 4"), std::string::npos) << beyond;

  ASSERT_EQ(read.files.count("optimizer.safetensors"), 1u);
  const uint64_t bytes = read.files.at("optimizer.safetensors").bytes;
  std::ofstream(where / "optimizer.safetensors", std::ios::binary | std::ios::app) << 'x';
  const std::string grown = error_of([&] { verify_checkpoint_file(where, read, "optimizer.safetensors"); });
  const std::string sizes = "has " + std::to_string(bytes + 1) + " bytes, state.json records " + std::to_string(bytes);
  EXPECT_NE(grown.find(sizes), std::string::npos) << grown;
  std::filesystem::remove_all(dir);
}

// Tensors that live elsewhere (the device tier's, on the device only) are written from `fetch`, one at a time,
// as the same bytes their views would give, their pending gradients as zeros; read back, they go to `store`.
TEST(Checkpoint, TensorsWithoutAViewAreWrittenFromFetchAndReadIntoStore) {
  const auto root = testing::scratch_path("ckpt-elsewhere");
  std::filesystem::remove_all(root);
  Tiny t;
  const int n = t.params.count();
  for (int i = 0; i < n; i += 2)  // the odd ones live elsewhere: no pending gradients
    for (float& g : t.params.grad(i)) g = 0.125f * static_cast<float>(i + 1);
  TrainState s = t.state(3);
  s.pending = TrainState::PendingUpdate{3, 0.001, 1.0, 1.0f, false};
  const StateToWrite whole = views_of(t.params, t.m, t.v);
  StateToWrite part = whole;
  using Part = ParameterViews::Part;
  int fetched = 0;
  part.fetch = [&](Part p, int i, std::span<float> out) {
    const memory::TensorView& from = (p == Part::Weights ? whole.weights : p == Part::M ? whole.m : whole.v)[i];
    ASSERT_EQ(out.size(), static_cast<size_t>(from.numel()));
    std::copy_n(from.as<float>(), out.size(), out.begin());
    ++fetched;
  };
  for (int i = 1; i < n; i += 2)
    for (auto* views : {&part.weights, &part.m, &part.v, &part.pending}) (*views)[i].data = nullptr;
  for (const char* name : {"whole", "part"}) std::filesystem::create_directories(root / name);
  write_checkpoint_files(root / "whole", t.spec, whole, s);
  write_checkpoint_files(root / "part", t.spec, part, s);
  EXPECT_EQ(fetched, 3 * (n / 2));
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "pending_update.safetensors", "state.json"})
    EXPECT_EQ(file_text(root / "whole" / file), file_text(root / "part" / file)) << file;

  Tiny back;
  StateToRead into = views_of(back.params, back.m, back.v);
  std::map<std::pair<Part, int>, std::vector<float>> stored;
  into.store = [&](Part p, int i, std::span<const float> values) {
    stored[std::pair(p, i)].assign(values.begin(), values.end());
  };
  for (int i = 1; i < n; i += 2)
    for (auto* views : {&into.weights, &into.m, &into.v, &into.pending}) (*views)[i].data = nullptr;
  const auto [state, dir] = read_checkpoint_state(root / "part");
  read_checkpoint_into(dir, state, t.spec, into);
  EXPECT_EQ(stored.size(), static_cast<size_t>(3 * (n / 2)));  // the pending gradients without a view are not read
  for (int i = 1; i < n; i += 2) {
    const std::span<const float> w = t.params.value(i);
    EXPECT_EQ(stored[std::pair(Part::Weights, i)], std::vector<float>(w.begin(), w.end())) << i;
    EXPECT_EQ(stored[std::pair(Part::V, i)], std::vector<float>(w.size(), 0.5f)) << i;
  }
  EXPECT_TRUE(std::equal(back.params.value(0).begin(), back.params.value(0).end(), t.params.value(0).begin()));
  std::filesystem::remove_all(root);
}

TEST(Checkpoint, ADifferingSettingIsNamedWithBothValues) {
  const auto root = testing::scratch_path("ckpt-settings");
  std::filesystem::remove_all(root);
  Tiny t;
  save_checkpoint(root, t.spec, t.params, t.m, t.v, t.state(3), 1);
  const std::string what = error_of([&] {
    load_checkpoint(root, t.spec, t.params, t.m, t.v, {"fedcba9876543210", {{"optim.lr", "0.003"}, {"train.steps", "10"}}, 10});
  });
  EXPECT_NE(what.find("optim.lr: the checkpoint has 0.001, this config 0.003"), std::string::npos) << what;
  EXPECT_EQ(what.find("train.steps:"), std::string::npos) << what;  // only what differs
  std::filesystem::remove_all(root);
}

// Rotation keeps the newest `keep` of the run's own folders, newest by the order written: a run resumed
// from an older checkpoint supersedes the later ones it rewrites.
TEST(CheckpointDir, RotatesOnlyItsOwnFoldersNewestWrittenLast) {
  const auto root = testing::scratch_path("ckpt-rotation");
  std::filesystem::remove_all(root);
  const Tiny t;
  std::filesystem::create_directories(root / "step-00000001-final");
  std::ofstream(root / "notes.txt") << "the user's\n";
  std::string run;
  {
    CheckpointDir dir(root, "h", std::nullopt, false);
    run = dir.run_id();
    for (int step : {1, 2, 3}) dir.save(t.spec, t.params, t.m, t.v, t.state(step), 3);
  }
  EXPECT_EQ(read_run_manifest(root)->checkpoints, (std::vector<std::string>{"step-00000001", "step-00000002", "step-00000003"}));
  {
    CheckpointDir dir(root, "h", CheckpointDir::Resumed{run, root / "step-00000001", 1}, false);
    EXPECT_EQ(dir.run_id(), run);
    dir.save(t.spec, t.params, t.m, t.v, t.state(2), 2);
  }
  EXPECT_EQ(read_run_manifest(root)->checkpoints, (std::vector<std::string>{"step-00000003", "step-00000002"}));
  EXPECT_EQ(find_checkpoint(root), root / "step-00000002");
  EXPECT_EQ(entries(root), (std::vector<std::string>{"ferry-run.json", "notes.txt", "step-00000001-final", "step-00000002",
                                                     "step-00000003"}));
  std::filesystem::remove_all(root);
}

// Issue 32: rotation deleted a folder the user had put inside a step folder (step-00000006/hf-export). It
// deletes the files the manifest records, only while they have their recorded size and CRC32C, and keeps,
// and names in a warning, anything else.
TEST(CheckpointDir, RotationDeletesOnlyTheFilesItWroteUnchangedAndNamesWhatItKept) {
  const auto root = testing::scratch_path("ckpt-rotation-keeps");
  std::filesystem::remove_all(root);
  const Tiny t;
  std::vector<std::string> warnings;
  CheckpointDir dir(root, "h", std::nullopt, false);
  dir.on_warning([&](const std::string& w) { warnings.push_back(w); });
  dir.save(t.spec, t.params, t.m, t.v, t.state(1), 1);
  const auto manifest = read_run_manifest(root);
  EXPECT_EQ(manifest->written.at("step-00000001").at("model.safetensors").bytes,
            std::filesystem::file_size(root / "step-00000001" / "model.safetensors"));
  EXPECT_EQ(manifest->written.at("step-00000001").at("state.json").crc32c,
            checksum_file(root / "step-00000001" / "state.json").crc32c);
  std::filesystem::create_directories(root / "step-00000001" / "hf-export");
  std::ofstream(root / "step-00000001" / "hf-export" / "config.json") << "{}\n";
  dir.save(t.spec, t.params, t.m, t.v, t.state(2), 1);  // rotates step 1 out
  EXPECT_EQ(entries(root / "step-00000001"), std::vector<std::string>{"hf-export"});
  EXPECT_EQ(file_text(root / "step-00000001" / "hf-export" / "config.json"), "{}\n");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checkpoint rotation kept '" + (root / "step-00000001").string() +
                             "': it holds hf-export/, which this run "
                             "did not write; its checkpoint files are deleted"),
            std::string::npos)
      << warnings[0];
  // A file of the run's own replaced by another of the same name is not the run's any more: kept.
  std::ofstream(root / "step-00000002" / "optimizer.safetensors", std::ios::trunc) << "the user's own\n";
  dir.save(t.spec, t.params, t.m, t.v, t.state(3), 1);
  EXPECT_EQ(entries(root / "step-00000002"), std::vector<std::string>{"optimizer.safetensors"});
  EXPECT_EQ(file_text(root / "step-00000002" / "optimizer.safetensors"), "the user's own\n");
  EXPECT_NE(warnings.back().find("optimizer.safetensors (changed since it was written)"), std::string::npos)
      << warnings.back();
  EXPECT_EQ(read_run_manifest(root)->checkpoints, std::vector<std::string>{"step-00000003"});
  EXPECT_EQ(read_run_manifest(root)->written.size(), 1u);
  std::filesystem::remove_all(root);
}

// Issue 32: a hand-edited ferry-run.json listing a user's folder made rotation delete it. Listed, it is still
// only the files recorded, with their checksums, that go; a manifest of an earlier build (no "written") stands
// on the folder's valid state.json; a recorded name leaving its folder is a damaged manifest.
TEST(CheckpointDir, AHandEditedManifestCannotMakeRotationDeleteTheUsersFiles) {
  const auto root = testing::scratch_path("ckpt-hand-edited");
  std::filesystem::remove_all(root);
  const Tiny t;
  std::string run;
  {
    CheckpointDir dir(root, "h", std::nullopt, false);
    run = dir.run_id();
    dir.save(t.spec, t.params, t.m, t.v, t.state(1), 3);
  }
  std::filesystem::create_directories(root / "step-00000000");
  std::ofstream(root / "step-00000000" / "notes.txt") << "the user's\n";
  auto j = nlohmann::json::parse(file_text(root / kRunManifest));
  j["checkpoints"] = {"step-00000000", "step-00000001"};
  j.erase("written");  // as an earlier build wrote it: the names only
  std::ofstream(root / kRunManifest, std::ios::trunc) << j.dump();
  std::vector<std::string> warnings;
  {
    CheckpointDir dir(root, "h", CheckpointDir::Resumed{run, root / "step-00000001", 1}, false);
    dir.on_warning([&](const std::string& w) { warnings.push_back(w); });
    dir.save(t.spec, t.params, t.m, t.v, t.state(2), 1);  // rotates out step 0 (the user's) and step 1 (the run's)
  }
  EXPECT_EQ(file_text(root / "step-00000000" / "notes.txt"), "the user's\n");
  EXPECT_FALSE(std::filesystem::exists(root / "step-00000001"));  // its state.json named its files
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("step-00000000': it holds notes.txt"), std::string::npos) << warnings[0];
  // Recorded with a checksum it does not have, the user's file stays too; a name out of the folder is refused.
  j = nlohmann::json::parse(file_text(root / kRunManifest));
  j["checkpoints"] = {"step-00000000", "step-00000002"};
  j["written"]["step-00000000"] = {{"notes.txt", {{"bytes", 11}, {"crc32c", "00000000"}}}};
  std::ofstream(root / kRunManifest, std::ios::trunc) << j.dump();
  {
    CheckpointDir dir(root, "h", CheckpointDir::Resumed{run, root / "step-00000002", 2}, false);
    dir.save(t.spec, t.params, t.m, t.v, t.state(3), 1);
  }
  EXPECT_EQ(file_text(root / "step-00000000" / "notes.txt"), "the user's\n");
  j["written"]["step-00000000"] = {{"../ferry-run.json", {{"bytes", 11}, {"crc32c", "00000000"}}}};
  std::ofstream(root / kRunManifest, std::ios::trunc) << j.dump();
  const std::string what = error_of([&] { read_run_manifest(root); });
  EXPECT_NE(what.find("ferry-run.json' is damaged (written is not"), std::string::npos) << what;
  std::filesystem::remove_all(root);
}

// The data a run trained on, in state.json: each file's path, size and CRC32C, and what differs in words.
TEST(Checkpoint, RecordsItsDataAndNamesTheFilesThatChanged) {
  const auto root = testing::scratch_path("ckpt-data");
  std::filesystem::remove_all(root);
  const Tiny t;
  TrainState s = t.state(3);
  s.data = {{"data.path", "/d/train.txt", {100, 0xabcdef01u}}, {"the token cache", "/c/train.bin", {1074, 7}}};
  save_checkpoint(root, t.spec, t.params, t.m, t.v, s, 1);
  const TrainState read = read_checkpoint_state(root).first;
  ASSERT_EQ(read.data.size(), 2u);
  EXPECT_EQ(read.data[0].role, "data.path");
  EXPECT_EQ(read.data[0].path, "/d/train.txt");
  EXPECT_EQ(read.data[0].sum.bytes, 100u);
  EXPECT_EQ(read.data[0].sum.crc32c, 0xabcdef01u);
  EXPECT_EQ(read.data[1].sum.crc32c, 7u);
  std::vector<TrainState::DataFile> now = read.data;
  EXPECT_TRUE(changed_data(read.data, now).empty());
  now[0].path = "/e/train.txt";  // moved, same bytes: the same data
  EXPECT_TRUE(changed_data(read.data, now).empty());
  now[0].sum.crc32c ^= 1;
  const auto changed = changed_data(read.data, now);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0],
            "data.path '/e/train.txt' has 100 bytes, CRC32C abcdef00; the checkpoint's ('/d/train.txt') had 100 bytes, "
            "CRC32C abcdef01");
  EXPECT_TRUE(changed_data({}, now).empty());  // a checkpoint of an earlier build records none
  std::filesystem::remove_all(root);
}

TEST(CheckpointDir, LeavesNoTemporaryBehindAndClearsItsRunsLeftovers) {
  const auto root = testing::scratch_path("ckpt-leftovers");
  std::filesystem::remove_all(root);
  const Tiny t;
  std::string run;
  {
    CheckpointDir dir(root, "h", std::nullopt, false);
    run = dir.run_id();
    dir.save(t.spec, t.params, t.m, t.v, t.state(1), 1);
  }
  // As a run killed while writing step 5 leaves it, beside another program's folder of a similar name.
  std::filesystem::create_directories(root / ("step-00000005." + run + ".tmp"));
  std::filesystem::create_directories(root / "step-00000005.someone-else.tmp");
  {
    CheckpointDir dir(root, "h", CheckpointDir::Resumed{run, root / "step-00000001", 1}, false);
    dir.save(t.spec, t.params, t.m, t.v, t.state(2), 1);
  }
  EXPECT_EQ(entries(root), (std::vector<std::string>{"ferry-run.json", "step-00000002", "step-00000005.someone-else.tmp"}));
  std::filesystem::remove_all(root);
}

TEST(CheckpointDir, ASecondLiveWriterIsRefused) {
  const auto root = testing::scratch_path("ckpt-lock");
  std::filesystem::remove_all(root);
  {
    const CheckpointDir first(root, "h", std::nullopt, false);
    const std::string what = error_of([&] { CheckpointDir second(root, "h", std::nullopt, false); });
    EXPECT_NE(what.find("is being written by another ferry run that is still running"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(CheckpointDir(root, "h", std::nullopt, false));  // the lock went with the first
  std::filesystem::remove_all(root);
}

// --overwrite-checkpoints replaces another run's listed checkpoints (once this run writes its first), never
// a folder no manifest lists.
TEST(CheckpointDir, OverwriteReplacesOnlyTheOtherRunsListedFolders) {
  const auto root = testing::scratch_path("ckpt-overwrite");
  std::filesystem::remove_all(root);
  const Tiny t;
  {
    CheckpointDir other(root, "h", std::nullopt, false);
    for (int step : {1, 2}) other.save(t.spec, t.params, t.m, t.v, t.state(step), 3);
  }
  EXPECT_NE(error_of([&] { save_checkpoint(root, t.spec, t.params, t.m, t.v, t.state(1), 3); })
                .find("holds the checkpoints of another run"),
            std::string::npos);
  std::filesystem::create_directories(root / "step-00000007");
  const std::string unlisted = error_of([&] { CheckpointDir(root, "h", std::nullopt, true); });
  EXPECT_NE(unlisted.find("holds step-00000007, which no ferry-run.json there lists"), std::string::npos) << unlisted;
  std::filesystem::remove(root / "step-00000007");
  CheckpointDir dir(root, "h", std::nullopt, true);
  EXPECT_TRUE(std::filesystem::exists(root / "step-00000002"));  // until this run has a checkpoint of its own
  dir.save(t.spec, t.params, t.m, t.v, t.state(1), 3);
  EXPECT_EQ(entries(root), (std::vector<std::string>{"ferry-run.json", "step-00000001"}));
  EXPECT_EQ(read_run_manifest(root)->run_id, dir.run_id());
  EXPECT_EQ(read_checkpoint_state(root).first.run_id, dir.run_id());
  std::filesystem::remove_all(root);
}

// A checkpoint dir of an earlier build (no manifest): its newest is the highest step folder holding a
// state.json; other folders are not taken for checkpoints.
TEST(FindCheckpoint, ADirOfAnEarlierBuildGivesItsHighestCheckpoint) {
  const auto root = testing::scratch_path("ckpt-earlier");
  std::filesystem::remove_all(root);
  const Tiny t;
  save_checkpoint(root, t.spec, t.params, t.m, t.v, t.state(2), 3);
  std::filesystem::remove(root / kRunManifest);
  for (const char* name : {"step-00000009", "step-00000003-final"}) {
    std::filesystem::create_directories(root / name);
    std::filesystem::copy_file(root / "step-00000002" / "state.json", root / name / (name[12] == '9' ? "notes.txt" : "state.json"));
  }
  EXPECT_EQ(find_checkpoint(root), root / "step-00000002");
  std::ofstream(root / kRunManifest) << "{\"run_id\": 3}";
  const std::string what = error_of([&] { find_checkpoint(root); });
  EXPECT_NE(what.find("ferry-run.json' is damaged (no run_id)"), std::string::npos) << what;
  std::filesystem::remove_all(root);
}

// Run folders (issue 29: every run of a config wrote one checkpoint dir, so the second was refused): each
// new run of an experiment gets the next number, made by one mkdir, so runs started at once never share one.
TEST(RunFolders, RunsStartedAtOnceGetAFolderEachNumberedOnFromTheHighest) {
  const auto root = testing::scratch_path("run-folders");
  std::filesystem::remove_all(root);
  const auto experiment = root / "runs" / "tiny";
  std::filesystem::create_directories(experiment / "9");
  std::filesystem::create_directories(experiment / "notes");  // not a run folder
  std::filesystem::create_directories(experiment / "07");     // nor is this
  constexpr int kRuns = 16;
  std::vector<std::optional<CheckpointDir>> dirs(kRuns);
  std::vector<std::string> errors(kRuns);
  std::latch start(kRuns);  // all at once: each sees 9 as the highest number, and all but one must move on
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i)
    runs.emplace_back([&, i] {
      start.arrive_and_wait();
      errors[i] = error_of([&] { dirs[i].emplace(CheckpointDir::new_run(experiment, "h")); });
    });
  for (auto& t : runs) t.join();
  EXPECT_EQ(errors, std::vector<std::string>(kRuns)) << "no run refused";
  std::vector<int> numbers;
  for (const auto& dir : dirs)
    if (dir) numbers.push_back(std::stoi(dir->root().lexically_relative(experiment).string()));
  std::sort(numbers.begin(), numbers.end());
  std::vector<int> expected(kRuns);
  std::iota(expected.begin(), expected.end(), 10);
  EXPECT_EQ(numbers, expected);
  EXPECT_EQ(run_folders(experiment).front(), experiment / std::to_string(9 + kRuns));  // by number: after 9, not before
  std::filesystem::remove_all(root);
}

// A folder a checkpoint dir created and left empty (a run that failed at start-up) is removed, with the
// parents it created; one holding anything is kept.
TEST(RunFolders, AFolderLeftEmptyIsRemovedWithTheParentsItCreated) {
  const auto root = testing::scratch_path("run-folders-empty");
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  { CheckpointDir unused = CheckpointDir::new_run(root / "runs" / "tiny", "h"); }
  EXPECT_EQ(entries(root), std::vector<std::string>{});
  { CheckpointDir unused(root / "a" / "b", "h", std::nullopt, false); }
  EXPECT_EQ(entries(root), std::vector<std::string>{});
  const Tiny t;
  {
    CheckpointDir dir = CheckpointDir::new_run(root / "runs" / "tiny", "h");
    EXPECT_EQ(dir.root(), root / "runs" / "tiny" / "1");
    dir.save(t.spec, t.params, t.m, t.v, t.state(1), 1);
  }
  { CheckpointDir unused = CheckpointDir::new_run(root / "runs" / "tiny", "h"); }
  EXPECT_EQ(entries(root / "runs" / "tiny"), std::vector<std::string>{"1"});
  std::filesystem::remove_all(root);
}

// sample, eval, export and --resume name a run by its folder, or an experiment by its folder: the newest
// checkpoint of the highest-numbered run that holds one.
TEST(FindCheckpoint, AnExperimentFolderGivesItsNewestRunsNewestCheckpoint) {
  const auto root = testing::scratch_path("ckpt-experiment");
  std::filesystem::remove_all(root);
  const Tiny t;
  save_checkpoint(root / "2", t.spec, t.params, t.m, t.v, t.state(2), 3);
  {
    CheckpointDir ten(root / "10", "h", std::nullopt, false);
    for (int step : {10, 11}) ten.save(t.spec, t.params, t.m, t.v, t.state(step), 3);
  }
  std::filesystem::create_directories(root / "11");  // a run that has no checkpoint yet
  EXPECT_EQ(find_checkpoint(root), root / "10" / "step-00000011");
  EXPECT_EQ(find_checkpoint(root / "2"), root / "2" / "step-00000002");
  EXPECT_EQ(find_checkpoint((root / "2").string() + "/"), root / "2" / "step-00000002");
  const std::string what = error_of([&] { find_checkpoint(root / "11"); });
  EXPECT_NE(what.find("holds no checkpoint (no step-NNNNNNNN folder with a state.json, and no run folder 1, 2, ... holding one)"),
            std::string::npos) << what;
  std::filesystem::remove_all(root);
}

// The shape state.json gives must fit the weights file before anything that size is allocated.
TEST(Checkpoint, AShapeLargerThanTheWeightsIsRefusedBeforeAllocating) {
  const auto root = testing::scratch_path("ckpt-shape");
  std::filesystem::remove_all(root);
  const Tiny t;
  const auto folder = save_checkpoint(root, t.spec, t.params, t.m, t.v, t.state(1), 1);
  TrainState s = read_checkpoint_state(folder).first;
  s.model.n_embd = 65536;
  s.model.vocab_size = 1 << 22;
  const models::ModelSpec huge = models::build_model(s.model, 1, 1);
  bool verified = false;
  const std::string what = error_of([&] { read_checkpoint_weights(folder, s, huge, &verified); });
  EXPECT_NE(what.find("too few for the"), std::string::npos) << what;
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ferry::formats
