// train::AdamW against torch::optim::AdamW (the reference): bit-identical parameters and moments
// over several steps, with two weight-decay groups and a parameter that has no gradient in a step.
#include "meridian/train/adamw.h"

#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

namespace train = meridian::train;

TEST(AdamW, MatchesTorchBitForBit) {
  torch::manual_seed(0);
  const std::vector<std::vector<int64_t>> shapes{{7, 5}, {5}, {3, 2, 2}, {1}};
  std::vector<torch::Tensor> mine, theirs;
  for (const auto& shape : shapes) {
    auto p = torch::randn(shape);
    mine.push_back(p.clone().set_requires_grad(true));
    theirs.push_back(p.clone().set_requires_grad(true));
  }
  const double lr = 3e-3, wd = 0.05;
  train::AdamW ours({{{mine[0], mine[2]}, wd}, {{mine[1], mine[3]}, 0.0}}, {lr, 0.9, 0.98, 1e-6});
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{theirs[0], theirs[2]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(lr).betas({0.9, 0.98}).eps(1e-6).weight_decay(wd)));
  groups.emplace_back(std::vector<torch::Tensor>{theirs[1], theirs[3]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(lr).betas({0.9, 0.98}).eps(1e-6).weight_decay(0)));
  torch::optim::AdamW reference(std::move(groups), torch::optim::AdamWOptions(lr));
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto g = torch::randn(shapes[i]) * (1 + step);
      const bool skip = i == 3 && step == 2;  // no gradient this step: left alone by both
      mine[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
      theirs[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
    }
    const double lr_now = lr * (step + 1) / 6.0;  // a changing learning rate, as the schedule sets it
    ours.set_lr(lr_now);
    for (auto& group : reference.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr_now);
    ours.step();
    reference.step();
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_TRUE(torch::equal(mine[i], theirs[i])) << "parameter " << i << " step " << step;
  }
  // Flat state order: group 0 (params 0, 2), then group 1 (params 1, 3).
  EXPECT_EQ(ours.state()[0].step, 6);
  EXPECT_EQ(ours.state()[3].step, 5);  // parameter 3 skipped one step
  EXPECT_TRUE(ours.state()[1].exp_avg.defined());
  EXPECT_EQ(ours.state()[1].exp_avg.sizes(), (at::IntArrayRef{3, 2, 2}));
}
