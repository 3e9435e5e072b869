// `meridian bench ddp`: a synthetic MLP trained with DistributedDataParallel, overlap on and off in
// the same run, against the same ranks training without communication.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/trace.h"
#include "meridian/core/units.h"
#include "meridian/parallel/ddp.h"

namespace meridian::cli {

namespace {

using Clock = std::chrono::steady_clock;

// `depth` square layers of width `width`: depth * (width^2 + width) parameters.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t width, int depth) {
    for (int i = 0; i < depth; ++i) layers.push_back(register_module("layer" + std::to_string(i), torch::nn::Linear(width, width)));
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
Result run(Mlp& model, parallel::DistributedDataParallel* ddp, int64_t batch, int warmup, int steps,
           core::Trace* trace, const std::string& label, const c10::Device& device) {
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

Command bench_ddp_command() {
  Command c;
  c.name = "bench ddp";
  c.summary = "Data-parallel step time with overlapped vs. after-backward gradient reduction";
  c.add_options = [](cxxopts::Options& o) {
    o.add_options()
        ("params", "Model size in parameters (suffix K, M, G; a deep MLP of square layers)", cxxopts::value<std::string>()->default_value("16M"))
        ("depth", "Layers of the MLP", cxxopts::value<int>()->default_value("8"))
        ("batch", "Samples per rank per step", cxxopts::value<int64_t>()->default_value("32"))
        ("steps", "Timed steps", cxxopts::value<int>()->default_value("10"))
        ("warmup", "Untimed steps first", cxxopts::value<int>()->default_value("2"))
        ("bucket-mb", "Bucket size in MB", cxxopts::value<double>()->default_value("25"))
        ("bf16-comm", "Reduce gradients in bfloat16")
        ("trace", "Write a Chrome trace (all ranks, Perfetto / chrome://tracing) of the overlapped steps to this file", cxxopts::value<std::string>()->default_value(""));
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const double params = double(parse_bytes(p["params"].as<std::string>(), "--params"));
    const int depth = p["depth"].as<int>();
    const int64_t batch = p["batch"].as<int64_t>();
    const int steps = p["steps"].as<int>(), warmup = p["warmup"].as<int>();
    if (depth < 1 || batch < 1 || steps < 1 || warmup < 0) throw UserError("--depth, --batch, --steps must be >= 1");
    const int64_t width = std::max<int64_t>(4, std::llround(std::sqrt(params / depth)));
    auto communicator = comm::make_communicator(rt, comm::default_backend(rt));
    const std::string trace_path = p["trace"].as<std::string>();
    std::unique_ptr<core::Trace> trace = trace_path.empty() ? nullptr : std::make_unique<core::Trace>(rt.rank());

    torch::manual_seed(0);
    Mlp model(width, depth);
    const c10::Device device = communicator->backend() == comm::Backend::NCCL ? rt.device() : c10::Device(c10::kCPU);
    model->to(device);
    int64_t n_params = 0;
    for (const auto& t : model->parameters()) n_params += t.numel();
    const double grad_mb = n_params * 4.0 / 1e6;

    const Result alone = run(model, nullptr, batch, warmup, steps, nullptr, "local", device);
    parallel::DdpOptions on;
    on.bucket_mb = p["bucket-mb"].as<double>();
    on.first_bucket_mb = std::min(on.first_bucket_mb, on.bucket_mb);
    on.bf16_communication = p.count("bf16-comm") > 0;
    Result overlapped, after;
    {
      parallel::DistributedDataParallel ddp(rt, *communicator, model.ptr(), on);
      overlapped = run(model, &ddp, batch, warmup, steps, trace.get(), "ddp", device);
      if (rt.rank() == 0)
        std::printf("# %lld parameters (%d x Linear(%lld, %lld)), gradient %.1f MB, %lld buckets, %d ranks, batch %lld per rank, %s\n",
                    (long long)n_params, depth, (long long)width, (long long)width, grad_mb, (long long)ddp.bucket_count(),
                    rt.size(), (long long)batch, on.bf16_communication ? "bf16 communication" : "float32 communication");
    }
    {
      parallel::DdpOptions off = on;
      off.overlap = false;
      parallel::DistributedDataParallel ddp(rt, *communicator, model.ptr(), off);
      after = run(model, &ddp, batch, warmup, steps, nullptr, "ddp-no-overlap", device);
    }
    // The slowest rank sets the pace.
    const auto slowest = [&](double v) {
      auto t = torch::full({1}, v, torch::TensorOptions().dtype(torch::kDouble).device(device));
      communicator->allreduce(t, comm::ReduceOp::Max);
      return t.cpu().item<double>();
    };
    const double t_alone = slowest(alone.step_s), t_on = slowest(overlapped.step_s), t_off = slowest(after.step_s);
    const double exposed_on = slowest(overlapped.exposed_s), finish_off = slowest(after.finish_s);
    const double bus = rt.size() > 1 ? 2.0 * (rt.size() - 1) / rt.size() : 0.0;
    const double bytes = n_params * (on.bf16_communication ? 2.0 : 4.0);
    if (trace) {
      std::vector<std::string> all;
      rt.stream_to_root(trace->events_json(), [&](int, const std::string& events) { all.push_back(events); });
      if (rt.rank() == 0) core::Trace::write(trace_path, all);
    }
    if (rt.rank() == 0) {
      std::printf("%-34s %10s %12s %10s %12s\n", "", "step (ms)", "samples/s", "exposed", "efficiency");
      const auto line = [&](const char* name, double t, double exposed) {
        std::printf("%-34s %10.2f %12.1f %9.1f%% %11.1f%%\n", name, t * 1e3, batch * rt.size() / t, 100 * exposed / t,
                    100 * t_alone / t);
      };
      line("no communication (each rank alone)", t_alone, 0);
      line("ddp, reduction overlaps backward", t_on, exposed_on);
      line("ddp, reduction after backward", t_off, finish_off);
      std::printf("# exposed: time finish() waited for communication (overlap) or the whole reduction (after backward)\n"
                  "# efficiency: throughput / (ranks x throughput of the same ranks without communication)\n");
      if (bus > 0)
        std::printf("# gradient reduction after backward: %.1f MB in %.2f ms = %.2f GB/s busbw (algbw x 2(n-1)/n)\n",
                    bytes / 1e6, finish_off * 1e3, bytes / finish_off / 1e9 * bus);
      if (trace) std::printf("# trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", trace_path.c_str());
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
