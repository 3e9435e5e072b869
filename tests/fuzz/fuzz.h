// Fuzz targets (issue 55): each reader of outside bytes, called from bytes up to where a tensor of
// the input's size would be allocated. A target is one file, tests/fuzz/<name>.cpp:
//
//   MERIDIAN_FUZZ_TARGET(safetensors) { fuzz::write("m.safetensors", bytes); ... }
//
// Built two ways (tests/fuzz/CMakeLists.txt):
//  * libFuzzer (MERIDIAN_FUZZ=ON, clang, ASan + UBSan; tests/fuzz/build.sh): one binary per target,
//    the macro defines LLVMFuzzerTestOneInput;
//  * replay (the normal build): every target in one binary, meridian_fuzz_replay TARGET FILE|DIR...,
//    which ctest runs over each target's seed corpus and regression cases.
//
// The oracle: a reader may refuse bytes only with meridian's own errors (UserError and its
// subclasses, SystemError), whose messages name the file and field. Any other exception escaping a
// target (a std::out_of_range, nlohmann's or yaml-cpp's, c10::Error) is a finding, as are crashes,
// sanitizer reports, inputs slower than a second and allocations over 2 GB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace meridian::fuzz {

using TargetFn = void (*)(std::string bytes);

// Runs `fn` on the input: meridian's errors are a refusal (returns normally); another exception is
// reported (its type and message) and aborts.
void run_one(const char* target, TargetFn fn, const uint8_t* data, size_t size);

// A finding: prints `what` and aborts (the crash libFuzzer records with its input). With
// MERIDIAN_FUZZ_LOG=FILE the message is also appended to FILE (tests/fuzz/campaign.sh sets it).
[[noreturn]] void finding(const char* target, const std::string& what, size_t size);

// A scratch directory of this process (under /dev/shm when it exists), made on first use and
// removed at exit; targets write the input there under the file name the reader expects.
const std::string& scratch();
// Writes `bytes` to scratch()/<name> (replacing it) and returns the path.
std::string write(const std::string& name, const std::string& bytes);
// A file's bytes. With write, what the targets use to set up their directories: C++ streams retry a
// read or write that libFuzzer's SIGALRM (its -timeout clock) interrupts; std::filesystem::copy_file
// fails with EINTR instead (a harness crash the campaign once reported for report_run).
std::string read(const std::string& path);
// Copies the directory `from` (tests/fuzz/base/...) to scratch()/<name>, file by file through read and
// write; returns the copy's path.
std::string copy_dir(const std::string& from, const std::string& name);

// The first byte of the input chooses among `n` variants (which file of a directory, which split):
// returns it modulo n and removes it from `bytes`; 0 for an empty input.
size_t take_choice(std::string& bytes, size_t n);

// Replay: the registry of targets linked into meridian_fuzz_replay.
struct Registrar {
  Registrar(const char* name, TargetFn fn);
};
std::map<std::string, TargetFn>& registry();

}  // namespace meridian::fuzz

#ifdef MERIDIAN_LIBFUZZER
#define MERIDIAN_FUZZ_REGISTER(name)                                        \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    meridian::fuzz::run_one(#name, meridian_fuzz_##name, data, size);       \
    return 0;                                                               \
  }
#else
#define MERIDIAN_FUZZ_REGISTER(name) \
  static meridian::fuzz::Registrar meridian_fuzz_registrar_##name(#name, meridian_fuzz_##name);
#endif

#define MERIDIAN_FUZZ_TARGET(name)                     \
  static void meridian_fuzz_##name(std::string bytes); \
  MERIDIAN_FUZZ_REGISTER(name)                         \
  static void meridian_fuzz_##name(std::string bytes)
