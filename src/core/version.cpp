#include "meridian/core/version.h"

#include "meridian/build_config.h"

namespace meridian {

namespace {
std::string& stored_command_line() {
  static std::string line;
  return line;
}
}  // namespace

const char* version() { return MERIDIAN_VERSION; }

void set_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i == 0) arg = "meridian";
    if (arg.find_first_of(" \t\"'") != std::string::npos) arg = "'" + arg + "'";
    line += (i ? " " : "") + arg;
  }
  stored_command_line() = line;
}

std::string created_by() { return std::string("meridian ") + MERIDIAN_VERSION + ": " + stored_command_line(); }

}  // namespace meridian
