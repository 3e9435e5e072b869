// Writing small text files so that a reader never sees half of one. Not collective.
#pragma once

#include <string>

namespace meridian {

// Writes `text` to <path><tmp_suffix>, then renames it over `path`: `path` holds either its old
// contents or all of the new ones. SystemError naming the file when either step fails. Writers that
// may write the same path at once give each a suffix of its own.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& tmp_suffix = ".tmp");

}  // namespace meridian
