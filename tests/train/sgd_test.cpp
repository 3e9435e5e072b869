// train::SGD against torch::optim::SGD (the reference): bit-identical parameters and momentum buffers
// over several steps, with two weight-decay groups, a parameter that has no gradient in a step, and
// the learning rate and momentum changed between steps (as the trainer's warmup does); plain
// momentum and no momentum too; invalid options.
#include "meridian/train/sgd.h"

#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <stdexcept>

namespace train = meridian::train;

namespace {

void compare(bool nesterov, double momentum0, double dampening) {
  torch::manual_seed(nesterov ? 1 : 2);
  const std::vector<std::vector<int64_t>> shapes{{7, 5}, {5}, {3, 2, 2}, {1}};
  std::vector<torch::Tensor> mine, theirs;
  for (const auto& shape : shapes) {
    auto p = torch::randn(shape);
    mine.push_back(p.clone().set_requires_grad(true));
    theirs.push_back(p.clone().set_requires_grad(true));
  }
  const double lr = 0.01, wd = 5e-4;
  train::SGD ours({{{mine[0], mine[2]}, wd}, {{mine[1], mine[3]}, 0.0}}, {lr, momentum0, nesterov, dampening});
  auto options = [&](double decay) {
    return std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(lr).momentum(momentum0).nesterov(nesterov).dampening(dampening).weight_decay(decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{theirs[0], theirs[2]}, options(wd));
  groups.emplace_back(std::vector<torch::Tensor>{theirs[1], theirs[3]}, options(0));
  torch::optim::SGD reference(std::move(groups),
                              torch::optim::SGDOptions(lr).momentum(momentum0).nesterov(nesterov).dampening(dampening));
  const int steps = 7;
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto g = torch::randn(shapes[i]) * (1 + step);
      const bool skip = i == 3 && step == 2;  // no gradient this step: left alone by both
      mine[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
      theirs[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
    }
    // A changing learning rate and (with momentum) a momentum ramp, as the trainer's warmup sets them.
    const double lr_now = lr * (step + 1) / double(steps);
    const double momentum_now = momentum0 == 0 ? 0.0 : momentum0 + (0.937 - momentum0) * std::min(1.0, step / 4.0);
    ours.set_lr(lr_now);
    ours.set_momentum(momentum_now);
    for (auto& group : reference.param_groups()) {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      o.lr(lr_now);
      o.momentum(momentum_now);
    }
    ours.step();
    reference.step();
    for (size_t i = 0; i < shapes.size(); ++i)
      ASSERT_TRUE(torch::equal(mine[i], theirs[i]))
          << "parameter " << i << " step " << step << " nesterov " << nesterov;
  }
  // Flat state order: group 0 (params 0, 2), then group 1 (params 1, 3).
  EXPECT_EQ(ours.state()[0].step, steps);
  EXPECT_EQ(ours.state()[3].step, steps - 1);  // parameter 3 skipped one step
  // torch keys its state by TensorImpl (a string in 1.13, a pointer in 2.x): matched here by shape,
  // which differs between the four parameters.
  for (size_t flat = 0; flat < 4; ++flat) {
    const auto& ours_buffer = ours.state()[flat].momentum_buffer;
    if (momentum0 == 0) {
      EXPECT_FALSE(ours_buffer.defined());
      continue;
    }
    ASSERT_TRUE(ours_buffer.defined());
    int matched = 0;
    for (const auto& entry : reference.state()) {
      const auto& buffer = static_cast<const torch::optim::SGDParamState&>(*entry.second).momentum_buffer();
      if (buffer.sizes() != ours_buffer.sizes()) continue;
      ++matched;
      EXPECT_TRUE(torch::equal(ours_buffer, buffer)) << "momentum buffer " << flat;
    }
    EXPECT_EQ(matched, 1) << "momentum buffer " << flat;
  }
  if (momentum0 == 0) EXPECT_EQ(reference.state().size(), 0u);
}

}  // namespace

TEST(SGD, NesterovMatchesTorchBitForBit) { compare(true, 0.8, 0); }
TEST(SGD, MomentumWithDampeningMatchesTorchBitForBit) { compare(false, 0.9, 0.1); }
TEST(SGD, NoMomentumMatchesTorchBitForBit) { compare(false, 0, 0); }

TEST(SGD, BufferStartsAtTheFirstGradientAndIsUsedAfterwards) {
  auto p = torch::ones({2}).set_requires_grad(true);
  train::SGD sgd({{{p}, 0.0}}, {0.5, 0.9, false, 0});
  EXPECT_FALSE(sgd.state()[0].momentum_buffer.defined());
  p.mutable_grad() = torch::full({2}, 2.0);
  sgd.step();  // buf = g = 2; p = 1 - 0.5 * 2 = 0
  EXPECT_TRUE(torch::equal(p, torch::zeros({2})));
  sgd.step();  // buf = 0.9 * 2 + 2 = 3.8; p = 0 - 0.5 * 3.8
  EXPECT_TRUE(torch::allclose(p, torch::full({2}, -1.9)));
  EXPECT_TRUE(torch::allclose(sgd.state()[0].momentum_buffer, torch::full({2}, 3.8)));
}

TEST(SGD, InvalidOptionsAreRejected) {
  auto p = torch::ones({2}).set_requires_grad(true);
  EXPECT_THROW(train::SGD({{{p}, 0.0}}, {0.1, 0.0, true, 0}), std::invalid_argument);    // Nesterov without momentum
  EXPECT_THROW(train::SGD({{{p}, 0.0}}, {0.1, 0.9, true, 0.1}), std::invalid_argument);  // Nesterov with dampening
  EXPECT_THROW(train::SGD({{{p}, 0.0}}, {0.1, 1.0, false, 0}), std::invalid_argument);
  EXPECT_THROW(train::SGD({{{p}, 0.0}}, {-0.1, 0.9, false, 0}), std::invalid_argument);
  train::SGD sgd({{{p}, 0.0}}, {0.1, 0.9, true, 0});
  EXPECT_THROW(sgd.set_momentum(0), std::invalid_argument);
  EXPECT_DOUBLE_EQ(sgd.momentum(), 0.9);
}

// Ultralytics' warmup_bias_lr: parameters named "<...>.bias" with one dimension take the bias lr,
// the rest the lr; set_lr(lr) gives everyone lr again.
TEST(SGD, BiasesTakeTheirOwnLearningRate) {
  auto weight = torch::zeros({2, 2}, torch::requires_grad()), bias = torch::zeros({2}, torch::requires_grad());
  auto gain = torch::zeros({2}, torch::requires_grad());  // one dimension, not named .bias: the lr
  train::SGD sgd({{{weight, gain}, 0.0, {"conv.weight", "bn.weight"}}, {{bias}, 0.0, {"conv.bias"}}},
                 train::SGDOptions{0.1, 0, false, 0});
  for (auto* p : {&weight, &bias, &gain}) p->mutable_grad() = torch::ones_like(*p);
  sgd.set_lr(0.1, 0.5);
  sgd.step();
  EXPECT_TRUE(torch::allclose(weight, torch::full({2, 2}, -0.1)));
  EXPECT_TRUE(torch::allclose(gain, torch::full({2}, -0.1)));
  EXPECT_TRUE(torch::allclose(bias, torch::full({2}, -0.5)));
  sgd.set_lr(0.1);
  sgd.step();
  EXPECT_TRUE(torch::allclose(bias, torch::full({2}, -0.6)));
}
