// AdamW's state in a checkpoint, in every layout a strategy writes (private to train):
//   optim/<name>/step                      every parameter's step count (all strategies)
//   optim/<name>/{exp_avg, exp_avg_sq}     per parameter (DdpAdamW)
//   optim/flat/{exp_avg, exp_avg_sq}       ZeRO-1's flat vector; parameters listed in attribute optim_flat
//   optim/unit<k>/{exp_avg, exp_avg_sq}    ZeRO-2/3's unit vectors; attributes optim_units, optim_unit<k>
// Any layout loads into any AdamW strategy on any world size.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "meridian/train/adamw.h"
#include "meridian/train/state_io.h"

namespace meridian::train {

// Parameter names and tensors in the optimizer's flat order (group order, then parameter order).
std::vector<std::string> flat_names(const std::vector<ParamGroup>& groups);
std::vector<at::Tensor> flat_params(const std::vector<ParamGroup>& groups);

// The names, one per line (attributes optim_flat, optim_unit<k>).
std::string joined(const std::vector<std::string>& names);

// UserError naming both when the checkpoint's optimizer kind (attribute optimizer; files from before
// SGD existed have none: adamw) is not `mine`.
void check_optimizer_kind(const StateReader& r, const std::string& mine);

// optim/<name>/step of every parameter; DataError naming the dataset when one is missing.
std::vector<int64_t> read_steps(const StateReader& r, const std::vector<std::string>& names);

// Where each parameter's moments are in a checkpoint, whichever layout it has. A parameter's numel
// is its model/<name> dataset's.
class SavedMoments {
 public:
  explicit SavedMoments(const StateReader& r);
  bool sharded() const { return !where_.empty(); }
  // Elements [from, from + n) of the flattened moment ("exp_avg" or "exp_avg_sq") of parameter
  // `name`, float32 on the CPU. Per-parameter layout: undefined when the file has none (a parameter
  // never updated); sharded layouts: DataError when the file does not list the parameter.
  at::Tensor read(const std::string& name, const std::string& moment, int64_t from, int64_t n) const;

 private:
  void add(const std::string& prefix, const std::string& listed);
  const StateReader& r_;
  std::map<std::string, std::pair<std::string, int64_t>> where_;  // name -> (dataset prefix, offset)
};

}  // namespace meridian::train
