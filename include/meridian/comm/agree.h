// Agreement on failure across ranks: a step that may fail on some ranks only (opening a file,
// writing a block) is followed by a collective, so every rank must learn that another failed before
// anyone moves on; otherwise the ranks that succeeded wait forever in a collective the failed ones
// have left.
#pragma once

#include <exception>
#include <string>
#include <tuple>
#include <utility>

namespace meridian::comm {

class Runtime;
class OwnComm;

// What every rank learns when a body failed somewhere.
struct Failure {
  int rank = -1;            // the lowest rank whose body threw
  std::string message;      // that rank's what()
  std::exception_ptr mine;  // what this rank's body threw; null when it returned
};

namespace detail {
// Collective over `own` (null: the world): every rank passes whether its body failed and its
// message; returns the lowest failing rank and its message (rank -1 when none failed).
std::pair<int, std::string> lowest_failure(const Runtime& runtime, const OwnComm* own, bool failed,
                                           const std::string& message);
[[noreturn]] void fail_did_not_throw();
}  // namespace detail

// Collective over `own` (a duplicate of the world, e.g. a background writer's) or, when null, the
// world. Runs `body` on this rank, catching what it throws of type `Caught` (a std::exception by
// default), then every rank learns every rank's outcome (one allgather of strings, under the
// runtime's watchdog). When no rank's body threw, returns on every rank. Otherwise every rank calls
// `fail(failure)` (comm::Failure: the lowest failing rank, its message, this rank's own exception),
// which must throw the exception the caller reports (its type and text are the caller's: a
// UserError naming the rank, a SystemError naming the file, this rank's own exception rethrown).
// An exception that is not a `Caught` leaves this rank at once, as if agree() were not there (the
// other ranks then wait in the allgather until the watchdog ends the job).
template <class Caught = std::exception, class Body, class Fail>
void agree(const Runtime& runtime, const OwnComm* own, Body&& body, Fail&& fail) {
  Failure f;
  bool failed = false;
  std::string message;
  try {
    body();
  } catch (const Caught& e) {
    failed = true;
    message = e.what();
    f.mine = std::current_exception();
  }
  std::tie(f.rank, f.message) = detail::lowest_failure(runtime, own, failed, message);
  if (f.rank < 0) return;
  fail(static_cast<const Failure&>(f));
  detail::fail_did_not_throw();
}

// The same on the world.
template <class Caught = std::exception, class Body, class Fail>
void agree(const Runtime& runtime, Body&& body, Fail&& fail) {
  agree<Caught>(runtime, nullptr, std::forward<Body>(body), std::forward<Fail>(fail));
}

}  // namespace meridian::comm
