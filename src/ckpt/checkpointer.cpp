// The checkpoint: settings and the step hook that saves when due, synchronously or in the
// background (checkpoint.async: a host copy of the contents, written by a thread).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "internal.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/error.h"
#include "meridian/train/trainer.h"

namespace meridian::ckpt {

namespace {

// The checkpoint: keys, each bound to its field.
const ConfigBinding<CheckpointSettings>& bindings() {
  using S = CheckpointSettings;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.string("checkpoint.dir", &S::dir, "where checkpoints are written").defaults_to("<run-dir>/checkpoints");
    b.integer("checkpoint.every_steps", &S::every_steps, "steps between checkpoints; 0: not by steps").at_least(0);
    b.number("checkpoint.every_minutes", &S::every_minutes, "minutes between checkpoints; 0: not by time").at_least(0);
    b.integer("checkpoint.keep_last", &S::keep_last, "newest checkpoints kept (older ones are deleted)").at_least(1);
    b.integer("checkpoint.keep_every", &S::keep_every,
              "also keep every checkpoint whose step is a multiple of this; 0: none")
        .at_least(0);
    b.boolean("checkpoint.at_end", &S::at_end, "save after the last step");
    b.boolean("checkpoint.async", &S::async,
              "copy the state to host memory at the step and write it in the background while training goes on "
              "(at most one save in flight; latest moves when every rank's write is complete)");
    b.string("checkpoint.best", &S::best,
             "an evaluation metric (e.g. map50_95, mR, zero_shot, eval_loss): the checkpoint of its best value so "
             "far is kept and linked as best.h5; '': none")
        .defaults_to("none");
    b.choice("checkpoint.best_mode", &S::best_mode, {{"auto", "auto"}, {"max", "max"}, {"min", "min"}},
             "whether a larger or a smaller checkpoint.best is better (auto: smaller for a loss or perplexity)");
    return b;
  }();
  return table;
}

}  // namespace

bool CheckpointSettings::best_maximize() const {
  if (best_mode != "auto") return best_mode == "max";
  return best.find("loss") == std::string::npos && best.find("perplexity") == std::string::npos;
}

CheckpointSettings CheckpointSettings::from_config(const Config& c, const std::string& run_dir) {
  CheckpointSettings s = bindings().read(c);
  if (!c.has("checkpoint.dir")) s.dir = run_dir.empty() ? "" : run_dir + "/checkpoints";
  return s;
}

void CheckpointSettings::declare(ConfigSchema& schema) { bindings().declare(schema); }

namespace {

// A checkpoint's contents as host copies of what this rank writes (its share of the rows of every
// replicated tensor, its shards, its own tensors), taken at the step boundary; replayed into a
// Writer by the background thread.
class Recorder : public train::StateWriter {
 public:
  explicit Recorder(const comm::Runtime& rt) : rt_(rt) {}
  void replicated(const std::string& name, const at::Tensor& tensor) override {
    items_.push_back({Item::Replicated, name, tensor.sizes().vec(), tensor.scalar_type(),
                      copy(Writer::share_rows(tensor, rt_.rank(), rt_.size())), 0, 0, 0});
  }
  void sharded(const std::string& name, int64_t total, int64_t first, const at::Tensor& part, int64_t block) override {
    items_.push_back({Item::Sharded, name, {}, part.scalar_type(), copy(part), total, first, block});
  }
  void per_rank(const std::string& name, const at::Tensor& mine) override {
    items_.push_back({Item::PerRank, name, {}, mine.scalar_type(), copy(mine), 0, 0, 0});
  }
  void attribute(const std::string& name, int64_t value) override { ints_.emplace_back(name, value); }
  void attribute(const std::string& name, const std::string& value) override { strings_.emplace_back(name, value); }

  void replay(Writer& w) const {
    for (const auto& item : items_) switch (item.kind) {
        case Item::Replicated:
          w.replicated_rows(item.name, item.shape, item.dtype, item.data);
          break;
        case Item::Sharded:
          w.sharded(item.name, item.total, item.first, item.data, item.block);
          break;
        case Item::PerRank:
          w.per_rank(item.name, item.data);
          break;
      }
    for (const auto& [k, v] : ints_) w.attribute(k, v);
    for (const auto& [k, v] : strings_) w.attribute(k, v);
  }
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& item : items_) n += int64_t(item.data.nbytes());
    return n;
  }

 private:
  static at::Tensor copy(const at::Tensor& t) {
    const at::Tensor d = t.detach();
    return (d.device().is_cpu() ? d.clone() : d.to(at::kCPU)).contiguous();
  }
  struct Item {
    enum Kind { Replicated, Sharded, PerRank } kind;
    std::string name;
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    at::Tensor data;
    int64_t total, first, block;
  };
  const comm::Runtime& rt_;
  std::vector<Item> items_;
  std::vector<std::pair<std::string, int64_t>> ints_;
  std::vector<std::pair<std::string, std::string>> strings_;
};

}  // namespace

// The background save of checkpoint.async: one thread at a time, writing a Recorder through its own
// duplicate of the world (so its collectives never meet the training's).
struct Checkpointer::Background {
  explicit Background(const comm::Runtime& runtime) : rt(runtime), comm(runtime) {}
  ~Background() {
    try {
      wait();
    } catch (const std::exception& e) {
      spdlog::error("checkpoint: the background save failed: {}", e.what());
    }
  }
  // Collective (the thread's end is agreed inside it): waits for the save in flight; SystemError on
  // every rank if it failed. Returns its path ("" when none was in flight).
  std::string wait() {
    if (!thread.joinable()) return "";
    thread.join();
    if (!error.empty()) throw SystemError(std::exchange(error, ""));
    return path;
  }
  void start(std::shared_ptr<Recorder> contents, const CheckpointSettings& s, int64_t step, double stalled_s) {
    path.clear();
    thread = std::thread([this, contents, s, step, stalled_s] {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        path = write_checkpoint(rt, &comm, s, step, [&](Writer& w) {
          // Test hook: a long write (the .tmp file exists), so a test can kill a rank in the middle of it.
          if (const char* delay = std::getenv("MERIDIAN_TEST_CKPT_DELAY_S"))
            std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(delay)));
          contents->replay(w);
        });
        if (rt.rank() == 0)
          spdlog::info("checkpoint {} written in the background in {:.2f} s (training waited {:.3f} s for it)", path,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), stalled_s);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
  const comm::Runtime& rt;
  comm::OwnComm comm;
  std::thread thread;
  std::string path, error;  // set by the thread; read after join
};

Checkpointer::Checkpointer(const comm::Runtime& rt, train::Trainer& trainer, const Config& config,
                           CheckpointSettings s) {
  if (s.async) background_ = std::make_unique<Background>(rt);
  auto last_time = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  trainer.add_step_hook([&rt, config, s, last_time, this](train::Trainer& t, const train::StepEvent& e) {
    bool due = e.stopping || e.best || e.save || (e.last && s.at_end) ||
               (s.every_steps > 0 && e.steps_done % s.every_steps == 0);
    if (s.every_minutes > 0) {
      // Rank 0's clock decides, so every rank saves at the same step.
      const bool late =
          std::chrono::steady_clock::now() - *last_time >= std::chrono::duration<double>(60 * s.every_minutes);
      due = rt.max(int64_t(rt.rank() == 0 && late)) > 0 || due;
    }
    if (!due || s.dir.empty()) return;
    *last_time = std::chrono::steady_clock::now();
    if (!background_) {
      last_ = save(rt, t, config, s);
      if (e.best) point_best(rt, s, last_);
      return;
    }
    // At most one save in flight: the previous one finishes first (usually long done).
    const auto t0 = std::chrono::steady_clock::now();
    if (auto done = background_->wait(); !done.empty()) last_ = done;
    const auto t1 = std::chrono::steady_clock::now();
    auto contents = std::make_shared<Recorder>(rt);
    write_contents(*contents, t, config);
    const auto t2 = std::chrono::steady_clock::now();
    const double stalled = std::chrono::duration<double>(t2 - t0).count();
    if (rt.rank() == 0)
      spdlog::info(
          "checkpoint step {}: {:.3f} GB (rank 0's part) copied to host memory in {:.3f} s, after waiting {:.3f} s for "
          "the previous save; writing in the background",
          e.steps_done, double(contents->bytes()) / 1e9, std::chrono::duration<double>(t2 - t1).count(),
          std::chrono::duration<double>(t1 - t0).count());
    background_->start(contents, s, e.steps_done, stalled);
    // The run ends here: its last checkpoint must be complete before the process exits; best.h5 may
    // name only a complete one.
    if (e.last || e.stopping || e.best) last_ = background_->wait();
    if (e.best) point_best(rt, s, last_);
  });
}

Checkpointer::~Checkpointer() = default;

}  // namespace meridian::ckpt
