#include "meridian/ckpt/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/core/version.h"
#include "meridian/train/trainer.h"

namespace meridian::ckpt {

namespace fs = std::filesystem;

CheckpointSettings CheckpointSettings::from_config(const Config& c, const std::string& run_dir) {
  CheckpointSettings s;
  s.dir = c.get<std::string>("checkpoint.dir", run_dir.empty() ? "" : run_dir + "/checkpoints");
  s.every_steps = c.get<int64_t>("checkpoint.every_steps", s.every_steps);
  s.every_minutes = c.get<double>("checkpoint.every_minutes", s.every_minutes);
  s.keep_last = c.get<int64_t>("checkpoint.keep_last", s.keep_last);
  s.keep_every = c.get<int64_t>("checkpoint.keep_every", s.keep_every);
  s.at_end = c.get<bool>("checkpoint.at_end", s.at_end);
  s.async = c.get<bool>("checkpoint.async", s.async);
  return s;
}

void CheckpointSettings::declare(ConfigSchema& schema) {
  const CheckpointSettings d;
  schema.string("checkpoint.dir", std::nullopt, "where checkpoints are written").defaults_to("<run-dir>/checkpoints");
  schema.integer("checkpoint.every_steps", d.every_steps, "steps between checkpoints; 0: not by steps").at_least(0);
  schema.number("checkpoint.every_minutes", d.every_minutes, "minutes between checkpoints; 0: not by time").at_least(0);
  schema.integer("checkpoint.keep_last", d.keep_last, "newest checkpoints kept (older ones are deleted)").at_least(1);
  schema
      .integer("checkpoint.keep_every", d.keep_every,
               "also keep every checkpoint whose step is a multiple of this; 0: none")
      .at_least(0);
  schema.boolean("checkpoint.at_end", d.at_end, "save after the last step");
  schema.boolean("checkpoint.async", d.async,
                 "copy the state to host memory at the step and write it in the background while training goes on "
                 "(at most one save in flight; latest moves when every rank's write is complete)");
}

namespace {

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld.h5", (long long)step);
  return name;
}

// Checkpoint files in `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  static const std::regex pattern(R"(step_(\d{8,})\.h5)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern)) out.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

at::Generator cpu_generator() { return at::detail::getDefaultCPUGenerator(); }

}  // namespace

ResumePoint read_resume_point(const std::string& path, bool verify) {
  Reader r(path);
  if (verify) r.verify();
  ResumePoint p;
  p.path = path;
  auto need = [&](const char* name) {
    const auto v = r.int_attribute(name);
    if (!v) throw DataError(path, std::string("attribute '") + name + "'", "missing");
    return *v;
  };
  p.step = need("step");
  p.epoch = need("epoch");
  p.position = need("position");
  p.global_batch = need("global_batch");
  p.world_size = need("world_size");
  p.config_yaml = r.string_attribute("config").value_or("");
  return p;
}

std::optional<ResumePoint> find_resumable(const std::string& dir, std::vector<std::string>* rejected) {
  // The one `latest` names first (the newest this run wrote), then every other by step, newest first.
  auto candidates = list_checkpoints(dir);
  std::ifstream latest_file(dir + "/latest");
  std::string latest;
  if (latest_file >> latest) {
    const std::string path = dir + "/" + latest;
    const auto it = std::find_if(candidates.begin(), candidates.end(), [&](const auto& c) { return c.second == path; });
    if (it != candidates.end()) std::rotate(candidates.begin(), it, it + 1);
  }
  for (const auto& [step, path] : candidates) {
    try {
      return read_resume_point(path, /*verify=*/true);
    } catch (const std::exception& e) {
      if (rejected) rejected->push_back(path + ": " + e.what());
    }
  }
  return std::nullopt;
}

std::optional<ResumePoint> choose_resume_point(const comm::Runtime& rt, const std::string& resume,
                                               const std::string& dir) {
  if (resume.empty()) return std::nullopt;
  std::string chosen, error;
  if (rt.rank() == 0) {
    try {
      if (resume == "auto") {
        std::vector<std::string> rejected;
        const auto point = find_resumable(dir, &rejected);
        for (const auto& r : rejected) spdlog::warn("resume: skipping {}", r);
        if (point)
          chosen = point->path;
        else
          spdlog::info("resume auto: no checkpoint in '{}'; starting from scratch", dir);
      } else {
        chosen = read_resume_point(resume, /*verify=*/true).path;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Checkpoints of this run newer than the one resumed from belong to an abandoned branch (or are
  // corrupt): moved aside, so that neither retention nor a later --resume auto picks them.
  if (rt.rank() == 0 && !chosen.empty() && error.empty()) {
    const int64_t from = read_resume_point(chosen, /*verify=*/false).step;
    for (const auto& [step, path] : list_checkpoints(dir))
      if (step > from) {
        std::error_code ec;
        fs::rename(path, path + ".abandoned", ec);
        spdlog::warn("resume: {} is newer than the checkpoint resumed from: renamed to {}.abandoned", path, path);
      }
  }
  const auto errors = rt.allgather(error);
  if (!errors[0].empty()) throw UserError("--resume " + resume + ": " + errors[0]);
  chosen = rt.allgather(chosen)[0];
  if (chosen.empty()) return std::nullopt;
  return read_resume_point(chosen, /*verify=*/false);  // every rank reads the header (rank 0 verified)
}

int64_t resume_batch(const ResumePoint& point, int world_size, int64_t accumulate, int64_t batch) {
  const int64_t ways = int64_t(world_size) * accumulate;
  if (batch * ways == point.global_batch) return batch;
  if (point.global_batch % ways != 0)
    throw UserError(point.path + ": its global batch " + std::to_string(point.global_batch) + " does not divide into " +
                    std::to_string(world_size) + " ranks x train.accumulate " + std::to_string(accumulate));
  return point.global_batch / ways;
}

std::vector<std::string> compare_configs(const Config& saved, const Config& current, const std::string& path) {
  std::vector<std::string> keys = saved.leaf_keys();
  for (const auto& k : current.leaf_keys())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  // The optimizer's state is of another kind (AdamW moments vs SGD momentum buffers): no conversion.
  const auto optimizer_name = [](const Config& c) {
    const std::string name = c.text("optim.name");
    return name.empty() ? std::string("adamw") : name;
  };
  if (optimizer_name(saved) != optimizer_name(current))
    throw UserError(path + ": the checkpoint was trained with optim.name " + optimizer_name(saved) +
                    ", this run uses optim.name " + optimizer_name(current) +
                    "; their optimizer states do not convert (resume with optim.name " + optimizer_name(saved) +
                    ", or start a new run)");
  std::vector<std::string> fatal, harmless;
  for (const auto& k : keys) {
    std::string a = saved.text(k), b = current.text(k);
    if (a == b) continue;
    const std::string line = k + ": " + (a.empty() ? "<unset>" : a) + " -> " + (b.empty() ? "<unset>" : b);
    // The model's shape and the loss define what the tensors mean; the seed defines the data order.
    // (optim.name was checked above, with unset = adamw.)
    const bool matters = k.rfind("model.", 0) == 0 || k == "task.name" || k == "task.loss" || k == "train.seed";
    (matters ? fatal : harmless).push_back(line);
  }
  if (!fatal.empty()) {
    std::string msg = path + ": the checkpoint was trained with another model, loss or seed; differences:";
    for (const auto& f : fatal) msg += "\n  " + f;
    throw UserError(msg);
  }
  return harmless;
}

namespace {

// Parameter names in the optimizer's flat order (group order, then parameter order).
std::vector<std::string> flat_names(const std::vector<train::ParamGroup>& groups) {
  std::vector<std::string> names;
  for (const auto& g : groups) names.insert(names.end(), g.names.begin(), g.names.end());
  return names;
}

std::vector<at::Tensor> flat_params(const std::vector<train::ParamGroup>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += n + "\n";
  return text;
}

// The optimizer kind a trainer uses ("adamw" for ZeRO too: the same state, sharded).
std::string optimizer_kind(train::Trainer& trainer) { return trainer.sgd() ? "sgd" : "adamw"; }

// optim/<name>/step for every parameter; the moments as optim/<name>/{exp_avg, exp_avg_sq} (AdamW)
// or, sharded, as optim/flat/{exp_avg, exp_avg_sq} in the flat order named by attribute optim_flat;
// SGD: optim/<name>/momentum_buffer. Root attribute optimizer: adamw | sgd.
template <class Sink>
void save_optimizer(Sink& w, train::Trainer& trainer) {
  w.attribute("optimizer", optimizer_kind(trainer));
  if (auto* sgd = trainer.sgd()) {
    const auto names = flat_names(sgd->groups());
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& st = sgd->state()[i];
      const std::string base = "optim/" + names[i];
      if (st.momentum_buffer.defined()) w.replicated(base + "/momentum_buffer", st.momentum_buffer);
      w.replicated(base + "/step", at::tensor({st.step}, at::kLong));
    }
    return;
  }
  if (auto* zero = trainer.sharded_adamw()) {
    const auto names = flat_names(zero->groups());
    for (size_t i = 0; i < names.size(); ++i)
      w.replicated("optim/" + names[i] + "/step", at::tensor({zero->steps()[i]}, at::kLong));
    if (zero->stage() >= 2) {
      // One vector per unit, each rank writing its shard of it; the unit's parameters in attribute
      // optim_unit<k>.
      const auto& units = zero->units();
      for (size_t k = 0; k < units.size(); ++k) {
        const auto& u = units[k];
        const int64_t begin = std::min(u.numel, zero->rank() * u.shard_numel);
        const int64_t end = std::min(u.numel, (zero->rank() + 1) * u.shard_numel);
        const int64_t block = std::max<int64_t>(1, std::min(u.shard_numel, train::kShardAlign));
        const std::string base = "optim/unit" + std::to_string(k);
        w.sharded(base + "/exp_avg", u.numel, begin, zero->exp_avg_shard().narrow(0, u.base, end - begin), block);
        w.sharded(base + "/exp_avg_sq", u.numel, begin, zero->exp_avg_sq_shard().narrow(0, u.base, end - begin), block);
        std::vector<std::string> members;
        for (size_t i : u.params) members.push_back(names[i]);
        w.attribute("optim_unit" + std::to_string(k), joined(members));
      }
      w.attribute("optim_units", int64_t(units.size()));
      return;
    }
    // This rank's shard without the padding; blocks of S elements, or kShardAlign when S is larger
    // (S is then a multiple of it), so no block straddles two ranks.
    const int64_t n = zero->numel(), begin = std::min(n, zero->shard_begin()), end = std::min(n, zero->shard_end());
    const int64_t block = std::max<int64_t>(1, std::min(zero->shard_numel(), train::kShardAlign));
    w.sharded("optim/flat/exp_avg", n, begin, zero->exp_avg_shard().narrow(0, 0, end - begin), block);
    w.sharded("optim/flat/exp_avg_sq", n, begin, zero->exp_avg_sq_shard().narrow(0, 0, end - begin), block);
    w.attribute("optim_flat", joined(names));
    return;
  }
  auto& adamw = *trainer.adamw();
  const auto names = flat_names(adamw.groups());
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& st = adamw.state()[i];
    const std::string base = "optim/" + names[i];
    if (st.exp_avg.defined()) {
      w.replicated(base + "/exp_avg", st.exp_avg);
      w.replicated(base + "/exp_avg_sq", st.exp_avg_sq);
    }
    w.replicated(base + "/step", at::tensor({st.step}, at::kLong));
  }
}

}  // namespace

Config saved_config(const Reader& reader) {
  return Config::parse(reader.string_attribute("config").value_or(""), reader.path() + " (config)");
}

namespace {

// Everything a checkpoint holds, through a Writer (a save now) or a Recorder (a host copy for a
// background save). Collective (ZeRO's float32 masters are gathered unit by unit).
template <class Sink>
void write_contents(Sink& w, train::Trainer& trainer, const Config& config) {
  const train::TrainerState state = trainer.state();
  auto& model = *trainer.task().model();
  auto* zero = trainer.sharded_adamw();
  if (zero) {
    // The trained parameters unit by unit (the float32 masters gathered on every rank when they are
    // sharded), each rank writing its share of the rows.
    const auto names = flat_names(zero->groups());
    zero->with_each_unit(/*gather=*/true, [&](const train::ZeroUnit& u, const std::vector<at::Tensor>& full) {
      for (size_t k = 0; k < u.params.size(); ++k) w.replicated("model/" + names[u.params[k]], full[k]);
    });
  }
  for (const auto& item : model.named_parameters())  // with ZeRO the frozen ones only (LoRA's base)
    if (!zero || !item.value().requires_grad()) w.replicated("model/" + item.key(), item.value());
  for (const auto& item : model.named_buffers()) w.replicated("model/" + item.key(), item.value());
  save_optimizer(w, trainer);
  if (auto* ema = trainer.ema()) {
    for (size_t i = 0; i < ema->names().size(); ++i) w.replicated("ema/" + ema->names()[i], ema->tensors()[i]);
    w.attribute("ema_updates", ema->updates());
  }
  w.per_rank("torch_rng", cpu_generator().get_state());
  const auto position = trainer.task().data_position();
  w.attribute("step", state.step);
  w.attribute("epoch", position.epoch);
  w.attribute("position", position.position);
  w.attribute("samples_seen", state.samples_seen);
  w.attribute("bad_steps", state.bad_steps);
  w.attribute("bad_in_a_row", state.bad_in_a_row);
  w.attribute("global_batch", trainer.global_batch());
  w.attribute("config", config.dump());
  w.attribute("created_by", created_by());
  w.attribute("time", now_text());
}

// A checkpoint's contents as host copies of what this rank writes (its share of the rows of every
// replicated tensor, its shards, its own tensors), taken at the step boundary; replayed into a
// Writer by the background thread.
class Recorder {
 public:
  explicit Recorder(const comm::Runtime& rt) : rt_(rt) {}
  void replicated(const std::string& name, const at::Tensor& tensor) {
    items_.push_back({Item::Replicated, name, tensor.sizes().vec(), tensor.scalar_type(),
                      copy(Writer::share_rows(tensor, rt_.rank(), rt_.size())), 0, 0, 0});
  }
  void sharded(const std::string& name, int64_t total, int64_t first, const at::Tensor& part, int64_t block) {
    items_.push_back({Item::Sharded, name, {}, part.scalar_type(), copy(part), total, first, block});
  }
  void per_rank(const std::string& name, const at::Tensor& mine) {
    items_.push_back({Item::PerRank, name, {}, mine.scalar_type(), copy(mine), 0, 0, 0});
  }
  void attribute(const std::string& name, int64_t value) { ints_.emplace_back(name, value); }
  void attribute(const std::string& name, const std::string& value) { strings_.emplace_back(name, value); }

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

// Collective: every rank learns every rank's message (on `own` when given, else the world).
std::vector<std::string> agree(const comm::Runtime& rt, const comm::OwnComm* own, const std::string& mine) {
  return own ? comm::allgather_strings(rt, own->get(), mine) : rt.allgather(mine);
}

// Collective: creates the directory (rank 0), writes `fill` into step_<step>.h5.tmp, closes it, then
// rank 0 renames it to step_<step>.h5, moves `latest` to it and applies retention. A failure on any
// rank is a SystemError on every rank and leaves the previous checkpoint as `latest`.
std::string write_checkpoint(const comm::Runtime& rt, const comm::OwnComm* own, const CheckpointSettings& s,
                             int64_t step, const std::function<void(Writer&)>& fill) {
  const std::string final_path = s.dir + "/" + step_name(step), tmp = final_path + ".tmp";
  std::string error;
  if (rt.rank() == 0) {
    std::error_code ec;
    fs::create_directories(s.dir, ec);
    if (ec) error = "cannot create the checkpoint directory '" + s.dir + "': " + ec.message();
  }
  const auto errors = agree(rt, own, error);
  if (!errors[0].empty()) throw SystemError(errors[0]);
  try {
    Writer w(rt, tmp, own);
    fill(w);
    w.close();  // agreed: every rank's writes are complete when it returns on any rank
  } catch (...) {
    if (rt.rank() == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
  if (rt.rank() == 0) {
    try {
      if (!is_checkpoint(tmp)) throw SystemError(tmp + ": written, but does not open as a checkpoint");
      std::error_code ec;
      fs::rename(tmp, final_path, ec);
      if (ec) throw SystemError("cannot rename " + tmp + ": " + ec.message());
      write_file_atomically(s.dir + "/latest", step_name(step) + "\n");
      // Retention: the newest keep_last, plus multiples of keep_every.
      const auto all = list_checkpoints(s.dir);
      for (size_t i = size_t(s.keep_last); i < all.size(); ++i)
        if (all[i].second != final_path && !(s.keep_every > 0 && all[i].first % s.keep_every == 0))
          fs::remove(all[i].second, ec);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const auto after = agree(rt, own, error);
  if (!after[0].empty()) throw SystemError(after[0]);
  return final_path;
}

}  // namespace

std::string save(const comm::Runtime& rt, train::Trainer& trainer, const Config& config, const CheckpointSettings& s) {
  if (s.dir.empty()) throw UserError("checkpoint: no directory (give --run-dir or checkpoint.dir)");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path =
      write_checkpoint(rt, nullptr, s, trainer.state().step, [&](Writer& w) { write_contents(w, trainer, config); });
  if (rt.rank() == 0)
    spdlog::info("checkpoint {} written in {:.2f} s (training waited for all of it)", path,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return path;
}

namespace {
// Copies dataset `name` into `target` (same shape), in place.
void load_tensor(const Reader& r, const std::string& name, at::Tensor target) {
  at::NoGradGuard no_grad;
  const at::Tensor t = r.read(name);
  if (t.sizes() != target.sizes())
    throw DataError(r.path(), "dataset '" + name + "'",
                    "shape " + c10::str(t.sizes()) + " does not match the model's " + c10::str(target.sizes()));
  target.copy_(t);
}

// prefix: "model/" or "ema/".
void load_module(const Reader& r, torch::nn::Module& module, const std::string& prefix = "model/") {
  for (const auto& item : module.named_parameters()) load_tensor(r, prefix + item.key(), item.value());
  for (const auto& item : module.named_buffers()) load_tensor(r, prefix + item.key(), item.value());
}

// Collective loading of replicated tensors during a resume: instead of every rank reading (and
// checksumming) every tensor, rank r reads rows [r P, (r + 1) P) of each one (P = ceil(rows / W);
// only the checksum blocks holding them) and an allgather assembles the tensor everywhere. Every
// rank calls it for the same names in the same order. Small tensors (under 64 KiB, 0-dim, fewer
// rows than ranks) are read whole by every rank. A read error on any rank is a UserError on every
// rank, with that rank's message, before any rank waits in the allgather.
class SharedLoad {
 public:
  SharedLoad(const comm::Runtime& rt, const Reader& r)
      : rt_(rt), r_(r), comm_(comm::make_communicator(rt, comm::Backend::MPI)) {}

  void operator()(const std::string& name, at::Tensor target) {
    at::NoGradGuard no_grad;
    const auto shape = r_.shape(name);  // DataError when missing: the same file, so the same on every rank
    if (shape != target.sizes().vec())
      throw DataError(
          r_.path(), "dataset '" + name + "'",
          "shape " + c10::str(c10::IntArrayRef(shape)) + " does not match the model's " + c10::str(target.sizes()));
    const int64_t world = rt_.size(), bytes = int64_t(target.numel()) * int64_t(target.element_size());
    if (world == 1 || shape.empty() || shape[0] < world || bytes < (64 << 10)) return load_tensor(r_, name, target);
    const int64_t rows = shape[0], per = (rows + world - 1) / world;
    const int64_t first = std::min(rows, rt_.rank() * per), count = std::min(per, rows - first);
    at::Tensor mine;
    std::string error;
    try {
      if (count > 0) mine = r_.read_rows(name, first, count);
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (const auto& e : rt_.allgather(error))
      if (!e.empty()) throw UserError(e);
    std::vector<int64_t> piece_shape(shape);
    piece_shape[0] = per;
    at::Tensor piece =
        at::zeros(piece_shape, at::TensorOptions().dtype(mine.defined() ? mine.scalar_type() : target.scalar_type()));
    if (count > 0) piece.narrow(0, 0, count).copy_(mine);
    piece_shape[0] = per * world;
    at::Tensor all = at::empty(piece_shape, piece.options());
    comm_->allgather(piece, all);
    target.copy_(all.narrow(0, 0, rows));
  }

 private:
  const comm::Runtime& rt_;
  const Reader& r_;
  std::unique_ptr<comm::Communicator> comm_;
};
}  // namespace

bool load_module(const std::string& path, torch::nn::Module& module, Weights weights) {
  const Reader r(path);
  const auto ema_updates = r.int_attribute("ema_updates");
  const bool ema = ema_updates.has_value() && weights == Weights::PreferEma;
  load_module(r, module, ema ? "ema/" : "model/");
  if (ema)
    spdlog::info("{}: loaded the EMA weights (ema/*, {} updates)", path, *ema_updates);
  else if (ema_updates)
    spdlog::info("{}: loaded the raw training weights (model/*), not its EMA weights (as asked)", path);
  else
    spdlog::info("{}: loaded the training weights (model/*; the checkpoint has no EMA)", path);
  return ema;
}

void load_module(const std::string& path, torch::nn::Module& module) { load_module(path, module, Weights::PreferEma); }

namespace {

// Where each parameter's AdamW moments are in a checkpoint: per parameter (optim/<name>/exp_avg),
// in ZeRO-1's flat vector (optim/flat/exp_avg, parameters listed in attribute optim_flat) or in
// ZeRO-2/3's unit vectors (optim/unit<k>/exp_avg, attribute optim_unit<k>). A parameter's numel is
// its model/<name> dataset's.
class Moments {
 public:
  explicit Moments(const Reader& r) : r_(r) {
    if (r.has("optim/flat/exp_avg")) add("optim/flat/", r.string_attribute("optim_flat").value_or(""));
    const int64_t units = r.int_attribute("optim_units").value_or(0);
    for (int64_t k = 0; k < units; ++k)
      add("optim/unit" + std::to_string(k) + "/", r.string_attribute("optim_unit" + std::to_string(k)).value_or(""));
  }
  bool sharded() const { return !where_.empty(); }
  // Elements [from, from + n) of the flattened moment (exp_avg or exp_avg_sq) of parameter `name`,
  // float32 on the CPU. Per-parameter state: undefined when the file has none (a parameter never
  // updated); sharded state: DataError when the file does not list the parameter.
  at::Tensor read(const std::string& name, const std::string& moment, int64_t from, int64_t n) const {
    if (!sharded()) {
      const std::string dataset = "optim/" + name + "/" + moment;
      if (!r_.has(dataset)) return {};
      return r_.read(dataset).reshape({-1}).narrow(0, from, n);
    }
    const auto it = where_.find(name);
    if (it == where_.end())
      throw DataError(r_.path(), "attribute 'optim_flat' / 'optim_unit*'",
                      "the sharded optimizer state has no entry for parameter '" + name + "' of this model");
    return r_.read_rows(it->second.first + moment, it->second.second + from, n);
  }

 private:
  void add(const std::string& prefix, const std::string& listed) {
    int64_t offset = 0;
    size_t at = 0;
    while (at < listed.size()) {
      const size_t end = listed.find('\n', at);
      const std::string name = listed.substr(at, end == std::string::npos ? std::string::npos : end - at);
      at = end == std::string::npos ? listed.size() : end + 1;
      if (name.empty()) continue;
      where_[name] = {prefix, offset};
      int64_t numel = 1;
      for (int64_t d : r_.shape("model/" + name)) numel *= d;
      offset += numel;
    }
  }
  const Reader& r_;
  std::map<std::string, std::pair<std::string, int64_t>> where_;  // name -> (dataset prefix, offset)
};

// Loads the optimizer state whichever way it was saved (sharded or not, on any world size) into
// whichever optimizer the trainer has: sharded state is read by flat ranges, per-parameter state
// is cut into this rank's shard.
void restore_optimizer(const Reader& r, train::Trainer& trainer, SharedLoad& load) {
  // Files from before SGD existed have no attribute: AdamW.
  const std::string saved = r.string_attribute("optimizer").value_or("adamw"), mine = optimizer_kind(trainer);
  if (saved != mine)
    throw UserError(r.path() + ": the checkpoint holds " + saved + " optimizer state (optim.name " + saved +
                    "), this run uses optim.name " + mine + "; their states do not convert (resume with optim.name " +
                    saved + ", or start a new run)");
  if (auto* sgd = trainer.sgd()) {
    const auto names = flat_names(sgd->groups());
    std::vector<at::Tensor> params;
    for (const auto& g : sgd->groups()) params.insert(params.end(), g.params.begin(), g.params.end());
    for (size_t i = 0; i < names.size(); ++i) {
      auto& st = sgd->state()[i];
      const std::string base = "optim/" + names[i];
      if (!r.has(base + "/step")) throw DataError(r.path(), "dataset '" + base + "/step'", "missing");
      st.step = r.read(base + "/step").item<int64_t>();
      st.momentum_buffer = at::Tensor();
      if (r.has(base + "/momentum_buffer")) {
        st.momentum_buffer = at::zeros_like(params[i], at::MemoryFormat::Preserve);
        load(base + "/momentum_buffer", st.momentum_buffer);
      }
    }
    return;
  }
  auto* zero = trainer.sharded_adamw();
  const auto& groups = zero ? zero->groups() : trainer.adamw()->groups();
  const auto names = flat_names(groups);
  const auto params = flat_params(groups);
  const Moments moments(r);
  std::vector<int64_t> steps(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name = "optim/" + names[i] + "/step";
    if (!r.has(name)) throw DataError(r.path(), "dataset '" + name + "'", "missing");
    steps[i] = r.read(name).item<int64_t>();
  }

  if (zero) {
    zero->steps() = steps;
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      at::Tensor shard = std::string(moment) == "exp_avg" ? zero->exp_avg_shard() : zero->exp_avg_sq_shard();
      shard.zero_();
      for (const auto& u : zero->units()) {  // the parts of this rank's shard of each unit
        const int64_t begin = zero->rank() * u.shard_numel, end = std::min(u.numel, begin + u.shard_numel);
        for (size_t k = 0; k < u.params.size(); ++k) {
          const int64_t lo = std::max(begin, u.offsets[k]), hi = std::min(end, u.offsets[k + 1]);
          if (lo >= hi || steps[u.params[k]] == 0) continue;
          const at::Tensor part = moments.read(names[u.params[k]], moment, lo - u.offsets[k], hi - lo);
          if (part.defined()) shard.narrow(0, u.base + lo - begin, hi - lo).copy_(part);
        }
      }
    }
    return;
  }
  auto& state = trainer.adamw()->state();
  for (size_t i = 0; i < names.size(); ++i) {
    auto& st = state[i];
    st.step = steps[i];
    st.exp_avg = st.exp_avg_sq = at::Tensor();
    const std::string base = "optim/" + names[i];
    if (!moments.sharded() && r.has(base + "/exp_avg")) {  // per-parameter state: read in shares
      st.exp_avg = at::zeros_like(params[i]);
      st.exp_avg_sq = at::zeros_like(params[i]);
      load(base + "/exp_avg", st.exp_avg);
      load(base + "/exp_avg_sq", st.exp_avg_sq);
    } else if (moments.sharded() && steps[i] > 0) {
      for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
        const at::Tensor all = moments.read(names[i], moment, 0, params[i].numel());
        (std::string(moment) == "exp_avg" ? st.exp_avg : st.exp_avg_sq) =
            all.view(params[i].sizes()).to(params[i].device()).clone();
      }
    }
  }
}

}  // namespace

void restore(const comm::Runtime& rt, train::Trainer& trainer, const ResumePoint& point) {
  Reader r(point.path);
  at::NoGradGuard no_grad;
  SharedLoad load(rt, r);
  auto* zero = trainer.sharded_adamw();
  if (zero) {
    // The trained parameters unit by unit: every rank loads them in float32 (in shares) and keeps its shard.
    const auto names = flat_names(zero->groups());
    zero->with_each_unit(/*gather=*/false, [&](const train::ZeroUnit& u, const std::vector<at::Tensor>& full) {
      for (size_t k = 0; k < u.params.size(); ++k) load("model/" + names[u.params[k]], full[k]);
    });
  }
  auto& model = *trainer.task().model();
  for (const auto& item : model.named_parameters())  // with ZeRO the frozen ones only (LoRA's base)
    if (!zero || !item.value().requires_grad()) load("model/" + item.key(), item.value());
  for (const auto& item : model.named_buffers()) load("model/" + item.key(), item.value());
  restore_optimizer(r, trainer, load);
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
      load(name, ema->tensors()[i]);
    }
    ema->set_updates(*updates);
  }
  const std::string rng = "ranks/" + std::to_string(rt.rank() % std::max<int64_t>(1, point.world_size)) + "/torch_rng";
  if (r.has(rng)) cpu_generator().set_state(r.read(rng));
  train::TrainerState state;
  state.step = point.step;
  state.samples_seen = r.int_attribute("samples_seen").value_or(point.step * point.global_batch);
  state.bad_steps = r.int_attribute("bad_steps").value_or(0);
  state.bad_in_a_row = r.int_attribute("bad_in_a_row").value_or(0);
  trainer.set_state(state);
  rt.barrier();
  if (rt.rank() == 0)
    spdlog::info("resumed from {}: step {}, epoch {}, global position {} (written by {} ranks, global batch {})",
                 point.path, point.step, point.epoch, point.position, point.world_size, point.global_batch);
}

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
    bool due = e.stopping || (e.last && s.at_end) || (s.every_steps > 0 && e.steps_done % s.every_steps == 0);
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
    // The run ends here: its last checkpoint must be complete before the process exits.
    if (e.last || e.stopping) last_ = background_->wait();
  });
}

Checkpointer::~Checkpointer() = default;

}  // namespace meridian::ckpt
