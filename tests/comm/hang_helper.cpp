// Test helper for watchdog_mpi_test.sh: makes a collective that can never complete.
//   skip: rank 0 never calls the allreduce (it stays alive but busy); the others must abort via the
//         watchdog after --comm-timeout (2 s) with a message naming the operation.
//   die:  rank 1 exits abnormally before the allreduce; the others must not hang.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "skip";
  meridian::comm::RuntimeOptions options;
  options.device = "cpu";
  options.comm_timeout_s = mode == "skip" ? 2 : 20;
  meridian::comm::Runtime rt(&argc, &argv, options);
  auto comm = meridian::comm::make_communicator(rt, meridian::comm::Backend::MPI);
  auto t = at::ones({1024}, at::kFloat);
  comm->allreduce(t);  // one collective that works
  if (mode == "skip" && rt.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(90));  // hung rank
  } else if (mode == "die" && rt.rank() == 1) {
    std::_Exit(9);  // crashed rank
  } else {
    comm->allreduce(t);
  }
  std::printf("rank %d: unexpected: the broken collective completed\n", rt.rank());
  return 0;
}
