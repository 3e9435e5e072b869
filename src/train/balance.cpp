#include "meridian/train/balance.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "meridian/comm/communicator.h"
#include "meridian/core/error.h"

namespace meridian::train {

std::vector<int64_t> balance_shares(const std::vector<double>& seconds, int64_t total, int64_t max_share) {
  const size_t n = seconds.size();
  if (n == 0 || total < int64_t(n) || total > int64_t(n) * max_share)
    throw std::invalid_argument("balance_shares: " + std::to_string(total) + " samples over " + std::to_string(n) +
                                " ranks of at most " + std::to_string(max_share));
  // Water-filling: ranks whose proportional share falls outside [1, max] are fixed at the bound,
  // and the rest is shared again among the others, until none crosses.
  std::vector<double> ideal(n, 0);
  std::vector<bool> fixed(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    double left = double(total), speed = 0;
    for (size_t r = 0; r < n; ++r) {
      if (fixed[r])
        left -= ideal[r];
      else
        speed += 1 / seconds[r];
    }
    for (size_t r = 0; r < n; ++r) {
      if (fixed[r]) continue;
      ideal[r] = left * (1 / seconds[r]) / speed;
      if (ideal[r] < 1 || ideal[r] > double(max_share)) {
        ideal[r] = ideal[r] < 1 ? 1.0 : double(max_share);
        fixed[r] = changed = true;
        break;  // share the rest again without it
      }
    }
  }
  // Largest remainders (ties to the lower rank), never past max_share.
  std::vector<int64_t> shares(n);
  int64_t given = 0;
  for (size_t r = 0; r < n; ++r) given += shares[r] = std::max<int64_t>(1, int64_t(std::floor(ideal[r] + 1e-9)));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ideal[a] - double(shares[a]) > ideal[b] - double(shares[b]); });
  for (size_t i = 0; given < total; i = (i + 1) % n)
    if (shares[order[i]] < max_share) ++shares[order[i]], ++given;
  while (given > total) {  // floors raised to 1 may overshoot: take from the largest
    const size_t r = size_t(std::max_element(shares.begin(), shares.end()) - shares.begin());
    --shares[r], --given;
  }
  return shares;
}

double predicted_step(const std::vector<int64_t>& shares, const std::vector<double>& seconds) {
  double worst = 0;
  for (size_t r = 0; r < shares.size(); ++r) worst = std::max(worst, double(shares[r]) * seconds[r]);
  return worst;
}

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
constexpr size_t kWindows = 3;  // the windows an estimate looks at
}  // namespace

BalanceDecision decide_shares(const std::vector<int64_t>& current, const std::vector<std::vector<double>>& windows,
                              int64_t max_share, double threshold, double cost_s, int64_t steps_ahead) {
  if (windows.empty()) throw std::invalid_argument("decide_shares: no window");
  const size_t n = current.size(), first = windows.size() > kWindows ? windows.size() - kWindows : 0;
  BalanceDecision d;
  std::vector<double>& estimate = d.estimate;
  estimate.resize(n);
  for (size_t r = 0; r < n; ++r) {
    std::vector<double> seen;
    for (size_t w = first; w < windows.size(); ++w) seen.push_back(windows[w].at(r));
    estimate[r] = median(seen);
    if (seen.size() >= 3) {
      std::vector<double> deviation;
      for (double x : seen) deviation.push_back(std::abs(x - estimate[r]));
      d.scatter = std::max(d.scatter, median(deviation) / estimate[r]);
    }
  }
  const int64_t total = std::accumulate(current.begin(), current.end(), int64_t(0));
  d.shares = balance_shares(estimate, total, max_share);
  d.now_s = predicted_step(current, estimate);
  d.then_s = predicted_step(d.shares, estimate);
  const double gain = d.now_s - d.then_s, cost = cost_s >= 0 ? cost_s : d.now_s;
  if (d.shares == current) {
    d.why = "the proposal is the shares in force";
  } else if (!(gain > d.now_s * (threshold + d.scatter))) {
    d.why =
        fmt::format("predicted gain {:.1f} % within train.balance_threshold {:.0f} % + the estimates' scatter {:.1f} %",
                    100 * gain / d.now_s, 100 * threshold, 100 * d.scatter);
  } else if (!(gain * double(steps_ahead) > cost)) {
    d.why =
        fmt::format("{:.3f} s gained over the next {} steps, not more than a change costs ({:.3f} s{})",
                    gain * double(steps_ahead), steps_ahead, cost, cost_s >= 0 ? "" : ": one step, not measured yet");
  } else {
    d.change = true;
    d.why = fmt::format(
        "predicted step {:.3f} s -> {:.3f} s ({:.1f} % faster; threshold {:.0f} % + scatter {:.1f} %; "
        "{:.3f} s gained over the next {} steps against a change's {:.3f} s{})",
        d.now_s, d.then_s, 100 * gain / d.now_s, 100 * threshold, 100 * d.scatter, gain * double(steps_ahead),
        steps_ahead, cost, cost_s >= 0 ? "" : ", one step: not measured yet");
  }
  return d;
}

namespace {
// `item` read whole by `convert` (std::stoll, std::stod: leading spaces skipped; trailing ones too
// when `trailing_spaces`), else std::invalid_argument "'item' is not WHAT".
template <typename T, typename Convert>
T whole(const std::string& item, Convert convert, const char* what, bool trailing_spaces) {
  size_t used = 0;
  T v{};
  try {
    v = convert(item, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  while (trailing_spaces && used < item.size() && item[used] == ' ') ++used;
  if (used == 0 || used != item.size()) throw std::invalid_argument("'" + item + "' is not " + what);
  return v;
}
double to_double(const std::string& s, size_t* used) { return std::stod(s, used); }
}  // namespace

std::vector<int64_t> parse_shares(const std::string& text) {
  std::vector<int64_t> shares;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    shares.push_back(whole<int64_t>(
        item, [](const std::string& s, size_t* used) { return std::stoll(s, used); }, "an integer", true));
  return shares;
}

double parse_number(const std::string& text) { return whole<double>(text, to_double, "a number", false); }

std::string format_windows(const std::vector<std::vector<double>>& windows) {
  std::vector<std::string> each;
  for (const auto& window : windows) each.push_back(fmt::format("{:.17g}", fmt::join(window, ",")));
  return fmt::format("{}", fmt::join(each, ";"));
}

std::vector<std::vector<double>> parse_windows(const std::string& text) {
  std::vector<std::vector<double>> windows;
  std::stringstream all(text);
  for (std::string window; std::getline(all, window, ';');) {
    std::stringstream one(window);
    windows.emplace_back();
    for (std::string item; std::getline(one, item, ',');) {
      const double v = parse_number(item);
      if (!(v > 0) || !std::isfinite(v)) throw std::invalid_argument("'" + item + "' is not a time per sample (> 0)");
      windows.back().push_back(v);
    }
  }
  return windows;
}

Balancer::Balancer(int rank, int ranks, int64_t batch, const TrainerSettings& s, const Config& config)
    : rank_(rank),
      ranks_(ranks),
      batch_(batch),
      max_share_(s.balance_max > 0 ? s.balance_max : 2 * batch),
      every_(s.balance_every),
      steps_(s.steps),
      threshold_(s.balance_threshold),
      automatic_(s.balance) {
  if (s.balance_max > 0 && s.balance_max < batch)
    throw ConfigError(
        config.source("train.balance_max"), "train.balance_max",
        fmt::format("is {}, below train.batch {} (the even share): it must be at least that", s.balance_max, batch));
  max_share_ = std::min(max_share_, global_micro_batch() - (ranks - 1));  // the others keep one sample each
  state_.shares.assign(size_t(ranks), batch);
  if (s.balance_shares.empty()) return;
  const auto bad = [&](const std::string& why) {
    return ConfigError(config.source("train.balance_shares"), "train.balance_shares",
                       "'" + s.balance_shares + "': " + why);
  };
  std::vector<int64_t> given;
  try {
    given = parse_shares(s.balance_shares);
  } catch (const std::invalid_argument& e) {
    throw bad(e.what());
  }
  if (int64_t(given.size()) != ranks)
    throw bad(fmt::format("{} shares for {} ranks (one per rank)", given.size(), ranks));
  int64_t sum = 0;
  for (int64_t v : given) {
    if (v < 1 || v > max_share_)
      throw bad(fmt::format("a share of {}, outside [1, {}] (train.balance_max)", v, max_share_));
    sum += v;
  }
  if (sum != global_micro_batch())
    throw bad(fmt::format("they sum to {}, not the global micro-batch {} (train.batch {} x {} ranks)", sum,
                          global_micro_batch(), batch, ranks));
  state_.shares = given;
}

bool Balancer::even() const {
  return std::all_of(state_.shares.begin(), state_.shares.end(), [&](int64_t s) { return s == batch_; });
}

void Balancer::record(double busy_s, double step_s, int64_t samples) {
  const Skip skip = skip_;
  skip_ = Skip::None;
  if (skip == Skip::Change) after_change_s_ = step_s;
  if (skip != Skip::None) return;
  if (samples > 0) state_.per_sample.push_back(std::max(busy_s, 0.0) / double(samples));
  state_.step_s += step_s;
}

bool Balancer::rebalance(comm::Communicator& control, int64_t step, std::string* why) {
  // A window ends every `every_` steps, and the run's first after 2 measured steps (a slow node
  // costs every step until the first decision).
  if (!automatic_ || ranks_ < 2) return false;
  const size_t measured = state_.per_sample.size();
  if (step % every_ != 0 && !(state_.windows.empty() && measured >= 2)) return false;
  // Every rank's seconds per sample in its slot; the sums of the measured change costs (a rank that
  // measured one: the step after the change against the window's other steps) and of how many
  // ranks measured one.
  at::Tensor agreed = at::zeros({ranks_ + 2}, at::kDouble);
  if (measured > 0) agreed[rank_] = median(state_.per_sample);
  if (after_change_s_ >= 0 && measured > 0) {
    agreed[ranks_] = std::max(0.0, after_change_s_ - state_.step_s / double(measured));
    agreed[ranks_ + 1] = 1;
  }
  control.allreduce(agreed, comm::ReduceOp::Sum);
  state_.per_sample.clear();
  state_.step_s = 0;
  after_change_s_ = -1;
  const double* a = agreed.data_ptr<double>();
  if (a[ranks_ + 1] > 0) state_.cost_s = a[ranks_] / a[ranks_ + 1];
  std::vector<double> t(a, a + ranks_);
  if (std::any_of(t.begin(), t.end(), [](double v) { return !(v > 0) || !std::isfinite(v); }))
    return false;  // a rank measured nothing this window
  state_.windows.push_back(t);
  if (state_.windows.size() > kWindows) state_.windows.erase(state_.windows.begin());
  spdlog::debug("balance at step {}: seconds per sample {}", step, fmt::join(t, ", "));
  // The gain counts over the next 3 windows at most (what a decision can expect to last), or what
  // is left of the run.
  const int64_t ahead = std::max<int64_t>(0, std::min<int64_t>(3 * every_, steps_ - step));
  const BalanceDecision d = decide_shares(state_.shares, state_.windows, max_share_, threshold_, state_.cost_s, ahead);
  spdlog::debug("balance at step {}: {}", step, d.why);
  speed_ = d.estimate;
  if (!d.change) return false;
  state_.shares = d.shares;
  ++state_.changes;
  skip_ = Skip::Change;
  if (why) *why = d.why;
  return true;
}

std::string Balancer::describe() const {
  std::vector<double> speeds;
  for (double t : speed_) speeds.push_back(1 / t);
  double median = 0;
  if (!speeds.empty()) {
    auto sorted = speeds;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }
  std::string out;
  const double total = double(global_micro_batch());
  for (int r = 0; r < ranks_; ++r) {
    out += fmt::format("{}rank {}: {} of {} ({:.0f} %)", r ? ", " : "", r, state_.shares[size_t(r)], int64_t(total),
                       100.0 * double(state_.shares[size_t(r)]) / total);
    if (median > 0) out += fmt::format(", {:.2f} x median speed", speeds[size_t(r)] / median);
  }
  return out;
}

Metrics Balancer::metrics() const {
  Metrics m;
  for (int r = 0; r < ranks_; ++r)
    m.emplace_back("share_" + std::to_string(r), double(state_.shares[size_t(r)]) / double(global_micro_batch()));
  return m;
}

bool Balancer::set_state(const BalanceState& state) {
  // Another world size or batch: even shares, measured again.
  if (int64_t(state.shares.size()) != ranks_ ||
      std::accumulate(state.shares.begin(), state.shares.end(), int64_t(0)) != global_micro_batch())
    return false;
  state_ = state;
  for (const auto& w : state_.windows)
    if (int64_t(w.size()) != ranks_) state_.windows.clear();  // not this world's: measured again
  return true;
}

}  // namespace meridian::train
