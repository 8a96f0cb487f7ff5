// A checkpoint dir and the one run that writes it: ferry-run.json names the run, the step folders it wrote,
// in the order written, and each file it wrote there with its size and CRC32C; rotation deletes only those
// files, unchanged, and a new run refuses a dir holding another run's checkpoints (or step folders no
// manifest lists) unless told to overwrite them. Run folders: a run given no train.checkpoint_dir gets a
// checkpoint dir of its own, the next numbered folder of its experiment.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/checkpoint.h"

namespace ferry::formats {

inline constexpr const char* kRunManifest = "ferry-run.json";

struct RunManifest {
  std::string run_id;
  std::string config_hash;               // of the run's settings (informative)
  std::vector<std::string> checkpoints;  // folder names, oldest written first; some may not exist (yet)
  // Per folder, the files the run wrote there (state.json included). Manifests of earlier builds have none:
  // the folder's state.json, when it is valid, stands in.
  std::map<std::string, std::map<std::string, FileChecksum>> written;
};

// root/ferry-run.json, or nothing when there is none; a damaged one is an error naming it.
std::optional<RunManifest> read_run_manifest(const std::filesystem::path& root);

// "step-00000012": the folder of a step's checkpoint; and whether a name is one (8 or more digits, nothing else).
std::string step_folder_name(int64_t step);
std::optional<int64_t> step_of_folder_name(const std::string& name);

// The run folders of an experiment folder (runs/gpt-tiny/1, runs/gpt-tiny/2, ...: its subfolders named by a
// number from 1), highest number first; none when the folder does not exist.
std::vector<std::filesystem::path> run_folders(const std::filesystem::path& experiment);

class CheckpointDir {
 public:
  struct Resumed {
    std::string run_id;             // empty: a checkpoint of an earlier build
    std::filesystem::path folder;   // the checkpoint folder resumed from
    int64_t step = 0;
  };

  // Creates and locks `root` (another live run writing it is refused), checks that it can be written,
  // and that this run may write there: a fresh run refuses another run's checkpoints unless `overwrite`
  // (they are deleted when this run writes its first checkpoint); a resumed run continues its own
  // manifest. Step folders that no manifest lists are never deleted: a fresh run refuses them, a resumed
  // one those numbered above the step it resumes from. Every error names the folder and the ways out.
  CheckpointDir(std::filesystem::path root, std::string config_hash, std::optional<Resumed> resumed, bool overwrite);
  // A new run of `experiment`: its next run folder (the highest number + 1), made with one mkdir, so that
  // runs started at once never share one.
  static CheckpointDir new_run(const std::filesystem::path& experiment, std::string config_hash);
  // Folders this dir created (the root, and parents that did not exist) are removed again if still empty:
  // a run that fails at start-up leaves no folder behind.
  ~CheckpointDir();
  CheckpointDir(CheckpointDir&& other) noexcept;
  CheckpointDir& operator=(CheckpointDir&&) = delete;
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;

  // Writes root/step-NNNNNNNN (state.run_id set to this run's), records it and its files in the manifest,
  // and deletes this run's older checkpoints beyond the newest `keep`: the files recorded, while they still
  // have their recorded size and CRC32C, then the folder if that empties it. Anything else in it (a folder
  // the user put there, a file changed since) is kept, and a warning names it. Returns the folder written.
  std::filesystem::path save(const models::ModelSpec& spec, const StateToWrite& from, TrainState state, int keep);
  std::filesystem::path save(const models::ModelSpec& spec, const models::ParameterStore& params, std::span<const float> m,
                             std::span<const float> v, TrainState state, int keep) {
    return save(spec, views_of(params, m, v), std::move(state), keep);
  }

  // Where the warnings of rotation go (default: stderr, "ferry: warning: ...").
  void on_warning(std::function<void(const std::string&)> warn) { warn_ = std::move(warn); }

  const std::string& run_id() const { return run_id_; }
  const std::filesystem::path& root() const { return root_; }

 private:
  void lock_and_probe();
  void adopt(const std::optional<RunManifest>& manifest, const std::optional<Resumed>& resumed, bool overwrite);
  void refuse_unlisted_folders(const std::optional<Resumed>& resumed) const;
  void remove_leftover_temporaries(const std::vector<std::string>& run_ids) const;
  void write_manifest() const;
  void rotate(int keep);
  // Deletes in root/name each file recorded as written there while it still has its recorded size and
  // CRC32C, then the folder if that empties it. Returns what stays there (empty: the folder is gone).
  std::vector<std::string> remove_written(const std::string& name);
  void warn(const std::string& message) const;

  std::filesystem::path root_;
  std::string config_hash_;
  std::string run_id_;
  std::vector<std::string> listed_;    // this run's folders, oldest written first
  std::vector<std::string> replaced_;  // another run's, deleted before this run's first checkpoint
  std::map<std::string, std::map<std::string, FileChecksum>> written_;  // listed_'s and replaced_'s files
  std::function<void(const std::string&)> warn_;
  std::vector<std::filesystem::path> created_;  // innermost first: removed by the destructor if left empty
  int lock_fd_ = -1;
};

}  // namespace ferry::formats
