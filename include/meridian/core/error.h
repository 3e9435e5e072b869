// Errors and check macros shared by every area.
//
// Two kinds of failure:
//  * UserError (and subclasses): something the user can fix (bad option, config, missing or corrupt
//    file). The message names the file, the field and what was expected. The CLI prints it as one
//    line and exits with kExitUserError on every rank.
//  * SystemError: a library call failed (MPI, NCCL, CUDA, HDF5). The message carries rank, host,
//    file:line, the failing call's text and the library's own message. A failed collective is fatal
//    for the whole job (see comm::abort_job).
#pragma once

#include <stdexcept>
#include <string>

namespace meridian {

// Process exit codes, identical on every rank.
constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;  // a check found a problem (bench comm wrong elements, doctor FAIL)
constexpr int kExitUserError = 2;    // bad input; message printed
constexpr int kExitFatal = 3;        // failed or hung collective, library failure: job aborted
constexpr int kExitStopped = 4;      // training stopped on SIGTERM/SIGUSR1 after writing a checkpoint

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration value is missing or malformed. what() = "<origin>: field '<field>': <problem>".
class ConfigError : public UserError {
 public:
  ConfigError(const std::string& origin, const std::string& field, const std::string& problem);
  const std::string& origin() const { return origin_; }
  const std::string& field() const { return field_; }

 private:
  std::string origin_, field_;
};

// A data file (dataset, captions index, image) is missing, malformed or not what was expected.
// what() = "<file>: <where>: <problem>" where <where> names a dataset, attribute or line.
class DataError : public UserError {
 public:
  DataError(const std::string& file, const std::string& where, const std::string& problem)
      : UserError(file + ": " + where + ": " + problem) {}
};

class SystemError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Who this process is, for messages. Set by comm::Runtime once MPI is up; until then rank is -1.
struct ProcessIdentity {
  int rank = -1;
  int world_size = 0;
  std::string host;
};
const ProcessIdentity& process_identity();
void set_process_identity(int rank, int world_size);

// "[rank 3/4 @ node7]" (or "[rank ? @ node7]" before MPI is up).
std::string where();

namespace detail {
// Builds "<where> <lib> error at file:line: `expr` failed: <lib_message>[ (hint: ...)]" and throws SystemError.
[[noreturn]] void throw_check_failure(const char* lib, const char* expr, const std::string& lib_message,
                                      const char* file, int line, const char* hint = nullptr);
}  // namespace detail

}  // namespace meridian

// Internal invariant (not user input): throws SystemError with location.
#define MERIDIAN_CHECK(cond, message)                                                                       \
  do {                                                                                                      \
    if (!(cond)) ::meridian::detail::throw_check_failure("meridian", #cond, (message), __FILE__, __LINE__); \
  } while (0)
