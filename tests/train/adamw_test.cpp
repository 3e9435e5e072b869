// train::AdamW against two references: torch::optim::AdamW (bit-identical parameters over several
// steps on the _foreach_ path, options.fused false; to rounding on the fused path), and the per-tensor
// loop AdamW ran before it used LibTorch's fused kernel, written out here: float32 and bfloat16
// parameters, three weight-decay groups, a non-contiguous parameter (the _foreach_ path beside fused
// calls), parameters without a gradient on some steps (left alone, their step count held), a
// learning rate changed at every step. Relative error (Frobenius norm) of parameters and moments
// below 1e-6 in float32, 1e-2 in bfloat16 (the fused kernel rounds bf16 values once, the loop after
// every operation).
#include "meridian/train/adamw.h"

#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace train = meridian::train;

namespace {
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  const double norm = b64.norm().item<double>();
  return (a64 - b64).norm().item<double>() / (norm > 0 ? norm : 1.0);
}

// The loop of train::AdamW::step before the fused kernel: torch::optim::AdamW's order, one parameter
// at a time.
struct LoopAdamW {
  struct State {
    at::Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  std::vector<std::pair<std::vector<at::Tensor>, double>> groups;  // parameters, weight decay
  double lr, beta1, beta2, eps;
  std::vector<State> state;

  void step() {
    at::NoGradGuard no_grad;
    size_t index = 0;
    for (auto& [params, weight_decay] : groups)
      for (auto& p : params) {
        State& s = state[index++];
        const at::Tensor& grad = p.grad();
        if (!grad.defined()) continue;
        if (weight_decay != 0) p.mul_(1 - lr * weight_decay);
        if (!s.exp_avg.defined()) {
          s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
          s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
        }
        s.step += 1;
        const double bias_correction1 = 1 - std::pow(beta1, double(s.step));
        const double bias_correction2 = 1 - std::pow(beta2, double(s.step));
        s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
        s.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
        const at::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(eps);
        p.addcdiv_(s.exp_avg, denom, -lr / bias_correction1);
      }
  }
};

// torch::optim::AdamW on the same parameters and groups, 6 steps with a changing learning rate and
// one gradient missing; each step, `check(mine, theirs, step)` for every parameter.
void against_torch(bool fused,
                   const std::function<void(const at::Tensor&, const at::Tensor&, const std::string&)>& check) {
  torch::manual_seed(0);
  const std::vector<std::vector<int64_t>> shapes{{7, 5}, {5}, {3, 2, 2}, {1}};
  std::vector<torch::Tensor> mine, theirs;
  for (const auto& shape : shapes) {
    auto p = torch::randn(shape);
    mine.push_back(p.clone().set_requires_grad(true));
    theirs.push_back(p.clone().set_requires_grad(true));
  }
  const double lr = 3e-3, wd = 0.05;
  train::AdamWOptions options{lr, 0.9, 0.98, 1e-6};
  options.fused = fused;
  train::AdamW ours({{{mine[0], mine[2]}, wd}, {{mine[1], mine[3]}, 0.0}}, options);
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
      check(mine[i], theirs[i], "parameter " + std::to_string(i) + " step " + std::to_string(step));
  }
  // Flat state order: group 0 (params 0, 2), then group 1 (params 1, 3).
  EXPECT_EQ(ours.state()[0].step, 6);
  EXPECT_EQ(ours.state()[3].step, 5);  // parameter 3 skipped one step
  EXPECT_TRUE(ours.state()[1].exp_avg.defined());
  EXPECT_EQ(ours.state()[1].exp_avg.sizes(), (at::IntArrayRef{3, 2, 2}));
}
}  // namespace

TEST(AdamW, ForeachPathMatchesTorchBitForBit) {
  against_torch(false, [](const at::Tensor& mine, const at::Tensor& theirs, const std::string& what) {
    EXPECT_TRUE(torch::equal(mine, theirs)) << what;
  });
}

TEST(AdamW, FusedMatchesTorchToRounding) {
  against_torch(true, [](const at::Tensor& mine, const at::Tensor& theirs, const std::string& what) {
    EXPECT_LT(relative_error(mine, theirs), 1e-6) << what;
  });
}

TEST(AdamW, FusedEqualsThePerTensorLoop) {
  torch::manual_seed(1);
  struct Spec {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    size_t group;
    bool transposed;  // a non-contiguous parameter
  };
  const std::vector<Spec> specs{{{16, 9}, at::kFloat, 0, false},      {{9}, at::kFloat, 1, false},
                                {{4, 3, 5}, at::kBFloat16, 0, false}, {{33}, at::kBFloat16, 1, false},
                                {{6, 8}, at::kFloat, 2, true},        {{70}, at::kFloat, 2, false},
                                {{5, 5}, at::kBFloat16, 2, false},    {{1}, at::kFloat, 0, false}};
  const std::vector<double> decay{0.05, 0.0, 0.1};
  std::vector<at::Tensor> mine, theirs;
  std::vector<train::ParamGroup> groups(3);
  LoopAdamW loop{{}, 2e-3, 0.9, 0.95, 1e-8, {}};
  loop.groups.resize(3);
  for (size_t g = 0; g < 3; ++g) groups[g].weight_decay = loop.groups[g].second = decay[g];
  for (const auto& s : specs) {
    auto p = torch::randn(s.shape).to(s.dtype);
    if (s.transposed) p = p.t();
    mine.push_back(p.clone(at::MemoryFormat::Preserve).set_requires_grad(true));
    theirs.push_back(p.clone(at::MemoryFormat::Preserve).set_requires_grad(true));
    groups[s.group].params.push_back(mine.back());
    loop.groups[s.group].first.push_back(theirs.back());
  }
  ASSERT_FALSE(mine[4].is_contiguous());
  train::AdamW ours(groups, {2e-3, 0.9, 0.95, 1e-8});
  loop.state.resize(specs.size());
  // The flat state index of each parameter (group order, then parameter order).
  std::vector<size_t> flat(specs.size());
  for (size_t i = 0, n = 0; i < 3; ++i)
    for (size_t j = 0; j < specs.size(); ++j)
      if (specs[j].group == i) flat[j] = n++;
  std::vector<int64_t> steps(specs.size(), 0);
  for (int step = 0; step < 8; ++step) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const bool skip = (i == 1 && step % 3 == 1) || (i == 6 && step == 4) || (i == 7 && step < 2);
      const auto g = (torch::randn(mine[i].sizes()) * (0.5 + step)).to(specs[i].dtype);
      mine[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
      theirs[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
      steps[i] += skip ? 0 : 1;
    }
    const double lr = 2e-3 * (step < 4 ? 1.0 : 0.25 * (8 - step));  // changed as the schedule would
    ours.set_lr(lr);
    loop.lr = lr;
    ours.step();
    loop.step();
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string what = "parameter " + std::to_string(i) + " step " + std::to_string(step);
      const double tolerance = specs[i].dtype == at::kBFloat16 ? 1e-2 : 1e-6;
      const auto& s = ours.state()[flat[i]];
      const auto& r = loop.state[flat[i]];
      EXPECT_EQ(s.step, steps[i]) << what;
      EXPECT_EQ(s.step, r.step) << what;
      EXPECT_EQ(mine[i].scalar_type(), specs[i].dtype) << what;
      EXPECT_LT(relative_error(mine[i], theirs[i]), tolerance) << what;
      if (!r.exp_avg.defined()) {
        EXPECT_FALSE(s.exp_avg.defined()) << what;
        continue;
      }
      EXPECT_EQ(s.exp_avg.scalar_type(), specs[i].dtype) << what;
      EXPECT_LT(relative_error(s.exp_avg, r.exp_avg), tolerance) << what << " exp_avg";
      EXPECT_LT(relative_error(s.exp_avg_sq, r.exp_avg_sq), tolerance) << what << " exp_avg_sq";
      // The non-contiguous parameter took the _foreach_ path: the loop's operations exactly.
      if (specs[i].transposed) EXPECT_TRUE(torch::equal(mine[i], theirs[i])) << what;
    }
  }
  EXPECT_EQ(steps[7], 6);
}
