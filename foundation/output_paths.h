// Outputs never over inputs: before a command writes anything, each path it writes is checked against the
// files and folders the same command reads, and against its other outputs (train, plan, export, tokenize).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry {

struct PathUse {
  enum class Kind {
    Input,         // a file or folder the command reads
    Output,        // a file it writes
    OutputFolder,  // a folder it writes files of its own into (a checkpoint dir, an export): it may hold inputs
  };
  std::string name;            // as messages name it: "--metrics", "data.path", "the checkpoint resumed (--resume)"
  std::filesystem::path path;  // empty: not used, nothing to check
  Kind kind = Kind::Input;
};

// Throws std::runtime_error, naming both paths and the fix, when an output is an existing folder (an output
// file), is an input (the same file under any name: links, "..", hard links), holds one (an output file), or
// lies inside an input folder; or when two outputs are one file, or one lies inside another output file.
// Devices and pipes (/dev/null, /dev/stdout) are never in the way.
void refuse_outputs_over_inputs(const std::vector<PathUse>& uses);

}  // namespace ferry
