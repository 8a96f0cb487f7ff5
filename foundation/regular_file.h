// Reading a whole file only when it is a regular one: a directory, FIFO or device named where a file is
// expected is refused by name before a byte is read (a FIFO blocks for ever, a directory read as bytes
// exhausts memory). In foundation/ beside atomic_file: dataset/ and engine/ read files too.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry {

// What `path` is when it is no regular file, links followed: "is a directory, not a file", "is a FIFO (a
// named pipe), not a file", "does not exist", ...; empty when it is one.
std::string not_a_regular_file(const std::filesystem::path& path);

// The whole of the regular file `path`; anything else is an error "<what>: '<path>' is a FIFO (a named
// pipe), not a file; ..." (`what`: the key or option that named it; may be empty). Opened without blocking
// and checked on the open descriptor, so a FIFO put in the file's place meanwhile cannot hang it either.
std::string read_regular_file(const std::filesystem::path& path, const std::string& what);
std::vector<std::byte> read_regular_file_bytes(const std::filesystem::path& path, const std::string& what);

}  // namespace ferry
