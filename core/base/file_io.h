// Reading a whole input file with a size limit checked first: every file ferry reads (layouts,
// topologies, configs, cluster descriptions, EPLB maps) is untrusted input, and one that is too
// large is refused by name before anything is read or allocated for it.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace ferry {

// The contents of the file at `path`, or kInvalidArgument when it is larger than `max_bytes`
// (naming `what`, the path, its size and `limit_name`, the constant a reader can look up), or
// kIoError when it cannot be opened or read. Blocking; reads the file once.
Result<std::string> ReadFileAtMost(const std::string& path, int64_t max_bytes,
                                   const std::string& what, const std::string& limit_name);

}  // namespace ferry
