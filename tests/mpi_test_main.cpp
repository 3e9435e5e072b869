// main() for multi-rank GoogleTest binaries run under mpirun: one Runtime for the whole process,
// full output from rank 0, failures only from the other ranks (prefixed with the rank), and one
// verdict agreed by all ranks (exit 0 only if every test passed on every rank).
#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "meridian/core/error.h"

namespace {
meridian::comm::Runtime* g_runtime = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "%s %s:%d: %s\n", meridian::where().c_str(), r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
};
}  // namespace

namespace meridian::test {
comm::Runtime& runtime() { return *g_runtime; }
}  // namespace meridian::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  meridian::comm::RuntimeOptions options;
  // CPU by default; MERIDIAN_TEST_DEVICE=cuda on GPU machines (then NCCL is tested too).
  const char* device = std::getenv("MERIDIAN_TEST_DEVICE");
  options.device = device ? device : "cpu";
  options.comm_timeout_s = 120;  // a hang in a test ends the job instead of blocking CI
  meridian::comm::Runtime rt(&argc, &argv, options);
  g_runtime = &rt;
  if (rt.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter);
  }
  const int rc = RUN_ALL_TESTS();
  const bool ok = rt.all_true(rc == 0);
  if (rt.rank() == 0) std::printf("[mpi verdict] %s on all %d ranks\n", ok ? "PASSED" : "FAILED", rt.size());
  return ok ? 0 : 1;
}
