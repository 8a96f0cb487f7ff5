// The user's cache folder for Ferry (token shards, the host device's measured rates): outside any source
// tree, so that a run never dirties the folder its data or config lives in.
#pragma once

#include <filesystem>

namespace ferry {

// $FERRY_CACHE_DIR, else $XDG_CACHE_HOME/ferry, else $HOME/.cache/ferry, else the temporary folder's ferry/.
// Not created here: writers create what they need.
std::filesystem::path ferry_cache_dir();

}  // namespace ferry
