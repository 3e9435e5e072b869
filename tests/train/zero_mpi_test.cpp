// ZeRO-1 (train::ShardedAdamW) against the unsharded train::AdamW: every rank trains the same small
// model on its own batches; the reference recomputes every rank's batch locally and steps AdamW on
// the gradient of the mean loss. Parameter count 81 (not a multiple of 2 or 4: the padding and
// shards that split parameters are exercised). Runs on the runtime's device (NCCL on CUDA).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/nn/shape_only.h"
#include "meridian/train/adamw.h"
#include "meridian/train/zero.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace comm = meridian::comm;
namespace train = meridian::train;
namespace nn = meridian::nn;

namespace {

std::unique_ptr<comm::Communicator> g_comm;
comm::Communicator& communicator() { return *g_comm; }

class Zero : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_comm = comm::make_communicator(runtime(), comm::default_backend(runtime())); }
  static void TearDownTestSuite() { g_comm.reset(); }
};

// Linear(7,6) + LayerNorm(6) + Linear(6,3): 42 + 6 + 6 + 6 + 18 + 3 = 81 elements. With extras: a
// parameter no rank ever uses and one only rank 0's loss uses, from step 2 on.
struct Model {
  explicit Model(bool extras) : extras(extras) {
    torch::manual_seed(1234);
    fc1 = torch::nn::Linear(7, 6);
    norm = torch::nn::LayerNorm(torch::nn::LayerNormOptions({6}));
    fc2 = torch::nn::Linear(6, 3);
    unused = torch::randn({5});
    rank0_only = torch::randn({4});
    const auto device = runtime().device();
    fc1->to(device);
    norm->to(device);
    fc2->to(device);
    unused = unused.to(device).requires_grad_(true);
    rank0_only = rank0_only.to(device).requires_grad_(true);
  }

  std::vector<train::ParamGroup> groups() {
    train::ParamGroup decaying{{fc1->weight, fc2->weight}, 0.3, {}},
        constant{{fc1->bias, norm->weight, norm->bias, fc2->bias}, 0.0, {}};
    if (extras) {
      decaying.params.push_back(unused);
      constant.params.push_back(rank0_only);
    }
    return {decaying, constant};
  }
  std::vector<torch::Tensor> params() {
    std::vector<torch::Tensor> all;
    for (auto& g : groups())
      for (auto& p : g.params) all.push_back(p);
    return all;
  }
  void zero_grad() {
    for (auto& p : params()) p.mutable_grad() = torch::Tensor();
  }

  // Rank q's loss at step t (its own batch).
  torch::Tensor loss(int q, int t) {
    torch::manual_seed(1000 + 100 * t + q);
    const auto x = torch::randn({4, 7}).to(runtime().device());
    const auto y = torch::randn({4, 3}).to(runtime().device());
    auto l = torch::mse_loss(fc2(torch::tanh(norm(fc1(x)))), y);
    if (extras && q == 0 && t >= 2) l = l + (rank0_only * x.mean(0).narrow(0, 0, 4)).sum();
    return l;
  }

  torch::Tensor flat() {
    std::vector<torch::Tensor> parts;
    for (auto& p : params()) parts.push_back(p.detach().reshape({-1}).clone());
    return torch::cat(parts);
  }

  bool extras;
  torch::nn::Linear fc1{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc2{nullptr};
  torch::Tensor unused, rank0_only;
};

double lr_at(int t) { return 0.05 / (1 + t); }

// Trains `sharded` with ShardedAdamW and `reference` with AdamW on the mean loss, 5 steps with a
// changing learning rate.
void train_both(Model& sharded, Model& reference, train::ShardedAdamW& zero, train::AdamW& adamw) {
  const int world = runtime().size(), rank = runtime().rank();
  for (int t = 0; t < 5; ++t) {
    sharded.zero_grad();
    sharded.loss(rank, t).backward();
    zero.set_lr(lr_at(t));
    zero.step();

    reference.zero_grad();
    torch::Tensor total = reference.loss(0, t);
    for (int q = 1; q < world; ++q) total = total + reference.loss(q, t);
    (total / world).backward();
    adamw.set_lr(lr_at(t));
    adamw.step();
  }
}

// Every rank's flat parameters equal (bitwise) to this rank's.
void expect_identical_across_ranks(Model& model) {
  const auto mine = model.flat().contiguous();
  auto all = torch::empty({mine.numel() * runtime().size()}, mine.options());
  communicator().allgather(mine, all);
  for (int q = 0; q < runtime().size(); ++q)
    EXPECT_TRUE(torch::equal(all.narrow(0, q * mine.numel(), mine.numel()), mine)) << "rank " << q << " differs";
}

TEST_F(Zero, MatchesUnshardedAdamW) {
  Model sharded(false), reference(false);
  ASSERT_TRUE(torch::equal(sharded.flat(), reference.flat()));
  const train::AdamWOptions options{0.05, 0.9, 0.999, 1e-8};
  train::ShardedAdamW zero(sharded.groups(), options, communicator());
  train::AdamW adamw(reference.groups(), options);
  ASSERT_EQ(zero.numel(), 81);
  train_both(sharded, reference, zero, adamw);

  const auto a = sharded.flat().cpu(), b = reference.flat().cpu();
  const double max_diff = (a - b).abs().max().item<double>();
  if (runtime().rank() == 0)
    std::printf("[ zero ] %d ranks: max |sharded - reference| after 5 steps = %.3g (%s)\n", runtime().size(), max_diff,
                torch::equal(a, b) ? "bit-identical" : "not bit-identical");
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7)) << "max difference " << max_diff;
  EXPECT_GT((a - Model(false).flat().cpu()).abs().max().item<double>(), 1e-3);  // it did train
  // A second reference, closer to the sharded path: AdamW on local gradients averaged with an
  // allreduce (what DDP does). Its sum runs in the backend's allreduce order, so bitwise agreement is
  // reported, not required.
  Model averaged(false);
  train::AdamW adamw_averaged(averaged.groups(), options);
  for (int t = 0; t < 5; ++t) {
    averaged.zero_grad();
    averaged.loss(runtime().rank(), t).backward();
    for (auto& p : averaged.params()) communicator().allreduce(p.mutable_grad(), meridian::comm::ReduceOp::Avg);
    adamw_averaged.set_lr(lr_at(t));
    adamw_averaged.step();
  }
  const auto c = averaged.flat().cpu();
  if (runtime().rank() == 0)
    std::printf("[ zero ] %d ranks: max |sharded - allreduce-averaged AdamW| = %.3g (%s)\n", runtime().size(),
                (a - c).abs().max().item<double>(), torch::equal(a, c) ? "bit-identical" : "not bit-identical");
  EXPECT_TRUE(torch::allclose(a, c, 1e-6, 1e-7));

  for (auto s : zero.steps()) EXPECT_EQ(s, 5);
  for (size_t i = 0; i < adamw.state().size(); ++i) EXPECT_EQ(adamw.state()[i].step, zero.steps()[i]);
  expect_identical_across_ranks(sharded);

  // The shard's moments are the matching slice of the reference's.
  std::vector<torch::Tensor> m, v;
  for (auto& s : adamw.state()) m.push_back(s.exp_avg.reshape({-1})), v.push_back(s.exp_avg_sq.reshape({-1}));
  const int64_t begin = zero.shard_begin(), end = std::min<int64_t>(zero.shard_end(), zero.numel());
  if (begin < end) {
    EXPECT_TRUE(torch::allclose(zero.exp_avg_shard().narrow(0, 0, end - begin).cpu(),
                                torch::cat(m).narrow(0, begin, end - begin).cpu(), 1e-5, 1e-8));
    EXPECT_TRUE(torch::allclose(zero.exp_avg_sq_shard().narrow(0, 0, end - begin).cpu(),
                                torch::cat(v).narrow(0, begin, end - begin).cpu(), 1e-5, 1e-10));
  }
  if (zero.shard_end() > end)  // padding
    EXPECT_EQ(zero.exp_avg_shard().narrow(0, end - begin, zero.shard_end() - end).abs().sum().item<double>(), 0.0);
}

// Buckets of a few elements (pieces that start and end inside parameters, many collectives) give the
// same result as one bucket.
TEST_F(Zero, SmallBucketsMatchOneBucket) {
  Model small(false), one(false), reference(false);
  const train::AdamWOptions options{0.05, 0.9, 0.999, 1e-8};
  train::ShardedAdamW zero_small(small.groups(), options, communicator(), /*bucket_numel=*/7);
  train::ShardedAdamW zero_one(one.groups(), options, communicator());
  train::AdamW adamw(reference.groups(), options);
  const int64_t s = zero_small.shard_numel();
  EXPECT_EQ(zero_small.memory_report().buffer_bytes,
            4 * (std::max<int64_t>(1, std::min<int64_t>(s, 7 / runtime().size())) * runtime().size() + 2 * s));
  train_both(small, reference, zero_small, adamw);
  for (int t = 0; t < 5; ++t) {
    one.zero_grad();
    one.loss(runtime().rank(), t).backward();
    zero_one.set_lr(lr_at(t));
    zero_one.step();
  }
  EXPECT_TRUE(torch::allclose(small.flat().cpu(), one.flat().cpu(), 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(small.flat().cpu(), reference.flat().cpu(), 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(zero_small.exp_avg_sq_shard().cpu(), zero_one.exp_avg_sq_shard().cpu(), 1e-5, 1e-10));
  expect_identical_across_ranks(small);
}

TEST_F(Zero, ParameterWithoutGradientIsUntouched) {
  Model sharded(true), reference(true);
  const auto unused_before = sharded.unused.detach().clone();
  const train::AdamWOptions options{0.05, 0.9, 0.999, 1e-8};
  train::ShardedAdamW zero(sharded.groups(), options, communicator());
  train::AdamW adamw(reference.groups(), options);
  ASSERT_EQ(zero.numel(), 81 + 5 + 4);
  train_both(sharded, reference, zero, adamw);

  // `unused` is the last of the decaying group: flat index 2; `rank0_only` the last of all: 7.
  EXPECT_TRUE(torch::equal(sharded.unused.detach(), unused_before));  // not even decayed
  EXPECT_EQ(zero.steps()[2], 0);
  EXPECT_EQ(adamw.state()[2].step, 0);
  // From step 2 on a gradient on rank 0 only: updated everywhere with g0 / W, its own step count
  // (3, not the others' 5) in its bias corrections.
  EXPECT_EQ(zero.steps()[7], 3);
  EXPECT_EQ(adamw.state()[7].step, 3);
  EXPECT_EQ(zero.steps()[0], 5);
  EXPECT_TRUE(torch::allclose(sharded.flat().cpu(), reference.flat().cpu(), 1e-6, 1e-7))
      << "max difference " << (sharded.flat() - reference.flat()).abs().max().item<double>();
  expect_identical_across_ranks(sharded);
}

// Stages 2 and 3 in units of at most 20 elements (no blocks: every parameter in buckets; fc1.weight,
// 42 elements, is a unit alone), with the parameter no rank uses and the one only rank 0 uses from
// step 2 on: the same parameters, moments and step counts as stage 1 (to float rounding). Backward reduces units on
// rank 0 that rank 1 only reduces in end_backward (its hooks never fire for rank0_only): the fixed
// order keeps the collectives matched. Stage 3 frees the parameters between steps.
TEST_F(Zero, StagesTwoAndThreeMatchStageOne) {
  const train::AdamWOptions options{0.05, 0.9, 0.999, 1e-8};
  Model one(true);
  train::ShardedAdamW zero_one(one.groups(), options, communicator());
  for (int t = 0; t < 5; ++t) {
    one.zero_grad();
    one.loss(runtime().rank(), t).backward();
    zero_one.set_lr(lr_at(t));
    zero_one.step();
  }
  // Stage 3 also with the state offloaded (host memory: the same operations, a device copy of the
  // shard), and deferred (shape-only parameters, the initial values written into the shards).
  struct Variant {
    int stage;
    bool offload, deferred;
  };
  for (const auto& [stage, offload, deferred] :
       {Variant{2, false, false}, Variant{3, false, false}, Variant{3, true, false}, Variant{3, false, true}}) {
    Model model(true);
    std::vector<at::Tensor> initial;
    if (deferred)
      for (auto& p : model.params()) {
        initial.push_back(p.detach().clone());
        p.set_data(nn::shape_only(p.sizes(), p.scalar_type()));
      }
    train::ZeroOptions zo;
    zo.stage = stage;
    zo.bucket_numel = 20;
    zo.offload = offload;
    zo.deferred = deferred;
    zo.device = runtime().device();
    train::ShardedAdamW zero(model.groups(), options, communicator(), zo);
    if (deferred)  // the flat order is model.params()'
      zero.with_each_unit(false, [&](const train::ZeroUnit& u, const std::vector<at::Tensor>& full) {
        for (size_t k = 0; k < u.params.size(); ++k) full[k].copy_(initial[u.params[k]]);
      });
    EXPECT_EQ(zero.offloaded(), offload);
    if (offload) EXPECT_TRUE(zero.exp_avg_shard().device().is_cpu());
    EXPECT_EQ(zero.units().size(),
              4u);  // [fc1.weight] [fc2.weight] [unused fc1.bias norm.weight] [norm.bias fc2.bias rank0_only]
    if (stage == 3) EXPECT_EQ(model.fc1->weight.numel(), 0);  // freed until gathered
    for (int t = 0; t < 5; ++t) {
      model.zero_grad();
      zero.gather_outside_blocks();  // stage 3: every unit (no blocks); nothing at stage 2
      model.loss(runtime().rank(), t).backward();
      zero.set_lr(lr_at(t));
      zero.step();  // end_backward, reduce_gradients, update
      for (const auto& p : model.params()) EXPECT_FALSE(p.grad().defined()) << "stage " << stage;  // dropped
    }
    zero.gather_outside_blocks();
    const auto a = model.flat().cpu(), b = one.flat().cpu();
    zero.release_all();
    const double diff = (a - b).abs().max().item<double>();
    if (runtime().rank() == 0)
      std::printf("[ zero ] %d ranks: stage %d%s vs stage 1: max difference %.3g (%s)\n", runtime().size(), stage,
                  offload    ? " offloaded"
                  : deferred ? " deferred"
                             : "",
                  diff, torch::equal(a, b) ? "bit-identical" : "not bit-identical");
    // Not bit for bit: the units split the parameters at other places than stage 1's single unit,
    // and the fused AdamW kernel rounds an element of its vector body and one of its scalar tail
    // differently (1 ulp: 2e-8 here). The same layout is bit for bit (zero_stages_mpi_test: DDP vs
    // ZeRO on whole checkpoints).
    EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7)) << "stage " << stage << ": " << diff;
    EXPECT_EQ(zero.steps(), zero_one.steps()) << "stage " << stage;
    EXPECT_EQ(zero.steps()[2], 0);  // unused
    EXPECT_EQ(zero.steps()[7], 3);  // rank0_only, from step 2 on
    // The moments by parameter, whichever layout holds them: gathered from every rank's shards.
    auto moments_of = [&](train::ShardedAdamW& z) {
      std::vector<at::Tensor> per_param(size_t(z.offsets().size() - 1));
      for (const auto& u : z.units()) {
        at::Tensor all = at::empty({z.world_size() * u.shard_numel}, z.exp_avg_sq_shard().options());
        communicator().allgather(z.exp_avg_sq_shard().narrow(0, u.base, u.shard_numel), all);
        for (size_t k = 0; k < u.params.size(); ++k)
          per_param[u.params[k]] = all.narrow(0, u.offsets[k], u.offsets[k + 1] - u.offsets[k]).cpu();
      }
      return per_param;
    };
    const auto mine = moments_of(zero), theirs = moments_of(zero_one);
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_TRUE(torch::allclose(mine[i], theirs[i], 1e-5, 1e-10)) << i;
  }
}

// bfloat16 parameters with float32 masters: the parameters are bfloat16 roundings of the masters
// after every update, the masters follow AdamW on the bfloat16 gradients.
TEST_F(Zero, BFloat16ParametersKeepFloat32Masters) {
  const train::AdamWOptions options{0.05, 0.9, 0.999, 1e-8};
  for (const auto& [stage, offload] :
       {std::pair{1, false}, std::pair{2, false}, std::pair{3, false}, std::pair{3, true}}) {
    Model model(false);
    train::ZeroOptions zo;
    zo.stage = stage;
    zo.bucket_numel = 20;
    zo.param_dtype = at::kBFloat16;
    zo.offload = offload;
    train::ShardedAdamW zero(model.groups(), options, communicator(), zo);
    EXPECT_TRUE(zero.owns_master());
    for (int t = 0; t < 3; ++t) {
      model.zero_grad();
      zero.gather_outside_blocks();
      // The test model's input is float32: the loss in float32 from bfloat16 weights.
      torch::manual_seed(1000 + 100 * t + runtime().rank());
      const auto x = torch::randn({4, 7}).to(runtime().device());
      const auto y = torch::randn({4, 3}).to(runtime().device());
      auto h = torch::nn::functional::linear(x.to(at::kBFloat16), model.fc1->weight, model.fc1->bias);
      h = torch::tanh(model.norm(h));
      const auto out = torch::nn::functional::linear(h, model.fc2->weight, model.fc2->bias).to(at::kFloat);
      torch::mse_loss(out, y).backward();
      zero.set_lr(lr_at(t));
      zero.step();
    }
    zero.gather_outside_blocks();
    for (const auto& p : model.params()) EXPECT_EQ(p.scalar_type(), at::kBFloat16) << "stage " << stage;
    // Each parameter is its master rounded to bfloat16 (the masters gathered in float32).
    zero.with_each_unit(true, [&](const train::ZeroUnit& u, const std::vector<at::Tensor>& full) {
      for (size_t k = 0; k < u.params.size(); ++k) {
        const auto p = model.params()[u.params[k]].detach().cpu();
        EXPECT_EQ(full[k].scalar_type(), at::kFloat);
        EXPECT_TRUE(torch::equal(full[k].cpu().to(at::kBFloat16), p)) << "stage " << stage << " parameter " << k;
      }
    });
    zero.release_all();
  }
}

TEST(ZeroLayout, ShardsAboveTheAlignmentAreMultiplesOfIt) {
  const int64_t a = train::kShardAlign;
  EXPECT_EQ(train::zero_shard_numel(81, 4), 21);            // small: ceil(N / W)
  EXPECT_EQ(train::zero_shard_numel(2 * a, 2), a);          // exactly one block each
  EXPECT_EQ(train::zero_shard_numel(2 * a + 2, 2), 2 * a);  // a + 1 rounds up to 2 blocks
  EXPECT_EQ(train::zero_shard_numel(3 * a + 5, 1), 4 * a);
  EXPECT_EQ(train::zero_bucket_piece(train::zero_shard_numel(3 * a + 5, 1), 1, 1000), 1000);
  EXPECT_EQ(train::ZeroMemoryReport::of(2 * a + 2, 2).optimizer_bytes, 8 * 2 * a);
}

TEST_F(Zero, MemoryReportInClosedForm) {
  Model model(false);
  train::ShardedAdamW zero(model.groups(), {}, communicator());
  const int64_t w = runtime().size(), n = 81, s = (n + w - 1) / w;
  EXPECT_EQ(zero.world_size(), w);
  EXPECT_EQ(zero.shard_numel(), s);
  EXPECT_EQ(zero.padded_numel(), w * s);
  EXPECT_EQ(zero.shard_begin(), runtime().rank() * s);
  EXPECT_EQ(zero.shard_end(), (runtime().rank() + 1) * s);
  EXPECT_EQ(zero.exp_avg_shard().numel(), s);
  EXPECT_EQ(zero.exp_avg_sq_shard().numel(), s);
  EXPECT_EQ(zero.offsets(), (std::vector<int64_t>{0, 42, 60, 66, 72, 78, 81}));
  const auto r = zero.memory_report();
  EXPECT_EQ(r.world_size, w);
  EXPECT_EQ(r.numel, n);
  EXPECT_EQ(r.shard_numel, s);
  EXPECT_EQ(r.parameter_bytes, 4 * n);
  EXPECT_EQ(r.gradient_bytes, 4 * n);
  EXPECT_EQ(r.optimizer_bytes, 8 * s);
  EXPECT_EQ(r.buffer_bytes, 4 * (w * s + 2 * s));
  EXPECT_EQ(r.total(), 8 * n + 8 * s + 4 * (w * s + 2 * s));
  EXPECT_EQ(train::ZeroMemoryReport::of_stage(0, n, w, n, n).total(), 16 * n);  // DDP + AdamW
  // Stage 3 offloaded: 16 S to the host; the device keeps the shard in the parameters' dtype (2 S in
  // bfloat16), the gathered units (outside blocks + 2 units) and 3 units of gradients in flight.
  const int64_t big = 1 << 20, u = 1000, outside = 300, sb = train::zero_shard_numel(big, 8);
  const auto off = train::ZeroMemoryReport::of_stage(3, big, 8, u, outside, 2, true);
  EXPECT_TRUE(off.offload);
  EXPECT_EQ(off.host_bytes, 16 * sb);
  EXPECT_EQ(off.total(), 2 * sb + 2 * (outside + 2 * u) + 3 * 2 * u);
  EXPECT_EQ(off.host_total(false), 16 * sb);
  EXPECT_EQ(off.host_total(true), off.total() + 16 * sb);
  EXPECT_EQ(train::ZeroMemoryReport::of_stage(3, big, 8, u, outside, 2).total(), off.total() + 16 * sb - 2 * sb);
  EXPECT_THROW(train::ZeroMemoryReport::of_stage(2, big, 8, u, outside, 2, true), meridian::UserError);
  EXPECT_NE(r.to_string().find("optimizer state"), std::string::npos);
}

TEST_F(Zero, RanksWithDifferentParametersFailEverywhere) {
  if (runtime().size() == 1) GTEST_SKIP() << "needs two ranks";
  Model model(true);
  auto groups = model.groups();
  if (runtime().rank() == 0) groups[1].params.pop_back();  // rank 0 lacks rank0_only
  EXPECT_THROW(train::ShardedAdamW(groups, {}, communicator()), meridian::UserError);
}

}  // namespace
