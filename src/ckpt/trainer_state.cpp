// The trainer's part of a checkpoint besides its strategy's: the frozen parameters, the buffers,
// the EMA, every rank's RNG and the counters. Saved and loaded here, side by side, so that the two
// layouts cannot drift apart.
#include <ATen/Context.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <mutex>
#include <optional>
#include <utility>

#include "internal.h"
#include "meridian/core/error.h"
#include "meridian/core/version.h"
#include "meridian/train/trainer.h"

namespace meridian::ckpt {

namespace {
at::Generator default_device_generator(const c10::Device& device) {
  if (!device.is_cuda()) return {};
  return at::globalContext().defaultGenerator(device);  // the CUDA generator of that GPU
}
DeviceGeneratorResolver& resolver() {
  static DeviceGeneratorResolver r = default_device_generator;
  return r;
}

// The device the model trains on: its parameters' (ZeRO-3's released ones keep their device).
c10::Device model_device(torch::nn::Module& model) {
  const auto params = model.parameters();
  return params.empty() ? c10::Device(c10::kCPU) : params.front().device();
}
std::string utc_now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
}  // namespace

at::Generator device_generator(const c10::Device& device) { return resolver()(device); }

DeviceGeneratorResolver set_device_generator_resolver(DeviceGeneratorResolver r) {
  return std::exchange(resolver(), r ? std::move(r) : DeviceGeneratorResolver(default_device_generator));
}

void save_trainer_state(train::StateWriter& w, train::Trainer& trainer, const Config& config) {
  const train::TrainerState state = trainer.state();
  auto& model = *trainer.task().model();
  for (const auto& item : model.named_parameters())  // the frozen ones (LoRA's base)
    if (!item.value().requires_grad()) w.replicated("model/" + item.key(), item.value());
  for (const auto& item : model.named_buffers()) w.replicated("model/" + item.key(), item.value());
  if (auto* ema = trainer.ema()) {
    for (size_t i = 0; i < ema->names().size(); ++i) w.replicated("ema/" + ema->names()[i], ema->tensors()[i]);
    w.attribute("ema_updates", ema->updates());
  }
  w.per_rank("torch_rng", cpu_generator().get_state());
  if (at::Generator gen = device_generator(model_device(model)); gen.defined()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    w.per_rank("device_rng", gen.get_state());
  }
  const auto position = trainer.task().data_position();
  w.attribute("step", state.step);
  w.attribute("epoch", position.epoch);
  w.attribute("position", position.position);
  w.attribute("samples_seen", state.samples_seen);
  w.attribute("bad_steps", state.bad_steps);
  w.attribute("bad_in_a_row", state.bad_in_a_row);
  w.attribute("global_batch", trainer.global_batch());
  // train.balance: the shares in force ("6,2"), the last windows' seconds per sample ("a,b;c,d",
  // oldest first), a change's measured cost, the changes so far, and each rank's measuring window
  // (balance_steps: [its steps' whole time, each step's seconds per sample...]; the balance_window
  // [busy seconds, samples] of checkpoints before 2026-12-07 is not read: that window is measured
  // again).
  const auto& b = state.balance;
  w.attribute("balance_shares", fmt::format("{}", fmt::join(b.shares, ",")));
  w.attribute("balance_windows", train::format_windows(b.windows));
  w.attribute("balance_cost_s", fmt::format("{:.17g}", b.cost_s));
  w.attribute("balance_changes", b.changes);
  std::vector<double> window{b.step_s};  // the steps' whole time, then each step's busy seconds per sample
  window.insert(window.end(), b.per_sample.begin(), b.per_sample.end());
  w.per_rank("balance_steps", at::tensor(window, at::kDouble));
  if (!std::isnan(state.best.value)) {  // checkpoint.best's record, exactly (17 digits round-trip a double)
    w.attribute("best_value", fmt::format("{:.17g}", state.best.value));
    w.attribute("best_step", state.best.step);
    w.attribute("best_evals_since", state.best.evals_since);
  }
  w.attribute("config", config.dump());
  w.attribute("created_by", created_by());
  w.attribute("time", utc_now_text());
}

void load_trainer_state(train::StateReader& r, int rank, train::Trainer& trainer, const ResumePoint& point) {
  auto& model = *trainer.task().model();
  for (const auto& item : model.named_parameters())  // the frozen ones (LoRA's base)
    if (!item.value().requires_grad()) r.load("model/" + item.key(), item.value());
  for (const auto& item : model.named_buffers()) r.load("model/" + item.key(), item.value());
  if (auto* ema = trainer.ema()) {
    const auto updates = r.int_attribute("ema_updates");
    if (!updates)
      throw DataError(
          point.path, "attribute 'ema_updates'",
          "missing: the checkpoint has no EMA weights (trained without train.ema), this run has train.ema " +
              std::to_string(ema->decay()));
    for (size_t i = 0; i < ema->names().size(); ++i) {
      const std::string name = "ema/" + ema->names()[i];
      if (!r.has(name))
        throw DataError(point.path, "dataset '" + name + "'",
                        "missing (the EMA of this model's " + ema->names()[i] + ")");
      r.load(name, ema->tensors()[i]);
    }
    ema->set_updates(*updates);
  }
  // The same world size: this rank's own stream; another: rank r takes rank (r mod W)'s.
  const std::string rng = "ranks/" + std::to_string(rank % std::max<int64_t>(1, point.world_size)) + "/torch_rng";
  if (r.has(rng)) cpu_generator().set_state(r.read(rng));
  // The device's generator likewise. A checkpoint saved on CPU ranks has none: the GPU's generator
  // then keeps its seed (said once); one saved on GPUs resumed on CPUs has nothing to restore it into.
  if (at::Generator gen = device_generator(model_device(model)); gen.defined()) {
    const std::string name = "ranks/" + std::to_string(rank % std::max<int64_t>(1, point.world_size)) + "/device_rng";
    if (!r.has(name)) {
      if (rank == 0)
        spdlog::info("{}: no device RNG state (saved on CPU ranks): the GPU's generator keeps its seed", point.path);
    } else {
      const at::Tensor saved = r.read(name);
      std::lock_guard<std::mutex> lock(gen.mutex());
      try {
        gen.set_state(saved);
      } catch (const c10::Error& e) {
        throw DataError(point.path, "dataset '" + name + "'",
                        "is not a state of this device's generator (" + std::string(e.what_without_backtrace()) + ")");
      }
    }
  }
  train::TrainerState state;
  state.step = point.step;
  state.samples_seen = r.int_attribute("samples_seen").value_or(point.step * point.global_batch);
  state.bad_steps = r.int_attribute("bad_steps").value_or(0);
  state.bad_in_a_row = r.int_attribute("bad_in_a_row").value_or(0);
  if (const auto best = r.string_attribute("best_value")) {
    try {
      state.best.value = std::stod(*best);
    } catch (const std::exception&) {
      throw DataError(point.path, "attribute 'best_value'", "is '" + *best + "', not a number");
    }
    state.best.step = r.int_attribute("best_step").value_or(0);
    state.best.evals_since = r.int_attribute("best_evals_since").value_or(0);
  }
  if (const auto shares = r.string_attribute("balance_shares")) {  // absent before train.balance: even
    try {
      state.balance.shares = train::parse_shares(*shares);
    } catch (const std::invalid_argument& e) {
      throw DataError(point.path, "attribute 'balance_shares'", "is '" + *shares + "': " + e.what());
    }
    auto& b = state.balance;
    // The balancer's own text formats, each error naming its attribute.
    const auto parsed = [&](const char* name, const auto& parse) {
      const auto text = r.string_attribute(name);
      try {
        return text ? std::optional(parse(*text)) : std::nullopt;
      } catch (const std::invalid_argument& e) {
        throw DataError(point.path, std::string("attribute '") + name + "'", e.what());
      }
    };
    b.windows = parsed("balance_windows", train::parse_windows).value_or(b.windows);
    b.cost_s = parsed("balance_cost_s", train::parse_number).value_or(b.cost_s);
    b.changes = r.int_attribute("balance_changes").value_or(0);
    const std::string window = "ranks/" + std::to_string(rank) + "/balance_steps";
    if (point.world_size == int64_t(b.shares.size()) && r.has(window)) {
      const at::Tensor w = r.read(window).to(at::kDouble).contiguous();
      const double* v = w.data_ptr<double>();
      if (w.numel() >= 1) b.step_s = v[0], b.per_sample.assign(v + 1, v + w.numel());
    }
  }
  trainer.set_state(state);
}

}  // namespace meridian::ckpt
