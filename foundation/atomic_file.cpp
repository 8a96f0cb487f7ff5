// AtomicFile and AppendFile on POSIX descriptors: write(2) and close(2) report the errno that an ofstream
// loses, and no user-space buffer can hold bytes back until a destructor that cannot report.
#include "foundation/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ferry {
namespace {

std::string in_quotes(const std::filesystem::path& p) {
  std::string text(1, '\'');  // built up, not `"'" + ...`, which sets off a false -Wrestrict in GCC 12
  text += p.string();
  text += '\'';
  return text;
}

// Writes all of `bytes` (write(2) may write fewer); returns 0 or the errno of the failure.
int write_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return 0;
}

// The file the bytes should end up in: a symbolic link's destination (renaming over the link would
// replace the link with a file).
std::filesystem::path resolve_links(const std::filesystem::path& target) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(target, ec)) return target;
  const auto resolved = std::filesystem::canonical(target, ec);
  return ec ? target : resolved;  // a dangling link is replaced
}

}  // namespace

AtomicFile::AtomicFile(const std::filesystem::path& target, std::string what)
    : target_(resolve_links(target)), what_(std::move(what)), shown_(in_quotes(target)) {
  if (target_ != target) shown_ += " (a link to " + in_quotes(target_) + ")";
  struct stat st {};
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw std::runtime_error(what_ + ": cannot write " + shown_ + ": it is a folder");
  if (exists && !S_ISREG(st.st_mode)) {  // a device or a pipe: no rename into it is possible, write as is
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail("opening it", errno);
    return;
  }
  if (exists && ::access(target_.c_str(), W_OK) != 0) fail("", errno);  // a rename would bypass the file's permissions
  temporary_ = target_.string() + ".tmp";
  ::unlink(temporary_.c_str());  // a leftover of a killed writer, or a link that O_EXCL must not follow
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int error = errno;
    temporary_.clear();  // not ours to remove
    fail("creating its temporary " + in_quotes(target_.string() + ".tmp"), error);
  }
  if (exists) (void)::fchmod(fd_, st.st_mode & 07777);  // the replacement keeps the file's permissions
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& step, int error) const {
  throw std::runtime_error(what_ + ": cannot write " + shown_ + ": " + (step.empty() ? "" : step + " failed: ") + std::strerror(error) +
                           (temporary_.empty() ? "" : "; the temporary is removed and the file is as it was"));
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (finished_) throw std::logic_error("AtomicFile::write after finish");
  if (const int error = write_all(fd_, data, bytes)) fail(temporary_.empty() ? "writing" : "writing its temporary", error);
}

void AtomicFile::finish() {
  if (finished_) return;
  if (!temporary_.empty() && ::fsync(fd_) != 0) fail("syncing its temporary to disk", errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail(temporary_.empty() ? "closing it" : "closing its temporary", errno);
  finished_ = true;
}

void AtomicFile::commit() {
  if (committed_) throw std::logic_error("AtomicFile::commit twice");
  finish();
  committed_ = true;
  if (temporary_.empty()) return;  // written directly
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    committed_ = false;  // the destructor removes the temporary
    fail("renaming its temporary into place", errno);
  }
  // The rename is durable once the folder is; some file systems cannot sync a folder (EINVAL): nothing to do.
  const std::filesystem::path folder = target_.has_parent_path() ? target_.parent_path() : ".";
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  const int sync_rc = ::fsync(dir), sync_error = errno;
  ::close(dir);
  if (sync_rc != 0 && sync_error != EINVAL)
    throw std::runtime_error(what_ + ": " + shown_ + " was written but syncing its folder failed: " + std::strerror(sync_error));
}

void write_file_atomically(const std::filesystem::path& target, std::string_view bytes, const std::string& what) {
  AtomicFile file(target, what);
  file.write(bytes);
  file.commit();
}

AppendFile::AppendFile(const std::filesystem::path& path, bool truncate, std::string what) : path_(path), what_(std::move(what)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0666);
  if (fd_ < 0) throw std::runtime_error(what_ + ": cannot open " + in_quotes(path_) + " for writing: " + std::strerror(errno));
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append_line(std::string_view line) {
  if (fd_ < 0) throw std::logic_error("AppendFile::append_line after close");
  std::string bytes(line);
  bytes += '\n';
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  const int error = write_all(fd_, bytes.data(), bytes.size());
  if (error == 0) return;
  // Part of the line may have landed: cut it off, so that every line of the file is whole JSON.
  struct stat st {};
  const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  const bool cut = regular && before >= 0 && ::ftruncate(fd_, before) == 0;
  throw std::runtime_error(what_ + ": writing " + in_quotes(path_) + " failed: " + std::strerror(error) +
                           (cut ? "; the file keeps its complete lines" : ""));
}

void AppendFile::close() {
  if (fd_ < 0) return;
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw std::runtime_error(what_ + ": closing " + in_quotes(path_) + " failed: " + std::strerror(errno));
}

}  // namespace ferry
