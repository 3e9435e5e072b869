#include "meridian/comm/agree.h"

#include <stdexcept>

#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"

namespace meridian::comm::detail {

std::pair<int, std::string> lowest_failure(const Runtime& runtime, const OwnComm* own, bool failed,
                                           const std::string& message) {
  // A leading mark, so that a failure whose what() is empty still counts as one.
  const std::string mine = failed ? "!" + message : std::string();
  const auto all = own ? allgather_strings(runtime, own->get(), mine) : runtime.allgather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) return {int(r), all[r].substr(1)};
  return {-1, ""};
}

void fail_did_not_throw() { throw std::logic_error("comm::agree: the fail callback returned instead of throwing"); }

}  // namespace meridian::comm::detail
