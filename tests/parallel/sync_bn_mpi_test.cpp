// SyncBatchNorm2d on N ranks, each with its own batch of its own size, against a plain
// torch::nn::BatchNorm2d run in this process on the concatenation of every rank's batch (every rank
// regenerates all the batches from their seeds): outputs, input gradients, weight and bias gradients
// summed over ranks, running statistics after two steps, and evaluation mode; plus the registered
// names against BatchNorm2d's and the argument errors.
//
// The loss on rank r is sum(y_r * g_r) with its own seeded g_r; the reference loss is the sum of them
// over ranks, sum(y * g) on the concatenation. Input gradients match that sum's gradient on each
// rank's slice. Weight and bias gradients are each rank's share: their SUM over ranks equals the
// reference (so DDP's average equals the gradient of the mean of the ranks' losses, the same scale
// DDP gives every other parameter).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>

#include "meridian/comm/communicator.h"
#include "meridian/parallel/sync_bn.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace parallel = meridian::parallel;
using meridian::comm::Communicator;

namespace {

std::unique_ptr<Communicator> g_bn_comm;

class SyncBn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_bn_comm = meridian::comm::make_communicator(runtime(), meridian::comm::Backend::MPI);
  }
  static void TearDownTestSuite() { g_bn_comm.reset(); }
};

constexpr int64_t kC = 3, kH = 5, kW = 4;

// Rank r's batch size: 1, 2, 3, 1, 2, ... (different sizes across ranks).
int64_t batch_of(int r) { return 1 + r % 3; }

// Rank r's input at `step`: per channel a different offset (large against the spread, which a
// sum-of-squares variance in float32 would get wrong) and scale.
at::Tensor input_of(int r, int step) {
  at::manual_seed(1000 + 17 * uint64_t(step) + uint64_t(r));
  const auto offset = at::tensor({40.0f, -3.0f, 0.5f}).view({1, kC, 1, 1});
  const auto scale = at::tensor({0.5f, 2.0f, 1.0f}).view({1, kC, 1, 1});
  return at::randn({batch_of(r), kC, kH, kW}) * scale + offset;
}
at::Tensor upstream_of(int r, int step) {
  at::manual_seed(5000 + 17 * uint64_t(step) + uint64_t(r));
  return at::randn({batch_of(r), kC, kH, kW});
}

torch::nn::BatchNorm2dOptions options(std::optional<double> momentum) {
  auto o = torch::nn::BatchNorm2dOptions(kC).eps(1e-3);
  if (momentum)
    o.momentum(*momentum);
  else
    o.momentum(c10::optional<double>());  // unset: cumulative average
  return o;
}

void set_affine(torch::nn::Module& m) {
  at::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    if (p.key() == "weight") p.value().copy_(at::tensor({1.5f, 0.7f, -1.2f}));
    if (p.key() == "bias") p.value().copy_(at::tensor({0.1f, -0.4f, 2.0f}));
  }
}

at::Tensor summed_over_ranks(const at::Tensor& t) {
  at::Tensor s = t.clone();
  g_bn_comm->allreduce(s, meridian::comm::ReduceOp::Sum);
  return s;
}

// Two training steps against the reference, then evaluation.
void check_against_reference(std::optional<double> momentum) {
  const int W = runtime().size(), me = runtime().rank();
  int64_t offset = 0;
  for (int r = 0; r < me; ++r) offset += batch_of(r);
  parallel::SyncBatchNorm2d sync(options(momentum), g_bn_comm.get());
  torch::nn::BatchNorm2d ref(options(momentum));
  set_affine(*sync);
  set_affine(*ref);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<at::Tensor> xs, gs;
    for (int r = 0; r < W; ++r) xs.push_back(input_of(r, step)), gs.push_back(upstream_of(r, step));
    // Reference: one process, the concatenated batch, loss = sum over ranks of their losses.
    const at::Tensor x_all = at::cat(xs).requires_grad_(true);
    const at::Tensor y_all = ref->forward(x_all);
    (y_all * at::cat(gs)).sum().backward();
    // Synchronised: my batch only.
    const at::Tensor x = xs[size_t(me)].clone().requires_grad_(true);
    const at::Tensor y = sync->forward(x);
    (y * gs[size_t(me)]).sum().backward();

    const int64_t b = batch_of(me);
    EXPECT_TRUE(at::allclose(y, y_all.detach().narrow(0, offset, b), 1e-4, 1e-4))
        << (y - y_all.narrow(0, offset, b)).abs().max();
    EXPECT_TRUE(at::allclose(x.grad(), x_all.grad().narrow(0, offset, b), 1e-4, 1e-4))
        << (x.grad() - x_all.grad().narrow(0, offset, b)).abs().max();
    // Each rank holds its share: the sum over ranks is the reference's gradient; a rank's share alone
    // is not (unless it is the only rank), so forgetting the reduction would be caught.
    EXPECT_TRUE(at::allclose(summed_over_ranks(sync->weight.grad()), ref->weight.grad(), 1e-4, 1e-3));
    EXPECT_TRUE(at::allclose(summed_over_ranks(sync->bias.grad()), ref->bias.grad(), 1e-4, 1e-3));
    EXPECT_TRUE(at::allclose(sync->running_mean, ref->running_mean, 1e-5, 1e-5))
        << sync->running_mean << ref->running_mean;
    EXPECT_TRUE(at::allclose(sync->running_var, ref->running_var, 1e-5, 1e-5)) << sync->running_var << ref->running_var;
    EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), step + 1);
    sync->zero_grad();
    ref->zero_grad();
  }
  // The running statistics moved away from their initial values (the comparison above is not vacuous).
  EXPECT_GT(sync->running_mean.abs().max().item<double>(), 0.5);

  // Evaluation: running statistics, no communication: a copy without communicator gives the same.
  parallel::SyncBatchNorm2d local(options(momentum), nullptr);
  {
    at::NoGradGuard no_grad;
    const auto src = sync->named_parameters();
    for (auto& p : local->named_parameters()) p.value().copy_(src[p.key()]);
    const auto bufs = sync->named_buffers();
    for (auto& bf : local->named_buffers()) bf.value().copy_(bufs[bf.key()]);
  }
  local->eval();
  ref->eval();
  sync->eval();
  const at::Tensor x = input_of(me, 7);
  const at::Tensor expected = ref->forward(x);
  EXPECT_TRUE(at::allclose(local->forward(x), expected, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(sync->forward(x), expected, 1e-5, 1e-5));
  // Training mode without a communicator is refused.
  local->train();
  EXPECT_THROW(local->forward(x), std::invalid_argument);
}

}  // namespace

TEST_F(SyncBn, EqualsBatchNormOnTheConcatenatedBatch) { check_against_reference(0.03); }

TEST_F(SyncBn, CumulativeAverageWithoutMomentum) { check_against_reference(std::nullopt); }

TEST_F(SyncBn, AnEmptyBatchOnSomeRanks) {
  // Rank 0 has 2 images, every other rank none: all equal BatchNorm2d on rank 0's batch.
  const int me = runtime().rank();
  at::manual_seed(77);
  const at::Tensor full = at::randn({2, kC, kH, kW}) + 3;
  parallel::SyncBatchNorm2d sync(options(0.1), g_bn_comm.get());
  torch::nn::BatchNorm2d ref(options(0.1));
  const at::Tensor x = (me == 0 ? full : full.narrow(0, 0, 0)).clone().requires_grad_(true);
  const at::Tensor y = sync->forward(x);
  y.pow(2).sum().backward();
  const at::Tensor x_ref = full.clone().requires_grad_(true);
  const at::Tensor y_ref = ref->forward(x_ref);
  y_ref.pow(2).sum().backward();
  if (me == 0) {
    EXPECT_TRUE(at::allclose(y, y_ref, 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(x.grad(), x_ref.grad(), 1e-4, 1e-4));
  } else {
    EXPECT_EQ(y.size(0), 0);
  }
  EXPECT_TRUE(at::allclose(sync->running_var, ref->running_var, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(summed_over_ranks(sync->weight.grad()), ref->weight.grad(), 1e-4, 1e-3));
}

TEST_F(SyncBn, OneValuePerChannelIsAnErrorOnEveryRank) {
  // One pixel on rank 0 and nothing elsewhere: every rank throws after the allreduce (none hangs).
  const at::Tensor x = at::ones({runtime().rank() == 0 ? 1 : 0, kC, 1, 1});
  parallel::SyncBatchNorm2d sync(options(0.1), g_bn_comm.get());
  EXPECT_THROW(sync->forward(x), std::invalid_argument);
  // Shape errors come before any communication.
  EXPECT_THROW(sync->forward(at::ones({2, kC + 1, 2, 2})), std::invalid_argument);
  EXPECT_THROW(sync->forward(at::ones({2, kC})), std::invalid_argument);
  EXPECT_THROW(parallel::SyncBatchNorm2d(torch::nn::BatchNorm2dOptions(kC).track_running_stats(false), g_bn_comm.get()),
               std::invalid_argument);
}

TEST_F(SyncBn, SameNamesShapesAndInitialValuesAsBatchNorm2d) {
  parallel::SyncBatchNorm2d sync(options(0.03), g_bn_comm.get());
  torch::nn::BatchNorm2d ref(options(0.03));
  const auto list = [](const torch::OrderedDict<std::string, at::Tensor>& d) {
    std::vector<std::pair<std::string, at::Tensor>> v;
    for (const auto& item : d) v.emplace_back(item.key(), item.value());
    return v;
  };
  for (const auto& [mine, theirs] : {std::make_pair(list(sync->named_parameters()), list(ref->named_parameters())),
                                     std::make_pair(list(sync->named_buffers()), list(ref->named_buffers()))}) {
    ASSERT_EQ(mine.size(), theirs.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].first, theirs[i].first);
      EXPECT_EQ(mine[i].second.sizes(), theirs[i].second.sizes()) << mine[i].first;
      EXPECT_EQ(mine[i].second.scalar_type(), theirs[i].second.scalar_type()) << mine[i].first;
      EXPECT_TRUE(at::equal(mine[i].second, theirs[i].second)) << mine[i].first;
    }
  }
}
