// The pure parts of `meridian doctor`'s facts (ops/facts.h) on hand-made inputs: /proc texts, the
// environment filter, the file fingerprint. No MPI; nothing read from this machine's /proc.
#include "meridian/ops/facts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace meridian::ops {
namespace {

namespace fs = std::filesystem;

MemoryFacts meminfo(const std::string& text) {
  std::istringstream in(text);
  return parse_meminfo(in);
}

bool cpuinfo(const std::string& text) {
  std::istringstream in(text);
  return cpuinfo_has_native_bf16(in);
}

// FNV-1a 64 written out here, to check file_hash against, from meridian's offset basis (core/hash.h:
// 1469598103934665603, one digit short of the published 14695981039346656037; the fingerprints
// meridian has computed depend on it).
std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& bytes)
      : path(fs::temp_directory_path() / ("meridian_facts_test_" + std::to_string(::getpid()))) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { fs::remove(path); }
};

TEST(Facts, MeminfoTotalAndAvailableInBytes) {
  const auto m = meminfo(
      "MemTotal:       16318208 kB\n"
      "MemFree:          123456 kB\n"
      "MemAvailable:    8000000 kB\n"
      "HugePages_Total:       0\n"
      "Hugepagesize:       2048 kB\n");
  EXPECT_EQ(m.total, 16318208.0 * 1024);
  EXPECT_EQ(m.available, 8000000.0 * 1024);
  // A kernel without MemAvailable (before 3.14), or nothing readable: -1.
  const auto old = meminfo("MemTotal: 1024 kB\nMemFree: 512 kB\n");
  EXPECT_EQ(old.total, 1024.0 * 1024);
  EXPECT_EQ(old.available, -1);
  const auto none = meminfo("");
  EXPECT_EQ(none.total, -1);
  EXPECT_EQ(none.available, -1);
}

TEST(Facts, CgroupMemoryLimitLowersTotalAndAvailable) {
  const double gib = double(1 << 30);
  MemoryFacts host;
  host.total = 16 * gib;
  host.available = 12 * gib;
  // A 4 GiB job holding 3 GiB, 1 GiB of it inactive page cache: 2 GiB free.
  auto m = within_cgroup(host, 4 * gib, 3 * gib, 1 * gib, "/slurm/job_7");
  EXPECT_DOUBLE_EQ(m.total, 4 * gib);
  EXPECT_DOUBLE_EQ(m.available, 2 * gib);
  EXPECT_EQ(m.limit, "cgroup memory limit of /slurm/job_7");
  // The host's available memory still bounds it; usage beyond the limit gives 0, not a negative.
  host.available = 1 * gib;
  EXPECT_DOUBLE_EQ(within_cgroup(host, 4 * gib, 3 * gib, 1 * gib, "/g").available, 1 * gib);
  EXPECT_DOUBLE_EQ(within_cgroup(host, 4 * gib, 5 * gib, 0, "/g").available, 0);
  // No limit (v1's 2^63 - 4096, v2's "max" read as -1, or none at all): the host's facts unchanged.
  for (const double none : {9223372036854771712.0, -1.0, 0.0}) {
    m = within_cgroup(host, none, 3 * gib, 0, "/g");
    EXPECT_DOUBLE_EQ(m.total, 16 * gib);
    EXPECT_TRUE(m.limit.empty());
  }
}

TEST(Facts, CpuinfoNativeBf16FromTheFirstFlagsLine) {
  EXPECT_TRUE(cpuinfo("processor\t: 0\nflags\t\t: fpu vme avx512f avx512_bf16 sse\n"));
  EXPECT_TRUE(cpuinfo("processor\t: 0\nflags\t\t: fpu amx_bf16 amx_tile\n"));
  EXPECT_FALSE(cpuinfo("processor\t: 0\nflags\t\t: fpu vme avx2 avx512f\n"));
  EXPECT_FALSE(cpuinfo("processor\t: 0\nflags\t\t: fpu\nprocessor\t: 1\nflags\t\t: fpu avx512_bf16\n"));
  EXPECT_FALSE(cpuinfo("processor\t: 0\nFeatures\t: fp asimd bf16\n"));  // no flags line (aarch64)
  EXPECT_FALSE(cpuinfo(""));
}

TEST(Facts, NvidiaReleaseFromTheVersionLine) {
  EXPECT_EQ(nvidia_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:51 UTC 2024"),
            "550.54.15");
  EXPECT_EQ(nvidia_release(""), "");  // no driver: no file, nothing read
  EXPECT_EQ(nvidia_release("something else entirely"), "");
}

TEST(Facts, RelevantEnvironmentVariables) {
  for (const char* name : {"NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "UCX_TLS", "MERIDIAN_LOG", "CUDA_VISIBLE_DEVICES",
                           "OMP_NUM_THREADS", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_pml"})
    EXPECT_TRUE(relevant_env(name)) << name;
  // The launcher's own, the rest of the environment, and near misses.
  for (const char* name : {"OMPI_MCA_orte_hnp_uri", "OMPI_MCA_prte_launch", "OMPI_MCA_ess_base_jobid",
                           "OMPI_MCA_pmix_server", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
                           "OMPI_MCA_mpi_oversubscribe", "OMPI_MCA_plm_rsh_agent", "OMPI_MCA_routed",
                           "OMPI_COMM_WORLD_RANK", "PATH", "HOME", "OMP_PROC_BIND", "NCCL", "CUDA_VISIBLE_DEVICES_X"})
    EXPECT_FALSE(relevant_env(name)) << name;
}

TEST(Facts, FileHashIsFnv1aOfTheFirstBytes) {
  {
    TempFile f("abc");
    EXPECT_EQ(file_hash(f.path.string()), fnv1a_hex("abc"));
    EXPECT_EQ(file_hash(f.path.string(), 1), fnv1a_hex("a"));
    EXPECT_EQ(file_hash(f.path.string(), 0), fnv1a_hex(""));
  }
  {  // longer than file_hash's 1 MiB buffer, cut in the middle of its second read
    std::string bytes(3 << 20, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 2654435761u) >> 13);
    TempFile f(bytes);
    EXPECT_EQ(file_hash(f.path.string()), fnv1a_hex(bytes));
    const size_t limit = (1 << 20) + 12345;
    EXPECT_EQ(file_hash(f.path.string(), limit), fnv1a_hex(bytes.substr(0, limit)));
  }
  EXPECT_EQ(file_hash("/nonexistent/meridian_facts_test"), "unreadable");
}

}  // namespace
}  // namespace meridian::ops
