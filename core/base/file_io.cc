// Bounded whole-file reads: see file_io.h.
#include "core/base/file_io.h"

#include <fstream>
#include <sstream>

namespace ferry {

Result<std::string> ReadFileAtMost(const std::string& path, int64_t max_bytes,
                                   const std::string& what, const std::string& limit_name) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return IoError("cannot open " + what + " '" + path + "' for reading");
  const std::streamoff size = in.tellg();
  if (size < 0) return IoError("cannot size " + what + " '" + path + "'");
  if (size > max_bytes) {
    return InvalidArgument(what + " '" + path + "' has " + std::to_string(size) +
                           " bytes, over the limit of " + std::to_string(max_bytes) + " (" +
                           limit_name + ")");
  }
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + what + " '" + path + "'");
  return text.str();
}

}  // namespace ferry
