// meridian_fuzz_replay TARGET PATH...: runs fuzz target TARGET (fuzz.h) on every file of PATH (a
// file, or a directory walked recursively, in name order), as libFuzzer runs a corpus. Fails (exit 1)
// on an input slower than MERIDIAN_FUZZ_LIMIT_S seconds (default 10: a hang, not a speed verdict);
// an escaped exception or a crash aborts. Without AddressSanitizer (which reserves terabytes of
// address space), the process may map at most 2 GB more than it had at start, as libFuzzer's
// -rss_limit_mb=2048 allows: an input that makes a reader allocate more fails here too (std::bad_alloc
// escapes), even where the kernel would have overcommitted it. `--list` prints the targets.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz.h"

namespace fs = std::filesystem;

namespace {
// The address space mapped now (/proc/self/status VmSize), in bytes; 0 when unknown.
uint64_t mapped_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (in >> key)
    if (key == "VmSize:" && in >> kb) return kb << 10;
  return 0;
}

void limit_memory() {
#if !defined(__SANITIZE_ADDRESS__)
  if (const uint64_t now = mapped_bytes()) {
    const rlimit limit{now + (uint64_t(2) << 30), now + (uint64_t(2) << 30)};
    setrlimit(RLIMIT_AS, &limit);
  }
#endif
}
}  // namespace

int main(int argc, char** argv) {
  auto& targets = meridian::fuzz::registry();
  if (argc == 2 && std::string(argv[1]) == "--list") {
    for (const auto& [name, fn] : targets) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc < 3 || !targets.count(argv[1])) {
    std::fprintf(stderr, "usage: %s TARGET FILE|DIR...   (--list: the targets)\n", argv[0]);
    return 2;
  }
  const char* limit_env = std::getenv("MERIDIAN_FUZZ_LIMIT_S");
  const double limit = limit_env ? std::atof(limit_env) : 10.0;
  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else if (fs::is_regular_file(argv[i])) {
      inputs.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  limit_memory();
  if (inputs.empty()) {
    std::fprintf(stderr, "%s: no inputs under the paths given\n", argv[1]);
    return 2;
  }
  int slow = 0;
  double slowest = 0;
  std::string slowest_name;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto t0 = std::chrono::steady_clock::now();
    meridian::fuzz::run_one(argv[1], targets[argv[1]], reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > slowest) slowest = s, slowest_name = path.string();
    if (s > limit) {
      std::fprintf(stderr, "%s: %.2f s, over the %.1f s limit\n", path.c_str(), s, limit);
      ++slow;
    }
  }
  std::printf("%s: %zu inputs, slowest %.3f s (%s)%s\n", argv[1], inputs.size(), slowest, slowest_name.c_str(),
              slow ? ", some over the limit" : "");
  return slow ? 1 : 0;
}
