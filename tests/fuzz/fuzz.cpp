#include "fuzz.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <typeinfo>

#include "meridian/core/error.h"

namespace meridian::fuzz {
namespace fs = std::filesystem;

namespace {
// MERIDIAN_FUZZ_VERBOSE=1: each refusal's message (to see that a seed is read, not refused).
void refused(const char* target, const char* what) {
  static const bool verbose = std::getenv("MERIDIAN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz %s: refused: %s\n", target, what);
}

// The harness's size cap: LibTorch's CPU tensors of one input may total kTensorCap bytes (allocated,
// frees not subtracted). A model YAML asking for wider or larger-kernel layers than that is refused
// the way a machine without the memory refuses it (c10::Error from the allocator, which the graph
// builder turns into a ConfigError naming the row); it is not a slow input. 128 MB holds every
// shipped model at scale n (YOLO11n: 10 MB) and any input the readers size from a file under 1 MB.
constexpr size_t kTensorCap = size_t(128) << 20;
size_t tensor_bytes = 0;  // this input's, reset by run_one

struct CappedAllocator final : c10::Allocator {
  c10::Allocator* base;
  explicit CappedAllocator(c10::Allocator* b) : base(b) {}
  c10::DataPtr allocate(size_t n) override {
    tensor_bytes += n;
    TORCH_CHECK(tensor_bytes <= kTensorCap, "the fuzz harness's size cap: this input's tensors pass ", kTensorCap >> 20,
                " MB (", n, " bytes asked)");
    return base->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base->raw_deleter(); }
  void copy_data(void* dest, const void* src, size_t count) const override { base->copy_data(dest, src, count); }
};

void install_cap() {
  static CappedAllocator capped(c10::GetDefaultCPUAllocator());
  static const bool installed = (c10::SetCPUAllocator(&capped, /*priority=*/1), true);
  (void)installed;
}
}  // namespace

// libFuzzer's fork mode keeps only a crashing child's "deadly signal" line, so the message also goes
// to MERIDIAN_FUZZ_LOG when set.
void finding(const char* target, const std::string& what, size_t size) {
  std::fprintf(stderr, "fuzz %s: %s\n", target, what.c_str());
  if (const char* log = std::getenv("MERIDIAN_FUZZ_LOG"))
    if (FILE* f = std::fopen(log, "a")) {
      std::fprintf(f, "pid %d, input of %zu bytes: %s\n", int(::getpid()), size, what.c_str());
      std::fclose(f);
    }
  std::abort();
}

void run_one(const char* target, TargetFn fn, const uint8_t* data, size_t size) {
  install_cap();
  tensor_bytes = 0;
  try {
    fn(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const UserError& e) {
    refused(target, e.what());
  } catch (const SystemError& e) {
    refused(target, e.what());
  } catch (const std::exception& e) {
    finding(target,
            std::string("an exception other than meridian's escaped the reader: ") + typeid(e).name() + ": " + e.what(),
            size);
  } catch (...) {
    finding(target, "a non-std exception escaped the reader", size);
  }
}

namespace {
struct Scratch {
  std::string dir;
  Scratch() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = (base / ("meridian-fuzz-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
}  // namespace

const std::string& scratch() {
  static Scratch s;
  return s.dir;
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = scratch() + "/" + name;
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out.flush()) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "fuzz: cannot read %s\n", path.c_str());
    std::abort();
  }
  return bytes;
}

std::string copy_dir(const std::string& from, const std::string& name) {
  for (const auto& e : fs::recursive_directory_iterator(from))
    if (e.is_regular_file()) write(name + "/" + fs::relative(e.path(), from).string(), read(e.path().string()));
  return scratch() + "/" + name;
}

size_t take_choice(std::string& bytes, size_t n) {
  if (bytes.empty()) return 0;
  const size_t c = static_cast<unsigned char>(bytes[0]) % n;
  bytes.erase(0, 1);
  return c;
}

std::map<std::string, TargetFn>& registry() {
  static std::map<std::string, TargetFn> r;
  return r;
}

Registrar::Registrar(const char* name, TargetFn fn) { registry()[name] = fn; }

}  // namespace meridian::fuzz
