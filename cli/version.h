// `ferry --version`: the release, the commit, the CUDA build and what this machine offers it.
#pragma once

#include <string>

namespace ferry::cli {

// Several lines: "ferry <version> (git <commit>, <type> build)", the CUDA build (toolkit, architectures, cuDNN SDPA)
// with the GPUs visible now, and the CPU AdamW kernel this CPU gets.
std::string version_text();

}  // namespace ferry::cli
