// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition), as the
// `tokenizers` NFC normalizer (Qwen2's) applies it, from tables generated out of Python's unicodedata.
#pragma once

#include <string>
#include <string_view>

namespace ferry::dataset {

// `utf8` in NFC. Text that is not valid UTF-8 is returned as it is (the tokenizers library reads only valid
// UTF-8; Ferry's byte-level tokenizers still encode the bytes).
std::string nfc(std::string_view utf8);

}  // namespace ferry::dataset
