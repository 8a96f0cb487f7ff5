// read_regular_file: open with O_NONBLOCK (opening a FIFO with no writer would block), check the descriptor
// is a regular file, then read it whole; every refusal says what the path is instead.
#include "foundation/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ferry {
namespace {

namespace fs = std::filesystem;

// What a path of this type is, as the end of "'<path>' ...".
std::string described(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular: return "";
    case fs::file_type::not_found: return "does not exist";
    case fs::file_type::directory: return "is a directory, not a file";
    case fs::file_type::fifo: return "is a FIFO (a named pipe), not a file";
    case fs::file_type::character:
    case fs::file_type::block: return "is a device, not a file";
    case fs::file_type::socket: return "is a socket, not a file";
    default: return "is not a regular file";
  }
}

fs::file_type type_of(mode_t mode) {
  if (S_ISREG(mode)) return fs::file_type::regular;
  if (S_ISDIR(mode)) return fs::file_type::directory;
  if (S_ISFIFO(mode)) return fs::file_type::fifo;
  if (S_ISCHR(mode)) return fs::file_type::character;
  if (S_ISBLK(mode)) return fs::file_type::block;
  if (S_ISSOCK(mode)) return fs::file_type::socket;
  return fs::file_type::unknown;
}

[[noreturn]] void refuse(const fs::path& path, const std::string& what, const std::string& why) {
  throw std::runtime_error((what.empty() ? "" : what + ": ") + "'" + path.string() + "' " + why +
                           "; name a regular file");
}

// The descriptor of an open file, closed when it goes.
struct OpenFile {
  int fd;
  ~OpenFile() { ::close(fd); }
};

// Up to `n` bytes into `into`; 0 at the end of the file.
size_t read_some(int fd, void* into, size_t n, const fs::path& path, const std::string& what) {
  for (;;) {
    const ssize_t got = ::read(fd, into, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) refuse(path, what, std::string("cannot be read (") + std::strerror(errno) + ")");
  }
}

template <class Buffer>
Buffer read_whole(const fs::path& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) refuse(path, what, not_a_regular_file(path));  // says whether a link leads nowhere
    refuse(path, what, std::string("cannot be opened (") + std::strerror(error) + ")");
  }
  const OpenFile file{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) refuse(path, what, std::string("cannot be read (") + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) refuse(path, what, described(type_of(st.st_mode)));
  // Sized once from fstat: a copy of a weights file's gigabytes would double its memory. A file that grew
  // meanwhile is read on to its end.
  Buffer bytes(static_cast<size_t>(st.st_size), {});
  size_t done = 0;
  for (size_t n = 1; n > 0 && done < bytes.size(); done += n)
    n = read_some(fd, bytes.data() + done, bytes.size() - done, path, what);
  char more[4096];
  for (size_t n = 1; n > 0 && done == bytes.size();) {
    n = read_some(fd, more, sizeof more, path, what);
    bytes.insert(bytes.end(), reinterpret_cast<const typename Buffer::value_type*>(more),
                 reinterpret_cast<const typename Buffer::value_type*>(more + n));
    done += n;
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace

std::string not_a_regular_file(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec && status.type() != fs::file_type::not_found) return "cannot be read (" + ec.message() + ")";
  if (status.type() == fs::file_type::not_found && fs::is_symlink(fs::symlink_status(path, ec)))
    return "is a link to '" + fs::read_symlink(path, ec).string() + "', which does not exist";
  return described(status.type());
}

std::string read_regular_file(const fs::path& path, const std::string& what) {
  return read_whole<std::string>(path, what);
}

std::vector<std::byte> read_regular_file_bytes(const fs::path& path, const std::string& what) {
  return read_whole<std::vector<std::byte>>(path, what);
}

}  // namespace ferry
