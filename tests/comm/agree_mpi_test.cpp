// comm::agree (2 and 4 ranks): every rank returns when every body did; otherwise every rank's fail
// sees the lowest failing rank and its message, and its own exception when its body threw; an
// exception that is not `Caught` leaves agree() untouched. (On a duplicate of the world: every
// ckpt::Writer's agreement, tests/ckpt/file_mpi_test.cpp.)
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "meridian/comm/agree.h"
#include "meridian/core/error.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace comm = meridian::comm;

namespace {

// What fail saw on this rank, thrown back to the test.
struct Seen {
  comm::Failure failure;
};

TEST(Agree, ReturnsOnEveryRankWhenNoBodyThrew) {
  int runs = 0;
  comm::agree(
      runtime(), [&] { ++runs; }, [](const comm::Failure&) { ADD_FAILURE() << "fail called"; });
  EXPECT_EQ(runs, 1);
}

TEST(Agree, EveryRankLearnsTheLowestFailingRank) {
  const auto& rt = runtime();
  // Ranks >= 1 fail (with their rank in the message); on one rank, rank 0.
  const int lowest = rt.size() > 1 ? 1 : 0;
  try {
    comm::agree(
        rt,
        [&] {
          if (rt.rank() >= lowest) throw meridian::UserError("bad file on rank " + std::to_string(rt.rank()));
        },
        [](const comm::Failure& f) { throw Seen{f}; });
    ADD_FAILURE() << "agree returned";
  } catch (const Seen& seen) {
    EXPECT_EQ(seen.failure.rank, lowest);
    EXPECT_EQ(seen.failure.message, "bad file on rank " + std::to_string(lowest));
    EXPECT_EQ(seen.failure.mine != nullptr, rt.rank() >= lowest);
    if (seen.failure.mine) {
      try {
        std::rethrow_exception(seen.failure.mine);
      } catch (const meridian::UserError& e) {
        EXPECT_EQ(std::string(e.what()), "bad file on rank " + std::to_string(rt.rank()));
      }
    }
  }
}

TEST(Agree, AnEmptyMessageStillCountsAsAFailure) {
  const auto& rt = runtime();
  const int last = rt.size() - 1;
  EXPECT_THROW(comm::agree(
                   rt, nullptr,
                   [&] {
                     if (rt.rank() == last) throw std::runtime_error("");
                   },
                   [&](const comm::Failure& f) {
                     EXPECT_EQ(f.rank, last);
                     throw meridian::SystemError("rank " + std::to_string(f.rank) + " failed");
                   }),
               meridian::SystemError);
}

TEST(Agree, OnlyCaughtExceptionsAreAgreed) {
  // Every rank throws a SystemError, which agree<UserError> does not catch: each leaves at once.
  EXPECT_THROW(comm::agree<meridian::UserError>(
                   runtime(), [] { throw meridian::SystemError("not a user error"); },
                   [](const comm::Failure&) { ADD_FAILURE() << "fail called"; }),
               meridian::SystemError);
}

}  // namespace
