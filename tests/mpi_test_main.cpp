// main() for multi-rank GoogleTest binaries run under mpirun: one Runtime for the whole process,
// full output from rank 0, failures only from the other ranks (prefixed with the rank), and one
// verdict agreed by all ranks (exit 0 only if every test passed on every rank).
#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

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

namespace {
std::vector<std::string> g_temp_dirs;  // rank 0's shared_temp_dir()s, removed after the last test

class RemoveTempDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    runtime().barrier();
    for (const auto& dir : g_temp_dirs) std::filesystem::remove_all(dir);
  }
};
}  // namespace

std::string shared_temp_dir(const std::string& prefix) {
  std::string dir;
  if (runtime().rank() == 0) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("shared_temp_dir: mkdtemp " + pattern + " failed");
    dir = pattern;
    g_temp_dirs.push_back(dir);
  }
  return runtime().allgather(dir)[0];
}
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
  ::testing::AddGlobalTestEnvironment(new meridian::test::RemoveTempDirs);
  const int rc = RUN_ALL_TESTS();
  const bool ok = rt.all_true(rc == 0);
  if (rt.rank() == 0) std::printf("[mpi verdict] %s on all %d ranks\n", ok ? "PASSED" : "FAILED", rt.size());
  return ok ? 0 : 1;
}
