#include "fuzz.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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
}  // namespace

void run_one(const char* target, TargetFn fn, const uint8_t* data, size_t size) {
  try {
    fn(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const UserError& e) {
    refused(target, e.what());
  } catch (const SystemError& e) {
    refused(target, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz %s: an exception other than meridian's escaped the reader: %s: %s\n", target,
                 typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz %s: a non-std exception escaped the reader\n", target);
    std::abort();
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
