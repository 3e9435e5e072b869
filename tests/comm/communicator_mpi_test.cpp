// MPI backend collectives against closed-form expectations in rank r and world size n.
// Rank r's element i is (r + 1) + (i mod 13): exact in every dtype here (bf16 holds integers up to 256).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

#include "meridian/comm/communicator.h"
#include "mpi_test_main.h"

using meridian::comm::Backend;
using meridian::comm::Communicator;
using meridian::comm::ReduceOp;
using meridian::test::runtime;

namespace {

// One communicator for the suite, destroyed before main() finalises MPI.
std::unique_ptr<Communicator> g_comm;
Communicator& comm() { return *g_comm; }

at::Tensor ramp(int64_t count, int rank, at::ScalarType dtype, int64_t first = 0) {
  return (at::arange(first, first + count, at::kLong).remainder(13) + (rank + 1)).to(dtype);
}

at::Tensor expected_reduce(int64_t count, ReduceOp op, int n, int64_t first = 0) {
  auto k = at::arange(first, first + count, at::kLong).remainder(13).to(at::kDouble);
  switch (op) {
    case ReduceOp::Sum: return k * n + n * (n + 1) / 2.0;
    case ReduceOp::Avg: return k + (n + 1) / 2.0;
    case ReduceOp::Max: return k + n;
    case ReduceOp::Min: return k + 1;
  }
  return k;
}

int64_t mismatches(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) != want).sum().item<int64_t>();
}

const at::ScalarType kAllTypes[] = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong};
const ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

}  // namespace

class MpiCommunicator : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_comm = meridian::comm::make_communicator(runtime(), Backend::MPI); }
  static void TearDownTestSuite() { g_comm.reset(); }
};

TEST_F(MpiCommunicator, Identity) {
  EXPECT_EQ(comm().rank(), runtime().rank());
  EXPECT_EQ(comm().size(), runtime().size());
  EXPECT_EQ(comm().backend(), Backend::MPI);
}

TEST_F(MpiCommunicator, AllreduceEveryDtypeAndOp) {
  const int n = comm().size(), r = comm().rank();
  for (auto dtype : kAllTypes) {
    for (auto op : kAllOps) {
      if (op == ReduceOp::Avg && !at::isFloatingType(dtype)) continue;
      auto t = ramp(1000, r, dtype);
      comm().allreduce(t, op);
      EXPECT_EQ(t.scalar_type(), dtype);
      EXPECT_EQ(mismatches(t, expected_reduce(1000, op, n)), 0)
          << c10::toString(dtype) << " " << meridian::comm::to_string(op);
    }
  }
}

TEST_F(MpiCommunicator, AllreduceLargerThanSegmentsWithRaggedTail) {
  // 3.25 segments of the default 4 MiB plus an odd tail: every segment boundary must be right.
  const int n = comm().size(), r = comm().rank();
  const int64_t count = (13 << 20) / 4 + 7;
  auto t = ramp(count, r, at::kFloat);
  comm().allreduce(t, ReduceOp::Sum);
  EXPECT_EQ(mismatches(t, expected_reduce(count, ReduceOp::Sum, n)), 0);
  auto h = ramp(count, r, at::kBFloat16);  // 2-byte elements: different segment element counts
  comm().allreduce(h, ReduceOp::Max);
  EXPECT_EQ(mismatches(h, expected_reduce(count, ReduceOp::Max, n)), 0);
}

TEST_F(MpiCommunicator, Bfloat16SumRoundsLikeFloatSum) {
  // Non-integers: the sum is formed in float and rounded to bf16 once per combination, so for
  // 2 ranks it equals the float sum rounded once; within one bf16 ulp per extra rank otherwise.
  const int n = comm().size(), r = comm().rank();
  auto base = at::linspace(-3.0, 3.0, 4096, at::kDouble);
  auto mine = (base * (r + 1) / 7.0).to(at::kBFloat16);
  auto t = mine.clone();
  comm().allreduce(t, ReduceOp::Sum);
  at::Tensor want = at::zeros_like(base);
  for (int q = 0; q < n; ++q) want += (base * (q + 1) / 7.0).to(at::kBFloat16).to(at::kDouble);
  const double ulp = 1.0 / 128;  // bf16 has 8 significant bits
  const auto err = ((t.to(at::kDouble) - want).abs() / want.abs().clamp_min(1e-3)).max().item<double>();
  EXPECT_LE(err, ulp * (n - 1) / 2 + 1e-12);
  if (n == 2) EXPECT_TRUE(at::equal(t, want.to(at::kBFloat16)));
}

TEST_F(MpiCommunicator, BroadcastFromEveryRoot) {
  const int n = comm().size(), r = comm().rank();
  for (int root = 0; root < n; ++root) {
    auto t = ramp(777, r, at::kDouble);
    comm().broadcast(t, root);
    EXPECT_TRUE(at::equal(t, ramp(777, root, at::kDouble))) << "root " << root;
  }
}

TEST_F(MpiCommunicator, Allgather) {
  const int n = comm().size(), r = comm().rank();
  for (auto dtype : kAllTypes) {
    auto in = ramp(5, r, dtype);
    auto out = at::zeros({n * 5}, at::TensorOptions().dtype(dtype));
    comm().allgather(in, out);
    for (int q = 0; q < n; ++q)
      EXPECT_TRUE(at::equal(out.slice(0, q * 5, (q + 1) * 5), ramp(5, q, dtype))) << c10::toString(dtype) << " slice " << q;
  }
}

TEST_F(MpiCommunicator, ReduceScatter) {
  const int n = comm().size(), r = comm().rank();
  const int64_t count = 11;  // per rank
  for (auto op : kAllOps) {
    auto in = ramp(n * count, r, at::kFloat);
    auto out = at::zeros({count}, at::kFloat);
    comm().reduce_scatter(in, out, op);
    EXPECT_EQ(mismatches(out, expected_reduce(count, op, n, r * count)), 0) << meridian::comm::to_string(op);
  }
}

TEST_F(MpiCommunicator, AsyncOperationsCompleteInOrderAndOverlapTheCaller) {
  const int n = comm().size(), r = comm().rank();
  std::vector<at::Tensor> tensors;
  std::vector<meridian::comm::WorkPtr> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(at::full({1 << (10 + k)}, double(r + k), at::kDouble));
    works.push_back(comm().allreduce_async(tensors.back(), ReduceOp::Sum));
  }
  for (int k = 7; k >= 0; --k) {  // waiting out of order is allowed
    ASSERT_TRUE(works[k]->wait_for(std::chrono::seconds(60)));
    EXPECT_TRUE(works[k]->is_completed());
    const double want = n * (n - 1) / 2.0 + double(n) * k;
    EXPECT_EQ((tensors[k] != want).sum().item<int64_t>(), 0) << "tensor " << k;
  }
  comm().barrier();
}

TEST_F(MpiCommunicator, InvalidArgumentsAreRejectedBeforeCommunicating) {
  // Raised on the caller's thread on every rank; no collective is started, so nothing hangs.
  auto strided = at::zeros({4, 4}, at::kFloat).t();
  EXPECT_THROW(comm().allreduce(strided), std::invalid_argument);
  auto ints = at::zeros({4}, at::kInt);
  EXPECT_THROW(comm().allreduce(ints, ReduceOp::Avg), std::invalid_argument);
  auto in = at::zeros({3}, at::kFloat);
  auto wrong = at::zeros({3 * comm().size() + 1}, at::kFloat);
  EXPECT_THROW(comm().allgather(in, wrong), std::invalid_argument);
  auto bools = at::zeros({3}, at::kBool);
  EXPECT_THROW(comm().allreduce(bools), std::invalid_argument);
  EXPECT_THROW(comm().broadcast(in, comm().size()), std::invalid_argument);
  comm().barrier();  // still usable
}
