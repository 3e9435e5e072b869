// Who made a file: meridian's version and the command line, recorded in datasets and checkpoints.
#pragma once

#include <string>

namespace meridian {

// "0.1.0"
const char* version();
// Records the process's command line (main() calls it once). Not thread-safe against readers.
void set_command_line(int argc, char** argv);
// "meridian 0.1.0: meridian prep image-text --images ..." (arguments quoted when they contain spaces).
std::string created_by();

}  // namespace meridian
