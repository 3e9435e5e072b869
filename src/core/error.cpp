#include "meridian/core/error.h"

#include <unistd.h>

#include <climits>
#include <sstream>

namespace meridian {

ConfigError::ConfigError(const std::string& origin, const std::string& field, const std::string& problem)
    : UserError(origin + ": field '" + field + "': " + problem), origin_(origin), field_(field) {}

namespace {
ProcessIdentity& mutable_identity() {
  static ProcessIdentity id = [] {
    ProcessIdentity p;
    char buf[HOST_NAME_MAX + 1] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) p.host = buf;
    return p;
  }();
  return id;
}
}  // namespace

const ProcessIdentity& process_identity() { return mutable_identity(); }

void set_process_identity(int rank, int world_size) {
  mutable_identity().rank = rank;
  mutable_identity().world_size = world_size;
}

std::string where() {
  const auto& id = process_identity();
  std::ostringstream os;
  os << "[rank ";
  if (id.rank < 0)
    os << "?";
  else
    os << id.rank << "/" << id.world_size;
  os << " @ " << id.host << "]";
  return os.str();
}

namespace detail {
void throw_check_failure(const char* lib, const char* expr, const std::string& lib_message, const char* file, int line,
                         const char* hint) {
  std::ostringstream os;
  os << where() << " " << lib << " error at " << file << ":" << line << ": `" << expr << "` failed: " << lib_message;
  if (hint && *hint) os << " (hint: " << hint << ")";
  throw SystemError(os.str());
}
}  // namespace detail

}  // namespace meridian
