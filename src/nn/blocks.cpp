#include "meridian/nn/blocks.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include <mutex>

#include "meridian/nn/autocast.h"

namespace meridian::nn {

namespace {

at::Generator generator_of(const c10::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}

at::Tensor rng_state(const c10::Device& device) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const c10::Device& device, const at::Tensor& state) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// What the recomputation needs besides the block's input.
struct Call : torch::CustomClassHolder {
  BlockRunner* runner = nullptr;
  size_t index = 0;
  BlockRunner::Fn fn;
  c10::Device device{c10::kCPU};
  at::Tensor rng;  // the generator of the input's device before the forward
  AutocastState autocast;
};

at::Tensor call_with_hooks(BlockRunner& runner, size_t index, const at::Tensor& x, const BlockRunner::Fn& fn,
                           bool recompute) {
  if (auto* hooks = runner.hooks()) hooks->before(index, recompute);
  at::Tensor y = fn(x);
  if (auto* hooks = runner.hooks()) hooks->after(index, recompute);
  return y;
}

// Forward without a graph (only the input kept); backward recomputes with one and runs a nested
// backward through it, which accumulates the block's parameter gradients (their hooks fire there)
// and gives the input's gradient.
struct Checkpoint : torch::autograd::Function<Checkpoint> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<Call> call) {
    call->rng = rng_state(call->device);
    call->autocast = AutocastState::of(call->device.type());
    ctx->save_for_backward({x});
    at::Tensor y = call_with_hooks(*call->runner, call->index, x, call->fn, /*recompute=*/false);
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = ctx->saved_data["call"].toCapsule();
    auto& call = static_cast<Call&>(*holder);
    const at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    at::Tensor y;
    {
      at::AutoGradMode grad_on(true);
      const at::Tensor now = rng_state(call.device);
      const AutocastState autocast_now = AutocastState::of(call.device.type());
      set_rng_state(call.device, call.rng);
      call.autocast.apply(call.device.type());
      try {
        y = call_with_hooks(*call.runner, call.index, input, call.fn, /*recompute=*/true);
      } catch (...) {
        autocast_now.apply(call.device.type());
        set_rng_state(call.device, now);
        throw;
      }
      autocast_now.apply(call.device.type());
      set_rng_state(call.device, now);
      if (call.autocast.enabled) at::autocast::clear_cache();  // casts of this block's weights
    }
    torch::autograd::backward({y}, {grads[0]});
    return {input.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor BlockRunner::run(size_t index, const at::Tensor& x, const Fn& fn) {
  if (!checkpointing_ || !at::GradMode::is_enabled()) return call_with_hooks(*this, index, x, fn, false);
  auto call = c10::make_intrusive<Call>();
  call->runner = this;
  call->index = index;
  call->fn = fn;
  call->device = x.device();
  // The block's parameters are not inputs of the function: an input that requires a gradient makes
  // autograd run its backward (and so the parameters' gradients) even when x itself needs none.
  const at::Tensor input = x.requires_grad() ? x : x.detach().requires_grad_(true);
  return Checkpoint::apply(input, std::move(call));
}

}  // namespace meridian::nn
