// ModelFolder: a name is checked in three steps before a byte is read: it stays inside the folder as written,
// it is a regular file (links followed: never a directory, FIFO or device), and where its links lead stays
// inside the folder or the cache's blobs/.
#include "formats/model_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "foundation/regular_file.h"

namespace ferry::formats {
namespace {

namespace fs = std::filesystem;

// Whether the canonical `path` lies inside the canonical `folder`.
bool inside(const fs::path& path, const fs::path& folder) {
  const fs::path relative = path.lexically_relative(folder);
  return !relative.empty() && *relative.begin() != "..";
}

}  // namespace

ModelFolder::ModelFolder(const fs::path& folder, std::string what)
    : folder_(folder.empty() ? "." : folder), what_(std::move(what)) {
  std::error_code ec;
  const fs::path root = fs::canonical(folder_, ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("{}the folder '{}' {}", prefix(), folder_.string(),
                    fs::exists(folder_) ? "cannot be read (" + ec.message() + ")" : "does not exist"));
  roots_.push_back(root);
  // huggingface_hub's cache: models--org--name/snapshots/REVISION/<file> are links into models--org--name/blobs/.
  if (root.parent_path().filename() == "snapshots")
    if (const fs::path blobs = fs::canonical(root.parent_path().parent_path() / "blobs", ec); !ec)
      roots_.push_back(blobs);
}

bool ModelFolder::has(const std::string& name) const {
  std::error_code ec;
  return fs::symlink_status(folder_ / name, ec).type() != fs::file_type::not_found;
}

bool ModelFolder::holds(const fs::path& target) const {
  return std::any_of(roots_.begin(), roots_.end(), [&](const fs::path& root) { return inside(target, root); });
}

// "<what>: " before a message, when something names the folder.
std::string ModelFolder::prefix() const { return what_.empty() ? "" : what_ + ": "; }

fs::path ModelFolder::file(const std::string& name, const std::string& named_by) const {
  const fs::path shown = folder_ / name;
  const fs::path written = fs::path(name).lexically_normal();
  if (name.empty() || written.is_absolute() || *written.begin() == "..")
    throw std::runtime_error(
        fmt::format("{}'{}' names '{}', which leaves the folder; the files of a model folder lie inside it: copy "
                    "the file into '{}' and name it there",
                    prefix(), (folder_ / named_by).string(), name, folder_.string()));
  const std::string by = named_by.empty() ? "" : fmt::format(" (named by {})", named_by);
  if (const std::string why = not_a_regular_file(shown); !why.empty())
    throw std::runtime_error(
        fmt::format("{}'{}'{} {}; the folder must hold it as a regular file (or a link to one): put the "
                    "model's own file there, e.g. download the model again",
                    prefix(), shown.string(), by, why));
  std::error_code ec;
  const fs::path target = fs::canonical(shown, ec);
  if (ec || !holds(target))
    throw std::runtime_error(
        fmt::format("{}'{}'{} is a link to '{}', outside the folder{}; copy the file into the folder in its place",
                    prefix(), shown.string(), by, ec ? shown.string() : target.string(),
                    roots_.size() > 1 ? " and its Hugging Face cache's blobs/" : ""));
  return shown;
}

std::string ModelFolder::read(const std::string& name, const std::string& named_by) const {
  return read_regular_file(file(name, named_by), what_);
}

}  // namespace ferry::formats
