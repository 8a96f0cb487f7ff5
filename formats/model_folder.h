// A Hugging Face model folder (model.init_from, export --source) read only where it holds what it names: a
// file of the folder is opened when it is a regular file whose path, links resolved, stays inside the folder
// (or, in a snapshot of the Hugging Face cache, inside the model's blobs/). Anything else is refused by name.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry::formats {

class ModelFolder {
 public:
  // `what`: the key or option that names the folder ("model.init_from", "--source"), at the start of errors
  // (empty: the caller puts it there).
  ModelFolder(const std::filesystem::path& folder, std::string what);

  const std::filesystem::path& path() const { return folder_; }
  // Whether the folder has an entry `name` of any kind (a broken link too: it is refused by name, not skipped).
  bool has(const std::string& name) const;
  // The path of `name` (a fixed name, or an entry of `named_by`: the index that lists it) in the folder,
  // checked as above: it must exist. Throws std::runtime_error naming the file and what it is instead.
  std::filesystem::path file(const std::string& name, const std::string& named_by = "") const;
  // The whole of that file.
  std::string read(const std::string& name, const std::string& named_by = "") const;
  // Whether the canonical `target` lies where the folder's links may lead.
  bool holds(const std::filesystem::path& target) const;

 private:
  std::string prefix() const;
  std::filesystem::path folder_;              // as given, for messages
  std::vector<std::filesystem::path> roots_;  // canonical: the folder, and a cache snapshot's blobs/
  std::string what_;
};

}  // namespace ferry::formats
