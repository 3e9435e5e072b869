#include "meridian/core/files.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "meridian/core/error.h"

namespace meridian {

void write_file_atomically(const std::string& path, const std::string& text, const std::string& tmp_suffix) {
  const std::string tmp = path + tmp_suffix;
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) {
      std::remove(tmp.c_str());  // nothing half-written left behind
      throw SystemError("cannot write '" + tmp + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw SystemError("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

}  // namespace meridian
