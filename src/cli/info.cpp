// `meridian info`: one row per rank, gathered on rank 0.
#include <iomanip>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "meridian/comm/runtime.h"

namespace meridian::cli {

Command info_command() {
  Command c;
  c.name = "info";
  c.reports_gpu_build = true;
  c.summary = "Show every rank's host, local rank, device, threads (and why) and bound CPUs (run under mpirun)";
  c.add_options = [](cxxopts::Options&) {};
  c.run = [](const cxxopts::ParseResult&, comm::Runtime& rt) {
    std::ostringstream row;
    row << std::left << std::setw(24) << rt.host() << std::right << std::setw(6) << rt.rank() << std::setw(12)
        << rt.local_rank() << std::setw(12) << rt.device().str() << std::setw(9) << rt.threads() << std::setw(12)
        << rt.bound_cpus();
    const auto rows = rt.gather_to_root(row.str());
    const auto whys = rt.gather_to_root(rt.thread_choice().why);
    const auto devices = rt.gather_to_root(rt.device_why());
    const auto builds = rt.gather_to_root((rt.gpu_build_refused() ? "REFUSED: " : "") + rt.gpu_build());
    if (rt.rank() == 0) {
      std::cout << "world size " << rt.size() << ", " << rt.node_count() << " node(s), comm timeout "
                << rt.comm_timeout_s() << " s\n"
                << std::left << std::setw(24) << "host" << std::right << std::setw(6) << "rank" << std::setw(12)
                << "local_rank" << std::setw(12) << "device" << std::setw(9) << "threads" << std::setw(12)
                << "bound_cpus"
                << "\n";
      for (const auto& r : rows) std::cout << r << "\n";
      for (size_t r = 0; r < whys.size(); ++r) std::cout << "rank " << r << " threads " << whys[r] << "\n";
      for (size_t r = 0; r < devices.size(); ++r) std::cout << "rank " << r << " device " << devices[r] << "\n";
      for (size_t r = 0; r < builds.size(); ++r)
        if (!builds[r].empty()) std::cout << "rank " << r << " gpu build " << builds[r] << "\n";
    }
    // A GPU this build cannot run: shown above, and the exit status says so (as doctor's FAIL does).
    return rt.all_true(!rt.gpu_build_refused()) ? 0 : 2;
  };
  return c;
}

}  // namespace meridian::cli
