#include "meridian/core/files.h"

#include <filesystem>
#include <fstream>

#include "meridian/core/error.h"

namespace meridian {

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) throw SystemError("cannot write '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw SystemError("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

}  // namespace meridian
