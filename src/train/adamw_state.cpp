#include "adamw_state.h"

#include "meridian/core/error.h"

namespace meridian::train {

std::vector<std::string> flat_names(const std::vector<ParamGroup>& groups) {
  std::vector<std::string> names;
  for (const auto& g : groups) names.insert(names.end(), g.names.begin(), g.names.end());
  return names;
}

std::vector<at::Tensor> flat_params(const std::vector<ParamGroup>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += n + "\n";
  return text;
}

void check_optimizer_kind(const StateReader& r, const std::string& mine) {
  const std::string saved = r.string_attribute("optimizer").value_or("adamw");
  if (saved != mine)
    throw UserError(r.path() + ": the checkpoint holds " + saved + " optimizer state (optim.name " + saved +
                    "), this run uses optim.name " + mine + "; their states do not convert (resume with optim.name " +
                    saved + ", or start a new run)");
}

std::vector<int64_t> read_steps(const StateReader& r, const std::vector<std::string>& names) {
  std::vector<int64_t> steps(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name = "optim/" + names[i] + "/step";
    if (!r.has(name)) throw DataError(r.path(), "dataset '" + name + "'", "missing");
    steps[i] = r.read(name).item<int64_t>();
  }
  return steps;
}

SavedMoments::SavedMoments(const StateReader& r) : r_(r) {
  if (r.has("optim/flat/exp_avg")) add("optim/flat/", r.string_attribute("optim_flat").value_or(""));
  const int64_t units = r.int_attribute("optim_units").value_or(0);
  for (int64_t k = 0; k < units; ++k)
    add("optim/unit" + std::to_string(k) + "/", r.string_attribute("optim_unit" + std::to_string(k)).value_or(""));
}

at::Tensor SavedMoments::read(const std::string& name, const std::string& moment, int64_t from, int64_t n) const {
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

void SavedMoments::add(const std::string& prefix, const std::string& listed) {
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

}  // namespace meridian::train
