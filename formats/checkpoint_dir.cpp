// CheckpointDir: the manifest (written atomically), the lock that keeps two live runs out of one dir, the
// start-up checks (writable, not another run's), and saving with rotation among this run's own folders, which
// deletes only the files the manifest records, unchanged.
#include "formats/checkpoint_dir.h"

#include "foundation/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry::formats {
namespace {

using nlohmann::json;

std::string new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &utc);
  std::random_device entropy;
  return fmt::format("{}-{}-{:08x}", when, ::getpid(), entropy());
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// "step-00000004, step-00000008 and 3 more"
std::string list_names(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 4; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 4) out += fmt::format(" and {} more", names.size() - 4);
  return out;
}

std::string temporary_folder_name(const std::string& name, const std::string& run_id) { return name + "." + run_id + ".tmp"; }

std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

// A file name the manifest may record in a step folder: one name inside it, never a path out of it.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The manifest's "written": per folder, per file, its size and CRC32C; nothing when `j` is not that.
std::optional<std::map<std::string, std::map<std::string, FileChecksum>>> read_written(const json& j) {
  std::map<std::string, std::map<std::string, FileChecksum>> written;
  if (!j.is_object()) return std::nullopt;
  for (const auto& [folder, files] : j.items()) {
    if (!step_of_folder_name(folder) || !files.is_object()) return std::nullopt;
    for (const auto& [file, sum] : files.items()) {
      if (!plain_file_name(file) || !sum.is_object() || !sum.contains("bytes") || !sum["bytes"].is_number_unsigned() ||
          !sum.contains("crc32c") || !sum["crc32c"].is_string())
        return std::nullopt;
      const std::string crc = sum["crc32c"].get<std::string>();
      if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
      written[folder][file] = {sum["bytes"].get<uint64_t>(), static_cast<uint32_t>(std::stoul(crc, nullptr, 16))};
    }
  }
  return written;
}

// The files a checkpoint folder records in its state.json (valid, checked against its own checksum), and
// state.json itself: what a manifest of an earlier build, which records no files, stands for. None when
// the folder holds no valid state.json (then nothing in it is taken for Ferry's).
std::map<std::string, FileChecksum> files_its_state_records(const std::filesystem::path& folder) {
  try {
    std::ifstream in(folder / "state.json", std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return {};
    std::map<std::string, FileChecksum> files = parse_train_state(text.str(), (folder / "state.json").string()).files;
    files["state.json"] = checksum_file(folder / "state.json");
    return files;
  } catch (const std::exception&) {
    return {};
  }
}

// Whether `path` is still the regular file of `sum`'s size and CRC32C (a link is never taken for one).
bool unchanged(const std::filesystem::path& path, const FileChecksum& sum) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec)) ||
      std::filesystem::file_size(path, ec) != sum.bytes || ec)
    return false;
  try {
    return checksum_file(path).crc32c == sum.crc32c;
  } catch (const std::runtime_error&) {
    return false;  // unreadable: not known to be ours
  }
}

std::string refusal(const std::filesystem::path& root, const RunManifest& manifest, const std::vector<std::string>& theirs,
                    const std::optional<CheckpointDir::Resumed>& resumed) {
  const std::string holds = fmt::format("train.checkpoint_dir: '{}' holds the checkpoints of another run (run {}: {})",
                                        root.string(), manifest.run_id, list_names(theirs));
  if (!resumed)
    return holds + "; a new run does not write beside them. Continue that run with --resume " + root.string() +
           ", replace its checkpoints with --overwrite-checkpoints (they are deleted when this run writes its first), "
           "or choose another train.checkpoint_dir";
  return holds + ", not of the run being resumed (" +
         (resumed->run_id.empty() ? std::string("a checkpoint of an earlier build") : "run " + resumed->run_id) +
         "); set train.checkpoint_dir to that run's own folder, replace them with --overwrite-checkpoints, or choose "
         "another train.checkpoint_dir";
}

// The folders of `path` that do not exist yet, innermost first: what create_directories(path) would create.
std::vector<std::filesystem::path> missing_folders(std::filesystem::path path) {
  if (path.filename().empty() && path.has_parent_path()) path = path.parent_path();  // "a/b/" is "a/b"
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (; !path.empty() && !std::filesystem::exists(std::filesystem::symlink_status(path, ec)); path = path.parent_path()) {
    missing.push_back(path);
    if (!path.has_parent_path() || path.parent_path() == path) break;
  }
  return missing;
}

// Removes each folder, innermost first, while they are empty (a folder holding anything is kept, and so
// are those above it).
void remove_empty_folders(const std::vector<std::filesystem::path>& folders) {
  std::error_code ec;
  for (const auto& folder : folders)
    if (!std::filesystem::remove(folder, ec)) return;
}

// "12" -> 12; nothing for a name that is not a number from 1 (what run folders are named).
std::optional<int64_t> run_number(const std::string& name) {
  if (name.empty() || name.size() > 18 || name[0] == '0' || name.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(name);
}

}  // namespace

std::vector<std::filesystem::path> run_folders(const std::filesystem::path& experiment) {
  std::vector<std::pair<int64_t, std::filesystem::path>> numbered;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(experiment, ec))
    if (const auto n = run_number(e.path().filename().string()); n && e.is_directory(ec)) numbered.emplace_back(*n, e.path());
  std::sort(numbered.begin(), numbered.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::filesystem::path> folders;
  for (auto& [n, folder] : numbered) folders.push_back(std::move(folder));
  return folders;
}

std::string step_folder_name(int64_t step) { return fmt::format("step-{:08d}", step); }

std::optional<int64_t> step_of_folder_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.size() < 8 || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::optional<RunManifest> read_run_manifest(const std::filesystem::path& root) {
  const std::filesystem::path file = root / kRunManifest;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const auto damaged = [&](const std::string& what) {
    return std::runtime_error("'" + file.string() + "' is damaged (" + what + "); it names the run that writes this "
                              "checkpoint dir and the folders it wrote: restore it, or move the dir's contents elsewhere");
  };
  if (!in) throw damaged("it cannot be read");
  const json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw damaged("not a JSON object");
  RunManifest m;
  if (!j.contains("run_id") || !j["run_id"].is_string() || j["run_id"].get<std::string>().empty()) throw damaged("no run_id");
  m.run_id = j["run_id"].get<std::string>();
  if (j.contains("config_hash") && j["config_hash"].is_string()) m.config_hash = j["config_hash"].get<std::string>();
  if (!j.contains("checkpoints") || !j["checkpoints"].is_array()) throw damaged("no list of checkpoints");
  for (const auto& name : j["checkpoints"]) {
    if (!name.is_string() || !step_of_folder_name(name.get<std::string>())) throw damaged("checkpoints holds " + name.dump());
    m.checkpoints.push_back(name.get<std::string>());
  }
  if (j.contains("written")) {
    auto written = read_written(j["written"]);
    if (!written) throw damaged("written is not, per step folder, its files' names with bytes and crc32c");
    m.written = std::move(*written);
  }
  return m;
}

CheckpointDir::CheckpointDir(std::filesystem::path root, std::string config_hash, std::optional<Resumed> resumed, bool overwrite)
    : root_(std::move(root)), config_hash_(std::move(config_hash)) {
  try {
    lock_and_probe();
    const auto manifest = read_run_manifest(root_);
    adopt(manifest, resumed, overwrite);
    refuse_unlisted_folders(resumed);
    std::vector<std::string> runs{run_id_};
    if (manifest) runs.push_back(manifest->run_id);
    remove_leftover_temporaries(runs);
  } catch (...) {  // the destructor does not run: what it would do
    if (lock_fd_ >= 0) ::close(lock_fd_);
    remove_empty_folders(created_);
    throw;
  }
}

CheckpointDir CheckpointDir::new_run(const std::filesystem::path& experiment, std::string config_hash) {
  std::vector<std::filesystem::path> created = missing_folders(experiment);
  const auto cannot = [&](const std::filesystem::path& folder, const std::string& why) {
    remove_empty_folders(created);
    return std::runtime_error(fmt::format("cannot create the run folder '{}' ({}); run ferry in a folder you can write (run folders "
                                          "are made in runs/ there), or set train.checkpoint_dir",
                                          folder.string(), why));
  };
  const auto folders = run_folders(experiment);
  int64_t n = folders.empty() ? 1 : *run_number(folders.front().filename().string()) + 1;
  for (int tries = 0;; ++tries) {
    std::error_code ec;
    std::filesystem::create_directories(experiment, ec);  // again if a failed run removed it meanwhile
    if (ec) throw cannot(experiment, ec.message());
    const std::filesystem::path root = experiment / std::to_string(n);
    if (::mkdir(root.c_str(), 0777) == 0) {
      created.insert(created.begin(), root);
      break;
    }
    const int error = errno;
    if ((error != EEXIST && error != ENOENT) || tries == 1000) throw cannot(root, std::strerror(error));
    if (error == EEXIST) ++n;  // another run took that number: the next
  }
  try {
    CheckpointDir dir(created.front(), std::move(config_hash), std::nullopt, false);
    dir.created_ = std::move(created);
    return dir;
  } catch (...) {
    remove_empty_folders(created);
    throw;
  }
}

CheckpointDir::~CheckpointDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  remove_empty_folders(created_);
}

CheckpointDir::CheckpointDir(CheckpointDir&& other) noexcept
    : root_(std::move(other.root_)), config_hash_(std::move(other.config_hash_)), run_id_(std::move(other.run_id_)),
      listed_(std::move(other.listed_)), replaced_(std::move(other.replaced_)), written_(std::move(other.written_)),
      warn_(std::move(other.warn_)), created_(std::move(other.created_)), lock_fd_(std::exchange(other.lock_fd_, -1)) {
  other.created_.clear();  // (a moved-from vector is only valid, not necessarily empty)
}

void CheckpointDir::lock_and_probe() {
  std::error_code ec;
  created_ = missing_folders(root_);
  std::filesystem::create_directories(root_, ec);
  if (ec || !std::filesystem::is_directory(root_))
    throw std::runtime_error("train.checkpoint_dir: cannot create the folder '" + root_.string() + "' (" +
                             (ec ? ec.message() : std::string("a file has that name")) + "); choose a folder you can write");
  lock_fd_ = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0) throw std::runtime_error("train.checkpoint_dir: cannot open '" + root_.string() + "': " + std::strerror(errno));
  // Two live runs must not write one dir. The lock goes with the process: a killed run leaves none behind.
  // (A file system without locks, ENOLCK or EOPNOTSUPP, goes unlocked.)
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    throw std::runtime_error("train.checkpoint_dir: '" + root_.string() + "' is being written by another ferry run that is "
                             "still running; wait for it to end, or choose another train.checkpoint_dir");
  // Writable: found now rather than at the first checkpoint, after the training time is spent. (The probe
  // is the manifest's temporary: a leftover of a killed run is replaced.)
  const std::filesystem::path probe = root_ / (std::string(kRunManifest) + ".tmp");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written = fd >= 0 && ::write(fd, "{}\n", 3) == 3 && ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  if (!written)
    throw std::runtime_error("train.checkpoint_dir: cannot write in '" + root_.string() + "' (" + std::strerror(error) +
                             "); choose a folder you can write, or fix its permissions");
}

void CheckpointDir::adopt(const std::optional<RunManifest>& manifest, const std::optional<Resumed>& resumed, bool overwrite) {
  if (manifest) written_ = manifest->written;  // this run's files, or those of the run it may replace
  if (manifest && resumed && !resumed->run_id.empty() && manifest->run_id == resumed->run_id) {
    run_id_ = manifest->run_id;  // the same run, continued: its folders stay its own
    listed_ = manifest->checkpoints;
    return;
  }
  run_id_ = resumed && !resumed->run_id.empty() ? resumed->run_id : new_run_id();
  std::vector<std::string> theirs;
  if (manifest)
    for (const auto& name : manifest->checkpoints)
      if (std::filesystem::is_directory(root_ / name)) theirs.push_back(name);
  if (!theirs.empty() && !overwrite) throw std::runtime_error(refusal(root_, *manifest, theirs, resumed));
  replaced_ = theirs;
  // Resumed from a folder of this dir that no manifest lists (an earlier build's): it becomes this run's.
  std::error_code ec;
  if (resumed && std::filesystem::equivalent(resumed->folder.parent_path(), root_, ec) &&
      step_of_folder_name(resumed->folder.filename().string()) && !contains(theirs, resumed->folder.filename().string()))
    listed_.push_back(resumed->folder.filename().string());
}

void CheckpointDir::refuse_unlisted_folders(const std::optional<Resumed>& resumed) const {
  std::vector<std::string> unlisted;
  for (const auto& e : std::filesystem::directory_iterator(root_)) {
    const std::string name = e.path().filename().string();
    const auto step = step_of_folder_name(name);
    if (!step || contains(listed_, name) || contains(replaced_, name)) continue;
    if (resumed && *step <= resumed->step) continue;  // this run never writes a step at or before the one it resumes
    unlisted.push_back(name);
  }
  if (unlisted.empty()) return;
  throw std::runtime_error(fmt::format(
      "train.checkpoint_dir: '{}' holds {}, which no ferry-run.json there lists: not written by this run (another "
      "program's folders, or checkpoints of an earlier Ferry build{}). Ferry never deletes, or writes beside, folders it did "
      "not write: move them elsewhere, or choose another train.checkpoint_dir",
      root_.string(), list_names(unlisted),
      resumed ? fmt::format(", numbered above step {} that this run resumes from", resumed->step)
              : ", which --resume " + root_.string() + " would continue"));
}

void CheckpointDir::remove_leftover_temporaries(const std::vector<std::string>& run_ids) const {
  for (const auto& e : std::filesystem::directory_iterator(root_)) {
    const std::string name = e.path().filename().string();
    for (const auto& id : run_ids) {
      const std::string suffix = "." + id + ".tmp";  // a checkpoint of that run, cut short
      if (name.rfind("step-", 0) == 0 && name.size() > suffix.size() && name.ends_with(suffix)) std::filesystem::remove_all(e.path());
    }
  }
}

void CheckpointDir::write_manifest() const {
  json written = json::object();
  for (const std::string& name : listed_)
    if (const auto it = written_.find(name); it != written_.end())
      for (const auto& [file, sum] : it->second)
        written[name][file] = {{"bytes", sum.bytes}, {"crc32c", hex32(sum.crc32c)}};
  const json j{{"ferry_run", 1},
               {"run_id", run_id_},
               {"config_hash", config_hash_},
               {"checkpoints", listed_},
               {"written", written}};
  write_file_atomically(root_ / kRunManifest, j.dump(2) + "\n", "checkpoint");
}

std::filesystem::path CheckpointDir::save(const models::ModelSpec& spec, const StateToWrite& from, TrainState state, int keep) {
  state.run_id = run_id_;
  const std::string name = step_folder_name(state.step);
  const std::filesystem::path final_dir = root_ / name, tmp = root_ / temporary_folder_name(name, run_id_);
  std::error_code ec;
  if (!contains(listed_, name) && !contains(replaced_, name) && std::filesystem::exists(std::filesystem::symlink_status(final_dir, ec)))
    throw std::runtime_error("train.checkpoint_dir: '" + final_dir.string() + "' appeared while this run trained, and this "
                             "run did not write it; Ferry does not replace it: move it elsewhere");
  for (const auto& other : replaced_)  // --overwrite-checkpoints
    if (const auto kept = remove_written(other); !kept.empty())
      warn(fmt::format(
          "--overwrite-checkpoints kept '{}': it holds {}, which the run that wrote it did not write; its checkpoint "
          "files are deleted: move or delete the rest yourself",
          (root_ / other).string(), list_names(kept)));
  replaced_.clear();
  // Listed before it exists: a folder of this name is this run's even if the run dies while writing it.
  std::erase(listed_, name);
  listed_.push_back(name);
  write_manifest();
  const int64_t step = state.step;
  std::map<std::string, FileChecksum> files;
  try {
    std::filesystem::remove_all(tmp);
    std::filesystem::create_directory(tmp);
    files = write_checkpoint_files(tmp, spec, from, std::move(state));
    // This run's earlier checkpoint of the step (resumed from an older one): its files, and nothing else.
    if (const auto kept = remove_written(name); !kept.empty())
      throw std::runtime_error(
          fmt::format("train.checkpoint_dir: '{}' holds {}, which this run did not write, where the checkpoint of "
                      "step {} goes; Ferry does not delete it: move it elsewhere",
                      final_dir.string(), list_names(kept), step));
  } catch (...) {
    std::filesystem::remove_all(tmp, ec);  // leave nothing half-written behind
    throw;
  }
  std::filesystem::rename(tmp, final_dir);
  written_[name] = std::move(files);
  sync_to_disk(root_, true);
  rotate(keep);
  return final_dir;
}

void CheckpointDir::rotate(int keep) {
  std::vector<std::string> kept;  // oldest written first, as listed
  for (auto it = listed_.rbegin(); it != listed_.rend(); ++it) {
    if (!std::filesystem::is_directory(root_ / *it)) continue;  // listed, never completed: forgotten
    if (static_cast<int>(kept.size()) < keep) {
      kept.insert(kept.begin(), *it);
      continue;
    }
    if (const auto left = remove_written(*it); !left.empty())  // no longer a checkpoint: forgotten, and said
      warn(fmt::format(
          "checkpoint rotation kept '{}': it holds {}, which this run did not write; its checkpoint files are "
          "deleted: move or delete the rest yourself",
          (root_ / *it).string(), list_names(left)));
  }
  std::erase_if(written_, [&](const auto& entry) { return !contains(kept, entry.first); });
  listed_ = std::move(kept);
  write_manifest();
}

std::vector<std::string> CheckpointDir::remove_written(const std::string& name) {
  const std::filesystem::path folder = root_ / name;
  const auto recorded = written_.find(name);
  const std::map<std::string, FileChecksum> files =
      recorded != written_.end() ? recorded->second : files_its_state_records(folder);
  written_.erase(name);
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(folder, ec);
  if (!std::filesystem::exists(status)) return {};
  if (!std::filesystem::is_directory(status))
    return {"a " + std::string(std::filesystem::is_symlink(status) ? "link" : "file") + " of that name"};
  std::vector<std::string> changed;
  for (const auto& [file, sum] : files) {
    if (!std::filesystem::exists(std::filesystem::symlink_status(folder / file, ec))) continue;
    if (unchanged(folder / file, sum)) std::filesystem::remove(folder / file, ec);
    else changed.push_back(file);
  }
  if (std::filesystem::remove(folder, ec)) return {};  // emptied: gone
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec)) {
    const std::string entry = e.path().filename().string();
    left.push_back(entry + (e.is_directory(ec) ? "/" : "") +
                   (contains(changed, entry) ? " (changed since it was written)" : ""));
  }
  return left;
}

void CheckpointDir::warn(const std::string& message) const {
  if (warn_) warn_(message);
  else std::fprintf(stderr, "ferry: warning: %s\n", message.c_str());
}

}  // namespace ferry::formats
