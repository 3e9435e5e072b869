// DistributedDataParallel on N ranks against one process training on the concatenated batch, and
// all_gather_with_grad against the single-process loss on the concatenated embeddings.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>

#include "meridian/comm/communicator.h"
#include "meridian/core/error.h"
#include "meridian/parallel/ddp.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace parallel = meridian::parallel;
using meridian::comm::Communicator;

namespace {

std::unique_ptr<Communicator> g_comm, g_nccl;
Communicator& comm() { return *g_comm; }
bool on_gpu() {
  const char* device = std::getenv("MERIDIAN_TEST_DEVICE");
  return device && std::string(device) == "cuda";
}

class Ddp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_comm = meridian::comm::make_communicator(runtime(), meridian::comm::Backend::MPI);
    if (on_gpu()) g_nccl = meridian::comm::make_communicator(runtime(), meridian::comm::Backend::NCCL);
  }
  static void TearDownTestSuite() {
    g_nccl.reset();
    g_comm.reset();
  }
};

struct MlpImpl : torch::nn::Module {
  MlpImpl(int hidden = 16, bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 4));
    if (with_unused) spare = register_module("spare", torch::nn::Linear(4, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, spare{nullptr};
};
TORCH_MODULE(Mlp);

struct ConvImpl : torch::nn::Module {
  ConvImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(4 * 6 * 6, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(torch::relu(conv(x)).flatten(1)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Conv);

// The same global batch on every rank (seeded); rank r trains on rows [r b, (r+1) b).
std::pair<torch::Tensor, torch::Tensor> global_batch(int64_t rows, at::IntArrayRef x_shape, int64_t step) {
  torch::manual_seed(1000 + step);
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), x_shape.begin(), x_shape.end());
  return {torch::randn(shape), torch::randn({rows, 4})};
}

double max_relative_error(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, ((a[i] - b[i]).abs().max() / b[i].abs().max().clamp_min(1e-12)).item<double>());
  return worst;
}

// k steps of `optimizer_name` with DDP on every rank vs one model on the whole batch; returns the
// largest relative parameter difference.
template <typename Model>
double train_and_compare(std::function<Model()> make, at::IntArrayRef x_shape, const std::string& optimizer_name,
                         int micro_steps, parallel::DdpOptions options = {}, Communicator* communicator = nullptr,
                         c10::Device device = c10::kCPU) {
  Communicator& c = communicator ? *communicator : comm();
  const int n = runtime().size(), r = runtime().rank();
  const int64_t b = 4;
  torch::manual_seed(7);
  Model distributed = make();
  distributed->to(device);
  torch::manual_seed(7);
  Model reference = make();
  reference->to(device);
  options.first_bucket_mb = 0.0002;  // several buckets even for small models (~210 bytes)
  options.bucket_mb = 0.0002;
  parallel::DistributedDataParallel ddp(runtime(), c, distributed.ptr(), options);
  if (options.communication_dtype == at::kFloat) EXPECT_GT(ddp.bucket_count(), 1);  // bf16 halves the bytes: one bucket
  const auto make_opt = [&](Model& m) -> std::unique_ptr<torch::optim::Optimizer> {
    if (optimizer_name == "sgd")
      return std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    return std::make_unique<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  };
  auto opt = make_opt(distributed), ref_opt = make_opt(reference);
  for (int64_t step = 0; step < 3; ++step) {
    auto [x_cpu, y_cpu] = global_batch(n * b * micro_steps, x_shape, step);
    const auto x = x_cpu.to(device), y = y_cpu.to(device);
    opt->zero_grad();
    for (int m = 0; m < micro_steps; ++m) {
      ddp.set_sync(m == micro_steps - 1);
      const int64_t first = (int64_t(m) * n + r) * b;  // micro-batch m of rank r
      auto loss = torch::mse_loss(distributed->forward(x.narrow(0, first, b)), y.narrow(0, first, b)) / micro_steps;
      loss.backward();
    }
    ddp.finish();
    opt->step();
    ref_opt->zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();  // mean over the global batch
    ref_opt->step();
  }
  std::vector<torch::Tensor> got, want;
  for (auto& t : distributed->parameters()) got.push_back(t.cpu());
  for (auto& t : reference->parameters()) want.push_back(t.cpu());
  return max_relative_error(got, want);
}

}  // namespace

TEST_F(Ddp, MlpSgdMatchesOneProcessOnTheWholeBatch) {
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(); }, {8}, "sgd", 1), 1e-5);
}

TEST_F(Ddp, MlpAdamWMatchesOneProcessOnTheWholeBatch) {
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(); }, {8}, "adamw", 1), 1e-5);
}

TEST_F(Ddp, ConvNetMatchesOneProcessOnTheWholeBatch) {
  EXPECT_LT(train_and_compare<Conv>([] { return Conv(); }, {3, 6, 6}, "sgd", 1), 1e-5);
  EXPECT_LT(train_and_compare<Conv>([] { return Conv(); }, {3, 6, 6}, "adamw", 1), 1e-5);
}

TEST_F(Ddp, NcclOnGpuMatchesOneProcessOnTheWholeBatch) {
  if (!on_gpu()) GTEST_SKIP() << "needs MERIDIAN_TEST_DEVICE=cuda (a GPU machine): the NCCL path is not tested here";
  const c10::Device gpu = runtime().device();
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(); }, {8}, "sgd", 1, {}, g_nccl.get(), gpu), 1e-5);
  EXPECT_LT(train_and_compare<Conv>([] { return Conv(); }, {3, 6, 6}, "adamw", 2, {}, g_nccl.get(), gpu), 1e-5);
}

TEST_F(Ddp, GradientAccumulationMatches) {
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(); }, {8}, "sgd", 3), 1e-5);
  EXPECT_LT(train_and_compare<Conv>([] { return Conv(); }, {3, 6, 6}, "adamw", 2), 1e-5);
}

TEST_F(Ddp, OverlapOffAndBf16CommunicationAgree) {
  parallel::DdpOptions off;
  off.overlap = false;
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(); }, {8}, "sgd", 1, off), 1e-5);
  parallel::DdpOptions bf16;
  bf16.communication_dtype = at::kBFloat16;
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(); }, {8}, "sgd", 1, bf16), 2e-2);  // 8-bit mantissa on the wire
}

TEST_F(Ddp, UnusedParametersAreNamedOrHandled) {
  std::string message;
  try {
    train_and_compare<Mlp>([] { return Mlp(16, true); }, {8}, "sgd", 1);
  } catch (const meridian::UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("received no gradient"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0: spare.weight, spare.bias"), std::string::npos) << message;
  parallel::DdpOptions o;
  o.find_unused_parameters = true;
  EXPECT_LT(train_and_compare<Mlp>([] { return Mlp(16, true); }, {8}, "sgd", 1, o), 1e-5);
}

TEST_F(Ddp, DifferentModelsAcrossRanksFailOnEveryRankWithoutHanging) {
  const int hidden = runtime().rank() == runtime().size() - 1 && runtime().size() > 1 ? 17 : 16;
  Mlp model(hidden);
  std::string message;
  try {
    parallel::DistributedDataParallel ddp(runtime(), comm(), model.ptr());
  } catch (const meridian::UserError& e) {
    message = e.what();
  }
  if (runtime().size() == 1) {
    EXPECT_EQ(message, "");
  } else {
    const std::string last = std::to_string(runtime().size() - 1);
    EXPECT_NE(message.find("the model differs between ranks: rank " + last + " on " + runtime().host() +
                           " has 'fc1.weight [17, 8] Float' where rank 0 on " + runtime().host() +
                           " has 'fc1.weight [16, 8] Float'"),
              std::string::npos)
        << message;
  }
}

TEST_F(Ddp, MisuseIsAnErrorNotSilentCorruption) {
  torch::manual_seed(4);
  Mlp model;
  parallel::DistributedDataParallel ddp(runtime(), comm(), model.ptr());
  std::string message;
  try {
    ddp.finish();
  } catch (const meridian::UserError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "DistributedDataParallel::finish() without a backward pass since the last finish()");
  auto [x, y] = global_batch(4, {8}, 1);
  torch::mse_loss(model->forward(x), y).backward();
  message.clear();
  try {
    torch::mse_loss(model->forward(x), y).backward();  // a second backward in the same synchronised step
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("received a second gradient before finish()"), std::string::npos) << message;
}

TEST_F(Ddp, ClippingGivesTheSameNormOnEveryRank) {
  torch::manual_seed(3);
  Mlp model;
  parallel::DistributedDataParallel ddp(runtime(), comm(), model.ptr());
  auto [x, y] = global_batch(4 * runtime().size(), {8}, 9);
  torch::mse_loss(model->forward(x.narrow(0, 4 * runtime().rank(), 4)), y.narrow(0, 4 * runtime().rank(), 4))
      .backward();
  ddp.finish();
  const double norm = parallel::clip_grad_norm(model->parameters(), 1e-3);
  auto t = torch::full({1}, norm, torch::kDouble), lo = t.clone();
  comm().allreduce(t, meridian::comm::ReduceOp::Max);
  comm().allreduce(lo, meridian::comm::ReduceOp::Min);
  EXPECT_EQ(t.item<double>(), lo.item<double>());
  double after = 0;
  for (auto& p : model->parameters()) after += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(after), 1e-3, 1e-6);
}

TEST_F(Ddp, AllGatherWithGradMatchesTheSingleProcessContrastiveLoss) {
  // Each rank holds b embeddings; the loss of rank r is cross-entropy of its rows against all
  // N b rows (targets: their own global index). Sum over ranks vs one process on the concatenation.
  const int n = runtime().size(), r = runtime().rank();
  const int64_t b = 3, d = 5;
  torch::manual_seed(42);
  const auto all = torch::randn({n * b, d}, torch::kDouble);
  auto mine = all.narrow(0, r * b, b).clone().set_requires_grad(true);
  const auto gathered = parallel::all_gather_with_grad(comm(), mine);
  const auto targets = torch::arange(r * b, (r + 1) * b);
  const auto loss = torch::cross_entropy_loss(torch::matmul(mine, gathered.t()), targets, {}, at::Reduction::Sum);
  loss.backward();
  auto total = loss.detach().reshape({1}).clone();
  comm().allreduce(total);

  auto reference = all.clone().set_requires_grad(true);
  torch::Tensor ref_loss = torch::zeros({}, torch::kDouble);
  for (int q = 0; q < n; ++q)
    ref_loss = ref_loss + torch::cross_entropy_loss(torch::matmul(reference.narrow(0, q * b, b), reference.t()),
                                                    torch::arange(q * b, (q + 1) * b), {}, at::Reduction::Sum);
  ref_loss.backward();
  EXPECT_NEAR(total.item<double>(), ref_loss.item<double>(), 1e-10);
  EXPECT_LT(max_relative_error({mine.grad()}, {reference.grad().narrow(0, r * b, b)}), 1e-10);
}
