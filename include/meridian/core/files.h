// Writing small text files so that a reader never sees half of one. Not collective.
#pragma once

#include <string>

namespace meridian {

// Writes `text` to <path>.tmp, then renames it over `path`: `path` holds either its old contents or
// all of the new ones. SystemError naming the file when either step fails.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace meridian
