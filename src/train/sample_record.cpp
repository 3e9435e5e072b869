#include "sample_record.h"

#include <nlohmann/json.hpp>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"

namespace meridian::train {

SampleRecord::SampleRecord(const comm::Runtime& rt, comm::Communicator& control, Task& task, const Balancer& balancer,
                           const std::string& run_dir, const Config& config)
    : rt_(rt), control_(control), task_(task), balancer_(balancer), path_(run_dir + "/samples.jsonl") {
  if (run_dir.empty())
    throw ConfigError(config.source("train.record_samples"), "train.record_samples",
                      "the sample record is written to RUN_DIR/samples.jsonl: give --run-dir");
  if (rt.rank() != 0) return;
  file_.open(path_, std::ios::app);
  if (!file_) throw SystemError("cannot open '" + path_ + "' for writing");
}

void SampleRecord::on_batch(int64_t) { step_rows_.emplace_back(task_.data_position().epoch, task_.batch_rows()); }

void SampleRecord::on_step_end(const StepEvent& event, const StepResult&, LoopControl&) {
  const std::vector<int64_t>& shares = balancer_.shares();
  const int rank = rt_.rank();
  int64_t offset = 0, micro = 0;
  for (int r = 0; r < rt_.size(); ++r) (r < rank ? offset : micro) += shares[size_t(r)];
  micro += offset;
  at::Tensor all = at::zeros({int64_t(step_rows_.size()), micro}, at::kDouble);
  auto slots = all.accessor<double, 2>();
  for (size_t k = 0; k < step_rows_.size(); ++k) {
    const at::Tensor& mine = step_rows_[k].second;
    const int64_t n = mine.defined() ? mine.numel() : 0;
    if (n != shares[size_t(rank)])
      throw std::logic_error("train.record_samples: task " + task_.name() + " reported " + std::to_string(n) +
                             " rows for a share of " + std::to_string(shares[size_t(rank)]));
    all[int64_t(k)].narrow(0, offset, n).copy_(mine);
  }
  control_.allreduce(all, comm::ReduceOp::Sum);
  if (rank == 0) {
    nlohmann::json batches = nlohmann::json::array();
    for (size_t k = 0; k < step_rows_.size(); ++k) {
      std::vector<int64_t> ids(static_cast<size_t>(micro));
      for (int64_t j = 0; j < micro; ++j) ids[size_t(j)] = int64_t(slots[int64_t(k)][j]);
      batches.push_back({{"epoch", step_rows_[k].first}, {"rows", std::move(ids)}});
    }
    file_ << nlohmann::json{{"step", event.steps_done}, {"world_size", rt_.size()}, {"batches", std::move(batches)}}
                 .dump()
          << '\n';
    file_.flush();
    if (!file_) throw SystemError("cannot write '" + path_ + "' (disk full?)");
  }
  step_rows_.clear();
}

}  // namespace meridian::train
