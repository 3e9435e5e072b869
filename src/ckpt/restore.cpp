// Loading checkpoints: a whole module (eval, export, --init) or a training run's full state (resume),
// the latter read once between the ranks (SharedReader).
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <exception>

#include "internal.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/train/trainer.h"
#include "seal.h"

namespace meridian::ckpt {

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
class SharedReader : public train::StateReader {
 public:
  SharedReader(const comm::Runtime& rt, const Reader& r)
      : rt_(rt), r_(r), comm_(comm::make_communicator(rt, comm::Backend::MPI)) {}

  const std::string& path() const override { return r_.path(); }
  bool has(const std::string& name) const override { return r_.has(name); }
  std::vector<int64_t> shape(const std::string& name) const override { return r_.shape(name); }
  at::Tensor read(const std::string& name) const override { return r_.read(name); }
  at::Tensor read_rows(const std::string& name, int64_t first, int64_t count) const override {
    return r_.read_rows(name, first, count);
  }
  std::optional<int64_t> int_attribute(const std::string& name) const override { return r_.int_attribute(name); }
  std::optional<std::string> string_attribute(const std::string& name) const override {
    return r_.string_attribute(name);
  }

  void load(const std::string& name, const at::Tensor& target) override {
    at::NoGradGuard no_grad;
    const auto shape = r_.shape(name);  // DataError when missing: the same file, so the same on every rank
    if (shape != target.sizes().vec())
      throw DataError(
          r_.path(), "dataset '" + name + "'",
          "shape " + c10::str(c10::IntArrayRef(shape)) + " does not match the model's " + c10::str(target.sizes()));
    const int64_t world = rt_.size(), bytes = int64_t(target.numel()) * int64_t(target.element_size());
    if (world == 1 || shape.empty() || shape[0] < world || bytes < (64 << 10))
      return agree([&] { load_tensor(r_, name, target); });
    const int64_t rows = shape[0], per = (rows + world - 1) / world;
    const int64_t first = std::min(rows, rt_.rank() * per), count = std::min(per, rows - first);
    at::Tensor mine;
    agree([&] {
      if (count > 0) mine = r_.read_rows(name, first, count);
    });
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
  // Runs `read` on every rank; a failure on any rank is a UserError on every rank, with that rank's
  // message, before any rank goes on to a collective the failed one would never join (one rank:
  // its own exception).
  template <class F>
  void agree(F&& read) {
    comm::agree(rt_, read, [&](const comm::Failure& f) {
      if (rt_.size() == 1) std::rethrow_exception(f.mine);
      throw UserError("rank " + std::to_string(f.rank) + ": " + f.message);
    });
  }
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

void restore(const comm::Runtime& rt, train::Trainer& trainer, const ResumePoint& point) {
  check_seal(rt, point.path);  // the whole file verified once between the ranks, before any opens it
  Reader r(point.path);
  at::NoGradGuard no_grad;
  SharedReader shared(rt, r);
  trainer.strategy().load(shared);  // the trained parameters and the optimizer state
  load_trainer_state(shared, rt.rank(), trainer, point);
  rt.barrier();
  if (rt.rank() == 0)
    spdlog::info("resumed from {}: step {}, epoch {}, global position {} (written by {} ranks, global batch {})",
                 point.path, point.step, point.epoch, point.position, point.world_size, point.global_batch);
}

}  // namespace meridian::ckpt
