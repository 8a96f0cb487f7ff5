// Console writes through stdio, each failure's errno kept per stream; the exit status and the one line
// about lost output, settled once at the end of main().
#include "foundation/console.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

namespace ferry::console {
namespace {

constexpr int kCauseUnknown = -1;  // std::cout's own flush failed (its errno is gone): the text was lost all the same
std::atomic<int> stdout_lost{0}, stderr_lost{0};  // first errno or kCauseUnknown; 0: nothing lost

std::atomic<int>* lost_slot(std::FILE* stream) {
  if (stream == stdout) return &stdout_lost;
  if (stream == stderr) return &stderr_lost;
  return nullptr;
}

// Keeps the first failure: the cause a user needs is what went wrong first (a full disk), not its sequels.
void record(std::FILE* stream, int error) {
  std::atomic<int>* slot = lost_slot(stream);
  int none = 0;
  if (slot) slot->compare_exchange_strong(none, error != 0 ? error : kCauseUnknown);
}

std::string cause(int error) { return error > 0 ? fmt::format(" ({})", std::strerror(error)) : std::string(); }

// What to do about stdout that lost the result.
std::string_view fix(int error) {
  if (error == EBADF) return "stdout is closed: send it to a file, or to /dev/null to discard it";
  if (error == ENOSPC || error == EFBIG || error == EDQUOT) return "free space where it goes, or send it elsewhere";
  return "send it somewhere that takes it";
}

std::string_view name_of(std::FILE* stream) { return stream == stdout ? "stdout" : "stderr"; }

// What a lost stream's line says: why, and that the files written (checkpoints, metrics, a shard) do not depend on it.
std::string lost_line(std::string_view program, std::FILE* stream) {
  return fmt::format(
      "{}: warning: some output to {} could not be written{}; the files this command writes do not "
      "depend on it\n",
      program, name_of(stream), cause(lost(stream)));
}

}  // namespace

void start() {
  std::signal(SIGPIPE, SIG_IGN);
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int held = ::open("/dev/null", O_RDONLY);  // the lowest free descriptor: fd itself
      if (held >= 0 && held != fd) ::close(held);
    }
}

bool write(std::FILE* stream, std::string_view text) {
  if (!stream) return false;
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stream) == text.size() && !std::ferror(stream)) return true;
  record(stream, errno);
  return false;
}

bool flush(std::FILE* stream) {
  errno = 0;
  if (std::fflush(stream) == 0 && !std::ferror(stream)) return true;
  record(stream, errno);
  return false;
}

int lost(std::FILE* stream) {
  const std::atomic<int>* slot = lost_slot(stream);
  return slot ? slot->load() : 0;
}

int finish(int status, bool stdout_is_result, std::string_view program) {
  const bool out_ok = flush(stdout), err_ok = flush(stderr);
  if (stdout_is_result && !out_ok) {
    if (lost(stdout) == EPIPE) return status == 0 ? kReaderLeft : status;
    write(stderr, fmt::format("{}: error: the output could not be written to stdout{}; {}\n", program,
                              cause(lost(stdout)), fix(lost(stdout))));
    return status == 0 ? kOutputLost : status;
  }
  if (!out_ok && lost(stdout) != EPIPE) write(stderr, lost_line(program, stdout));
  if (!err_ok && !stdout_is_result && lost(stderr) != EPIPE && write(stdout, lost_line(program, stderr))) flush(stdout);
  return status;
}

}  // namespace ferry::console
