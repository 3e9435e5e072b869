// Communicator collectives against closed-form expectations in rank r and world size n, for every
// backend this run can use: MPI always; NCCL too when MERIDIAN_TEST_DEVICE=cuda (GPU machines).
// Rank r's element i is (r + 1) + (i mod 13): exact in every dtype here (bf16 holds integers up to 256).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include "meridian/comm/communicator.h"
#include "mpi_test_main.h"

using meridian::comm::Backend;
using meridian::comm::Communicator;
using meridian::comm::ReduceOp;
using meridian::test::runtime;

namespace {

// One communicator per backend, destroyed before main() finalises MPI.
std::map<Backend, std::unique_ptr<Communicator>> g_comms;
Backend g_backend = Backend::MPI;
Communicator& comm() { return *g_comms.at(g_backend); }
c10::Device dev() { return g_backend == Backend::NCCL ? runtime().device() : c10::Device(c10::kCPU); }

std::vector<Backend> backends_under_test() {
  const char* device = std::getenv("MERIDIAN_TEST_DEVICE");
  if (device && std::string(device) == "cuda") return {Backend::MPI, Backend::NCCL};
  return {Backend::MPI};
}

at::Tensor ramp(int64_t count, int rank, at::ScalarType dtype, int64_t first = 0) {
  return (at::arange(first, first + count, at::kLong).remainder(13) + (rank + 1)).to(dtype).to(dev());
}

// Reference computed element by element in plain C++ by applying the reduction over the ranks'
// values, not from the closed form the benchmark uses.
at::Tensor expected_reduce(int64_t count, ReduceOp op, int n, int64_t first = 0) {
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) {
    const double k = double((first + i) % 13);
    double acc = op == ReduceOp::Min ? 1e300 : op == ReduceOp::Max ? -1e300 : 0.0;
    for (int r = 0; r < n; ++r) {
      const double v = k + r + 1;
      acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
    }
    out[i] = op == ReduceOp::Avg ? acc / n : acc;
  }
  return at::tensor(out, at::kDouble);
}

int64_t mismatches(const at::Tensor& got, const at::Tensor& want) {
  return (got.cpu().to(at::kDouble) != want).sum().item<int64_t>();
}

const at::ScalarType kAllTypes[] = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong};
const ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

}  // namespace

class CommunicatorTest : public ::testing::TestWithParam<Backend> {
 protected:
  static void SetUpTestSuite() {
    for (auto b : backends_under_test()) g_comms[b] = meridian::comm::make_communicator(runtime(), b);
  }
  static void TearDownTestSuite() { g_comms.clear(); }
  void SetUp() override { g_backend = GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return std::string(meridian::comm::to_string(info.param)); });

TEST_P(CommunicatorTest, Identity) {
  EXPECT_EQ(comm().rank(), runtime().rank());
  EXPECT_EQ(comm().size(), runtime().size());
  EXPECT_EQ(comm().backend(), GetParam());
}

TEST_P(CommunicatorTest, AllreduceEveryDtypeAndOp) {
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

// wait() orders what follows after the operation: MPI by blocking; NCCL by making the current stream
// wait, without blocking the host. Here the GPU is kept busy by a chain of matrix products (a few
// tens of ms at the least) before the allreduce: NCCL's wait() returns while the operation is still
// queued behind them, and the result read afterwards is still right; synchronize() waits for it.
TEST_P(CommunicatorTest, WaitOrdersTheStreamAndSynchronizeTheHost) {
  const int n = comm().size(), r = comm().rank();
  const bool gpu = GetParam() == Backend::NCCL;
  at::Tensor busy;
  if (gpu) {
    busy = at::randn({4096, 4096}, at::TensorOptions().device(dev()));
    for (int i = 0; i < 40; ++i) busy = at::matmul(busy, busy).div_(4096.0);
  }
  auto t = ramp(1000, r, at::kFloat);
  auto work = comm().allreduce_async(t, ReduceOp::Sum);
  work->wait();
  if (gpu) EXPECT_FALSE(work->is_completed()) << "NCCL's wait() blocked the host until completion";
  if (!gpu) EXPECT_TRUE(work->is_completed());
  const at::Tensor twice = t * 2;  // a kernel after wait(): must see the result
  EXPECT_EQ(mismatches(twice / 2, expected_reduce(1000, ReduceOp::Sum, n)), 0);
  auto again = ramp(1000, r, at::kFloat);
  auto second = comm().allreduce_async(again, ReduceOp::Sum);
  second->synchronize();
  EXPECT_TRUE(second->is_completed());
  EXPECT_EQ(mismatches(again, expected_reduce(1000, ReduceOp::Sum, n)), 0);
  if (gpu) EXPECT_TRUE(busy.defined());
}

TEST_P(CommunicatorTest, AllreduceLargerThanSegmentsWithRaggedTail) {
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

// Large sums go around a ring of point-to-point messages (src/comm/mpi_ring.h); with the threshold
// at one byte every size takes it, including counts smaller than the rank count (empty chunks),
// counts not divisible by it, several pieces per chunk, and several rings (blocks of 16 pieces).
TEST(MpiRing, SumsAndAveragesEveryFloatTypeAtAnySize) {
  setenv("MERIDIAN_MPI_RING_BYTES", "1", 1);
  setenv("MERIDIAN_MPI_SEGMENT_BYTES", "4K", 1);  // ring pieces of 4 KiB
  auto ring = meridian::comm::make_communicator(runtime(), Backend::MPI);
  unsetenv("MERIDIAN_MPI_RING_BYTES");
  unsetenv("MERIDIAN_MPI_SEGMENT_BYTES");
  const int n = ring->size(), r = ring->rank();
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf}) {
    for (int64_t count :
         {int64_t(1), int64_t(n - 1), int64_t(n + 1), int64_t(1000), int64_t(3 * 4096 + 5), int64_t(70001)}) {
      for (auto op : {ReduceOp::Sum, ReduceOp::Avg}) {
        auto t = ramp(count, r, dtype).cpu();
        ring->allreduce(t, op);
        EXPECT_EQ(mismatches(t, expected_reduce(count, op, n)), 0)
            << "allreduce " << c10::toString(dtype) << " count " << count << " " << meridian::comm::to_string(op);
        auto in = ramp(n * count, r, dtype).cpu();
        auto out = at::full({count}, -1.0, at::TensorOptions().dtype(dtype));
        ring->reduce_scatter(in, out, op);
        EXPECT_EQ(mismatches(out, expected_reduce(count, op, n, r * count)), 0)
            << "reduce_scatter " << c10::toString(dtype) << " count " << count << " " << meridian::comm::to_string(op);
        EXPECT_TRUE(at::equal(in, ramp(n * count, r, dtype).cpu())) << "reduce_scatter changed its input";
      }
    }
  }
  // Every rank ends with the same bits, also for sums that round (bf16 of non-integers).
  auto x = (at::linspace(-3.0, 3.0, 50001, at::kDouble) * (r + 1) / 7.0).to(at::kBFloat16);
  ring->allreduce(x, ReduceOp::Sum);
  auto all = at::empty({n * x.numel()}, x.options());
  ring->allgather(x, all);
  for (int q = 1; q < n; ++q) EXPECT_TRUE(at::equal(all.narrow(0, q * x.numel(), x.numel()), x)) << "rank " << q;
}

TEST_P(CommunicatorTest, Bfloat16SumRoundsLikeFloatSum) {
  // Non-integers: the sum is formed in float and rounded to bf16 once per combination, so for
  // 2 ranks it equals the float sum rounded once; within one bf16 ulp per extra rank otherwise.
  const int n = comm().size(), r = comm().rank();
  auto base = at::linspace(-3.0, 3.0, 4096, at::kDouble);
  auto mine = (base * (r + 1) / 7.0).to(at::kBFloat16).to(dev());
  auto t = mine.clone();
  comm().allreduce(t, ReduceOp::Sum);
  at::Tensor want = at::zeros_like(base);
  for (int q = 0; q < n; ++q) want += (base * (q + 1) / 7.0).to(at::kBFloat16).to(at::kDouble);
  const double ulp = 1.0 / 128;  // bf16 has 8 significant bits
  t = t.cpu();
  const auto err = ((t.to(at::kDouble) - want).abs() / want.abs().clamp_min(1e-3)).max().item<double>();
  EXPECT_LE(err, ulp * (n - 1) / 2 + 1e-12);
  if (n == 2) EXPECT_TRUE(at::equal(t, want.to(at::kBFloat16)));
}

TEST_P(CommunicatorTest, BroadcastFromEveryRoot) {
  const int n = comm().size(), r = comm().rank();
  for (int root = 0; root < n; ++root) {
    auto t = ramp(777, r, at::kDouble);
    comm().broadcast(t, root);
    EXPECT_TRUE(at::equal(t.cpu(), ramp(777, root, at::kDouble).cpu())) << "root " << root;
  }
}

TEST_P(CommunicatorTest, Allgather) {
  const int n = comm().size(), r = comm().rank();
  for (auto dtype : kAllTypes) {
    auto in = ramp(5, r, dtype);
    auto out = at::zeros({n * 5}, at::TensorOptions().dtype(dtype).device(dev()));
    comm().allgather(in, out);
    for (int q = 0; q < n; ++q)
      EXPECT_TRUE(at::equal(out.slice(0, q * 5, (q + 1) * 5).cpu(), ramp(5, q, dtype).cpu()))
          << c10::toString(dtype) << " slice " << q;
  }
}

TEST_P(CommunicatorTest, ReduceScatter) {
  const int n = comm().size(), r = comm().rank();
  const int64_t count = 11;  // per rank
  for (auto op : kAllOps) {
    auto in = ramp(n * count, r, at::kFloat);
    auto out = at::zeros({count}, at::TensorOptions().dtype(at::kFloat).device(dev()));
    comm().reduce_scatter(in, out, op);
    EXPECT_EQ(mismatches(out, expected_reduce(count, op, n, r * count)), 0) << meridian::comm::to_string(op);
  }
}

TEST_P(CommunicatorTest, AsyncOperationsCompleteInOrderAndOverlapTheCaller) {
  const int n = comm().size(), r = comm().rank();
  std::vector<at::Tensor> tensors;
  std::vector<meridian::comm::WorkPtr> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(at::full({1 << (10 + k)}, double(r + k), at::TensorOptions().dtype(at::kDouble).device(dev())));
    works.push_back(comm().allreduce_async(tensors.back(), ReduceOp::Sum));
  }
  for (int k = 7; k >= 0; --k) {  // waiting out of order is allowed
    ASSERT_TRUE(works[k]->wait_for(std::chrono::seconds(60)));
    EXPECT_TRUE(works[k]->is_completed());
    const double want = n * (n - 1) / 2.0 + double(n) * k;
    EXPECT_EQ((tensors[k].cpu() != want).sum().item<int64_t>(), 0) << "tensor " << k;
  }
  comm().barrier();
}

TEST_P(CommunicatorTest, BlockingCallBehindQueuedAsyncWork) {
  // A blocking call made while async operations are still queued runs after them, in the same
  // order on every rank, and does not deadlock.
  const int n = comm().size(), r = comm().rank();
  const auto opts = at::TensorOptions().dtype(at::kDouble).device(dev());
  for (int round = 0; round < 20; ++round) {
    std::vector<at::Tensor> tensors;
    std::vector<meridian::comm::WorkPtr> works;
    for (int k = 0; k < 4; ++k) {
      tensors.push_back(at::full({1 << 14}, double(r + k), opts));
      works.push_back(comm().allreduce_async(tensors.back(), ReduceOp::Sum));
    }
    auto blocking = at::full({8}, double(r), opts);
    comm().allreduce(blocking, ReduceOp::Sum);
    EXPECT_EQ((blocking.cpu() != n * (n - 1) / 2.0).sum().item<int64_t>(), 0) << "round " << round;
    for (int k = 0; k < 4; ++k) {
      works[k]->wait();
      EXPECT_EQ((tensors[k].cpu() != n * (n - 1) / 2.0 + double(n) * k).sum().item<int64_t>(), 0) << "tensor " << k;
    }
  }
}

TEST_P(CommunicatorTest, InvalidArgumentsAreRejectedBeforeCommunicating) {
  // Raised on the caller's thread on every rank; no collective is started, so nothing hangs.
  const auto on = [](at::ScalarType t) { return at::TensorOptions().dtype(t).device(dev()); };
  auto strided = at::zeros({4, 4}, on(at::kFloat)).t();
  EXPECT_THROW(comm().allreduce(strided), std::invalid_argument);
  auto ints = at::zeros({4}, on(at::kInt));
  EXPECT_THROW(comm().allreduce(ints, ReduceOp::Avg), std::invalid_argument);
  auto in = at::zeros({3}, on(at::kFloat));
  auto wrong = at::zeros({3 * comm().size() + 1}, on(at::kFloat));
  EXPECT_THROW(comm().allgather(in, wrong), std::invalid_argument);
  auto bools = at::zeros({3}, on(at::kBool));
  EXPECT_THROW(comm().allreduce(bools), std::invalid_argument);
  EXPECT_THROW(comm().broadcast(in, comm().size()), std::invalid_argument);
  if (GetParam() == Backend::NCCL) {
    auto host = at::zeros({3}, at::kFloat);  // wrong device
    EXPECT_THROW(comm().allreduce(host), std::invalid_argument);
  }
  comm().barrier();  // still usable
}
