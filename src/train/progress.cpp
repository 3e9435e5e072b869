#include "progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace meridian::train {

namespace {

double seconds_since(Reporter::Clock::time_point t) {
  return std::chrono::duration<double>(Reporter::Clock::now() - t).count();
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", long(s / 3600), long(s / 60 % 60));
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", long(s / 60), long(s % 60));
  return buf;
}

}  // namespace

StepTimes& operator+=(StepTimes& a, const StepTimes& b) {
  a.data += b.data, a.forward += b.forward, a.backward += b.backward, a.comm += b.comm, a.optimizer += b.optimizer,
      a.total += b.total, a.waited += b.waited;
  return a;
}

Reporter::Reporter(int rank, int world, int64_t global_batch, const Task& task, const TrainerSettings& s,
                   const TrainerOptions& o)
    : rank_(rank), world_(world), global_batch_(global_batch), task_(task), s_(s) {
  if (rank_ != 0) return;
  if (!o.run_dir.empty()) files_ = std::make_unique<RunFiles>(o.run_dir, o.config.dump());
  bar_ = s.progress == Progress::Bar ||
         (s.progress == Progress::Auto && isatty(fileno(stdout)) && !std::getenv("OMPI_COMM_WORLD_RANK"));
}

Reporter::~Reporter() = default;

void Reporter::record(const StepTimes& t) { interval_ += t, ++interval_steps_; }

void Reporter::clear_bar() {
  if (bar_) std::fputs("\r\033[K", stdout);
}

void Reporter::step(int64_t step, double loss, double grad_norm, int64_t bad_steps, bool last,
                    const std::function<Metrics()>& more) {
  if (rank_ != 0) return;
  const double elapsed = seconds_since(interval_start_);
  const double samples_per_s = double(interval_steps_ * global_batch_) / std::max(elapsed, 1e-9);
  if (bar_ && (seconds_since(last_bar_) > 0.25 || last)) {
    const int width = 24, filled = int(width * double(step) / double(s_.steps));
    const double eta = double(s_.steps - step) * elapsed / double(interval_steps_);
    std::printf("\r\033[K%s [%s%s] %ld/%ld  loss %.4f  %.1f samples/s  ETA %s", task_.name().c_str(),
                std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(), long(step), long(s_.steps),
                loss, samples_per_s, duration_text(eta).c_str());
    std::fflush(stdout);
    last_bar_ = Clock::now();
  }
  if ((step - 1) % s_.log_every != 0 && !last) return;
  const double n = double(interval_steps_);
  const StepTimes& t = interval_;
  Metrics m{{"loss", loss},
            {"lr", learning_rate(s_, step - 1)},
            {"grad_norm", grad_norm},
            {"samples_per_s", samples_per_s},
            {"samples_per_s_per_rank", samples_per_s / world_},
            {"data_s", t.data / n},
            {"forward_s", t.forward / n},
            {"backward_s", t.backward / n},
            {"comm_s", t.comm / n},
            {"optimizer_s", t.optimizer / n},
            {"step_s", t.total / n},
            {"bad_steps", double(bad_steps)}};
  if (const int64_t batches = task_.batches_per_epoch(); batches > 0) {  // epochs as a fraction (the report marks them)
    const DataPosition at = task_.data_position();
    m.push_back({"epoch", double(at.epoch) + double(at.position) * s_.accumulate / double(batches * global_batch_)});
  }
  std::string extra;  // tokens/s and MFU where they apply
  if (task_.tokens_per_sample() > 0) {
    const double tokens_per_s = samples_per_s * task_.tokens_per_sample();
    m.push_back({"tokens_per_s", tokens_per_s});
    m.push_back({"tokens_per_s_per_rank", tokens_per_s / world_});
    extra += fmt::format("  {:.0f} tokens/s ({:.0f} per rank)", tokens_per_s, tokens_per_s / world_);
  }
  if (s_.peak_flops > 0) {
    // Model FLOPs (3 x forward: forward + backward) over the peak of every rank's device.
    const double mfu = 3 * task_.flops_per_sample() * samples_per_s / (s_.peak_flops * world_);
    m.push_back({"mfu", mfu});
    extra += fmt::format("  MFU {:.1f}%", 100 * mfu);
  }
  std::string shares;  // train.balance: each rank's share of the batch, "shares 88/12 %"
  for (auto& kv : more()) {
    if (kv.first.rfind("share_", 0) == 0) shares += fmt::format("{}{:.0f}", shares.empty() ? "" : "/", 100 * kv.second);
    m.push_back(std::move(kv));
  }
  if (!shares.empty()) extra += "  shares " + shares + " %";
  if (files_) files_->write(step, "train", m);
  if (!bar_ || last) {
    clear_bar();
    spdlog::info(
        "step {:>6}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3g}  {:.1f} samples/s{}  step {:.0f} ms (data {:.0f}, fwd "
        "{:.0f}, bwd {:.0f}, comm {:.0f}, opt {:.0f}){}",
        step, s_.steps, loss, learning_rate(s_, step - 1), grad_norm, samples_per_s, extra, 1e3 * t.total / n,
        1e3 * t.data / n, 1e3 * t.forward / n, 1e3 * t.backward / n, 1e3 * t.comm / n, 1e3 * t.optimizer / n,
        bad_steps ? fmt::format("  bad steps {}", bad_steps) : "");
  }
  interval_ = StepTimes{};
  interval_steps_ = 0;
  interval_start_ = Clock::now();
}

void Reporter::evaluation(int64_t step, double seconds, const Metrics& m) {
  if (rank_ != 0 || m.empty()) return;
  std::string line;
  for (const auto& [name, value] : m) line += fmt::format("  {} {:.4g}", name, value);
  clear_bar();
  spdlog::info("eval at step {} ({:.1f} s):{}", step, seconds, line);
  if (files_) files_->write(step, "eval", m);
}

}  // namespace meridian::train
