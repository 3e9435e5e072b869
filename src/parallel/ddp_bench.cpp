#include "meridian/parallel/ddp_bench.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/trace.h"
#include "meridian/parallel/ddp.h"

namespace meridian::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// `depth` square layers of width `width`: depth * (width^2 + width) parameters.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t width, int depth) {
    for (int i = 0; i < depth; ++i)
      layers.push_back(register_module("layer" + std::to_string(i), torch::nn::Linear(width, width)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers.size(); ++i) x = i + 1 < layers.size() ? torch::relu(layers[i](x)) : layers[i](x);
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

struct Result {
  double step_s = 0, exposed_s = 0, finish_s = 0;
};

// Mean over `steps` timed steps (after `warmup`): step time, time finish() waited for communication
// (exposed), and finish()'s whole duration. ddp == nullptr: no communication at all.
Result run(Mlp& model, DistributedDataParallel* ddp, int64_t batch, int warmup, int steps, core::Trace* trace,
           const std::string& label, const c10::Device& device) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
  const int64_t width = model->layers.front()->options.in_features();
  const auto options = torch::TensorOptions().device(device);
  const auto x = torch::randn({batch, width}, options), y = torch::randn({batch, width}, options);
  // GPU work is asynchronous: time whole steps, with the device drained at their edges.
  const auto sync = [&] {
    if (device.is_cuda()) x.sum().item<float>();
  };
  Result r;
  for (int s = 0; s < warmup + steps; ++s) {
    const bool timed = s >= warmup;
    core::Trace* t = timed ? trace : nullptr;
    sync();
    const auto t0 = Clock::now();
    opt.zero_grad();
    torch::Tensor loss;
    {
      core::Trace::Scope scope(t, label + " forward", "compute");
      loss = torch::mse_loss(model->forward(x), y);
    }
    {
      core::Trace::Scope scope(t, label + " backward", "compute");
      loss.backward();
    }
    const auto f0 = Clock::now();
    if (ddp) {
      ddp->set_trace(t);
      ddp->finish();
    }
    const auto f1 = Clock::now();
    {
      core::Trace::Scope scope(t, label + " optimizer", "compute");
      opt.step();
      sync();
    }
    if (timed) {
      r.step_s += std::chrono::duration<double>(Clock::now() - t0).count() / steps;
      r.finish_s += std::chrono::duration<double>(f1 - f0).count() / steps;
      r.exposed_s += (ddp ? ddp->last_wait_s() : 0) / steps;
    }
  }
  return r;
}

}  // namespace

DdpBenchResult run_ddp_bench(const comm::Runtime& rt, const DdpBenchOptions& o) {
  if (o.depth < 1 || o.batch < 1 || o.steps < 1 || o.warmup < 0)
    throw UserError("--depth, --batch, --steps must be >= 1");
  const int64_t width = std::max<int64_t>(4, std::llround(std::sqrt(o.params / o.depth)));
  auto communicator = comm::make_communicator(rt, comm::default_backend(rt));
  std::unique_ptr<core::Trace> trace = o.trace_path.empty() ? nullptr : std::make_unique<core::Trace>(rt.rank());

  torch::manual_seed(0);
  Mlp model(width, o.depth);
  const c10::Device device = communicator->backend() == comm::Backend::NCCL ? rt.device() : c10::Device(c10::kCPU);
  model->to(device);
  DdpBenchResult r;
  r.width = width;
  for (const auto& t : model->parameters()) r.parameters += t.numel();

  const Result alone = run(model, nullptr, o.batch, o.warmup, o.steps, nullptr, "local", device);
  DdpOptions on;
  on.bucket_mb = o.bucket_mb;
  on.first_bucket_mb = std::min(on.first_bucket_mb, on.bucket_mb);
  on.communication_dtype = o.bf16_communication ? at::kBFloat16 : at::kFloat;
  Result overlapped, after;
  {
    DistributedDataParallel ddp(rt, *communicator, model.ptr(), on);
    overlapped = run(model, &ddp, o.batch, o.warmup, o.steps, trace.get(), "ddp", device);
    r.buckets = ddp.bucket_count();
  }
  {
    DdpOptions off = on;
    off.overlap = false;
    DistributedDataParallel ddp(rt, *communicator, model.ptr(), off);
    after = run(model, &ddp, o.batch, o.warmup, o.steps, nullptr, "ddp-no-overlap", device);
  }
  // The slowest rank sets the pace.
  const auto slowest = [&](double v) {
    auto t = torch::full({1}, v, torch::TensorOptions().dtype(torch::kDouble).device(device));
    communicator->allreduce(t, comm::ReduceOp::Max);
    return t.cpu().item<double>();
  };
  r.alone_s = slowest(alone.step_s);
  r.overlapped_s = slowest(overlapped.step_s);
  r.after_s = slowest(after.step_s);
  r.exposed_s = slowest(overlapped.exposed_s);
  r.reduction_s = slowest(after.finish_s);
  r.gradient_bytes = double(r.parameters) * double(c10::elementSize(on.communication_dtype));
  if (trace) {
    std::vector<std::string> all;
    rt.stream_to_root(trace->events_json(), [&](int, const std::string& events) { all.push_back(events); });
    if (rt.rank() == 0) core::Trace::write(o.trace_path, all);
  }
  return r;
}

}  // namespace meridian::parallel
