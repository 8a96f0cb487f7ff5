// A full disk for the tests of writers, without root or a small file system: RLIMIT_FSIZE makes a write
// past the limit fail (EFBIG, "File too large") as a full disk fails (ENOSPC), in the middle of a file.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <cstdint>

namespace ferry::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);  // the write fails instead of the process being killed
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limited = old_;
    limited.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

}  // namespace ferry::testing
