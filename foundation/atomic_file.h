// Checked file output shared by every writer: AtomicFile writes a whole file under a temporary name beside
// it and renames it into place; AppendFile grows a file line by line (metrics). Errors name the file and why.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace ferry {

// A whole file written so that the target holds either its old content or all of the new one: the bytes
// go to '<target>.tmp' in the same folder; finish() fsyncs and closes it (where a full disk may show
// only now), commit() renames it into place. Destroyed before commit() (an error on the way), it removes
// the temporary. Files that belong together (an export) finish all, then commit all. A target that is a
// device or a pipe (/dev/stdout, /dev/null) is written directly; a symbolic link's destination is
// replaced, not the link.
class AtomicFile {
 public:
  // `what` names the file's role at the start of every error ("--json", "export", "token shard").
  AtomicFile(const std::filesystem::path& target, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void finish();
  void commit();  // finishes first if need be

  const std::filesystem::path& temporary() const { return temporary_; }  // empty when written directly

 private:
  [[noreturn]] void fail(const std::string& step, int error) const;  // step: what failed ("" for the file itself)
  std::filesystem::path target_, temporary_;
  std::string what_, shown_;  // shown_: the target as given, quoted, for errors
  int fd_ = -1;
  bool finished_ = false, committed_ = false;
};

// The common case: `bytes` as the whole of `target`, atomically.
void write_file_atomically(const std::filesystem::path& target, std::string_view bytes, const std::string& what);

// A file a run grows one line at a time (JSON lines), so a temporary and a rename do not fit: each line
// goes to the kernel in one checked write; a failed one is cut off again, so the file keeps only whole lines.
class AppendFile {
 public:
  // truncate: start empty; otherwise keep what is there (a resumed run).
  AppendFile(const std::filesystem::path& path, bool truncate, std::string what);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends `line` and a newline; throws naming the file when the write fails.
  void append_line(std::string_view line);
  // Closes, checking that nothing was lost on the way (some file systems report write errors only here).
  void close();

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
};

}  // namespace ferry
