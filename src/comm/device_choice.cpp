#include "meridian/comm/device_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace meridian::comm {

DeviceChoice choose_device(const DeviceInputs& in) {
  DeviceChoice c;
  const auto env_text = [](const std::optional<std::string>& v) {
    return v ? "CUDA_VISIBLE_DEVICES=" + (v->empty() ? std::string("''") : *v)
             : std::string("CUDA_VISIBLE_DEVICES unset");
  };
  const std::string mine = in.local_rank < int(in.visible_env.size()) ? env_text(in.visible_env[size_t(in.local_rank)])
                                                                      : env_text(std::nullopt);
  if (in.requested == "cpu") {
    c.why = "cpu: --device cpu";
    return c;
  }
  if (in.requested != "auto" && in.requested != "cuda") {
    c.error = "--device: unknown device '" + in.requested + "' (expected auto, cpu or cuda)";
    return c;
  }
  if (in.visible == 0) {
    const std::string what = " (" + in.no_gpus + "; " + mine + ")";
    if (in.requested == "cuda")
      c.error = "--device cuda: no CUDA device is visible on " + in.host + what;
    else
      c.why = "cpu: --device auto found no CUDA device" + what;
    return c;
  }
  const std::string flag = "--device " + in.requested + ": ";
  const auto& envs = in.visible_env;
  const bool shared = std::all_of(envs.begin(), envs.end(), [&](const auto& e) { return e == envs.front(); });
  if (shared) {  // mpirun, srun --gpus-per-node: the node's ranks split the GPUs they all see
    if (in.local_size > in.visible) {
      c.error = flag + std::to_string(in.local_size) + " ranks run on " + in.host + " and all see the same " +
                std::to_string(in.visible) + " GPU(s) (" + mine + "): start at most " + std::to_string(in.visible) +
                " rank(s) per node (one per GPU), or give each rank a GPU of its own through CUDA_VISIBLE_DEVICES "
                "(Slurm: --gpus-per-task=1)";
      return c;
    }
    c.cuda_index = in.local_rank;
    c.why = fmt::format("cuda:{}: local rank {} of the node's {} rank(s), which all see the same {} GPU(s) ({})",
                        in.local_rank, in.local_rank, in.local_size, in.visible, mine);
    return c;
  }
  // Each rank its own GPUs (Slurm --gpus-per-task, wrappers): its first one. Two ranks on one GPU
  // would fail in NCCL ("duplicate GPU") or share its memory and time.
  std::map<std::string, int> first_owner;
  for (size_t r = 0; r < envs.size(); ++r) {
    if (!envs[r]) {
      c.error = flag + "CUDA_VISIBLE_DEVICES is set for some ranks on " + in.host + " but not for local rank " +
                std::to_string(r) + ": set it for every rank (each its own GPUs) or for none";
      return c;
    }
    const std::string first = envs[r]->substr(0, envs[r]->find(','));
    const auto [it, fresh] = first_owner.emplace(first, int(r));
    if (!fresh) {
      c.error = flag + "local ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " on " + in.host +
                " would both use GPU '" + first + "', the first of their CUDA_VISIBLE_DEVICES ('" +
                *envs[size_t(it->second)] + "' and '" + *envs[r] + "'): give each rank a GPU of its own";
      return c;
    }
  }
  c.cuda_index = 0;
  c.why =
      fmt::format("cuda:0: the first of the {} GPU(s) this rank sees ({}; each of the node's {} rank(s) has its own)",
                  in.visible, mine, in.local_size);
  return c;
}

}  // namespace meridian::comm
