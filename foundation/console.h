// Console output that a stream unable to take it (2>/dev/full, >&-, a pipe whose reader has left) cannot
// stop: no write throws, stdout and stderr each remember their first failure, and finish() turns that into
// the exit status of a command whose result is its output. Every line ferry and ferry-bench print goes here.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace ferry::console {

// Status of a command whose output could not be written (sysexits.h's EX_IOERR): a full disk, a closed stdout.
inline constexpr int kOutputLost = 74;
// Status of a command whose reader left (`ferry sample | head -1`): what a shell shows for a SIGPIPE death.
inline constexpr int kReaderLeft = 141;

// Run first in main(): SIGPIPE ignored, so a reader that leaves is an error a write sees (EPIPE), not a death
// mid-training; and a closed stdin, stdout or stderr held by /dev/null opened read-only, so that writes to it
// still fail (EBADF) and no file opened later takes its descriptor and receives the console's lines.
void start();

// Writes `text` to `stream`; never throws. False when it, or text buffered before it, was lost.
bool write(std::FILE* stream, std::string_view text);

template <typename... Args>
void print(std::FILE* stream, fmt::format_string<Args...> format, Args&&... args) {
  write(stream, fmt::vformat(format, fmt::make_format_args(args...)));
}
template <typename... Args>
void print(fmt::format_string<Args...> format, Args&&... args) {
  write(stdout, fmt::vformat(format, fmt::make_format_args(args...)));
}

// Flushes `stream`; false when anything written to it so far was lost (std::cout's writes included).
bool flush(std::FILE* stream);

// The errno of stdout's or stderr's first lost write (ENOSPC, EBADF, EPIPE); 0 while none was lost.
int lost(std::FILE* stream);

// The program's exit status once stdout and stderr are flushed. When `stdout_is_result` (plan, eval, sample,
// config, --help) and stdout lost text, a status of 0 becomes kOutputLost with a line on stderr naming the
// cause, or kReaderLeft, quietly, when the reader left; any other status already says what failed. Otherwise
// (train: its result is its checkpoints) the status stands, and a stream that lost text is named in one
// line on the other, where that one still works. `program`: "ferry" or "ferry-bench", for that line.
int finish(int status, bool stdout_is_result, std::string_view program);

}  // namespace ferry::console
