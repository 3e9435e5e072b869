// comm::choose_device: a rank's GPU from what its launcher hands out (CUDA_VISIBLE_DEVICES per rank or
// per node), over injected counts and variables.
#include <gtest/gtest.h>

#include "meridian/comm/runtime.h"

using meridian::comm::choose_device;
using meridian::comm::DeviceInputs;

namespace {
using Env = std::optional<std::string>;
DeviceInputs node(const std::string& requested, int visible, int local_rank, std::vector<Env> envs) {
  DeviceInputs in;
  in.requested = requested;
  in.visible = visible;
  in.local_rank = local_rank;
  in.local_size = int(envs.size());
  in.visible_env = std::move(envs);
  in.host = "c214n3";
  in.no_gpus = "cudaGetDeviceCount: no CUDA-capable device is detected";
  return in;
}
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST(ChooseDevice, RanksThatSeeTheSameGpusTakeTheirLocalRanksGpu) {
  // mpirun on a 4-GPU node, the variable unset on every rank: local rank k takes cuda:k.
  for (int k = 0; k < 4; ++k) {
    const auto c = choose_device(node("auto", 4, k, {Env{}, Env{}, Env{}, Env{}}));
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_EQ(c.cuda_index, k);
    EXPECT_TRUE(has(c.why, "cuda:" + std::to_string(k) + ": local rank " + std::to_string(k) + " of the node's 4"))
        << c.why;
    EXPECT_TRUE(has(c.why, "CUDA_VISIBLE_DEVICES unset")) << c.why;
  }
  // The same value on every rank (srun --gpus-per-node=2): the same rule over the GPUs it leaves.
  const auto c = choose_device(node("cuda", 2, 1, {Env{"4,5"}, Env{"4,5"}}));
  EXPECT_EQ(c.cuda_index, 1);
  EXPECT_TRUE(has(c.why, "CUDA_VISIBLE_DEVICES=4,5")) << c.why;
  // One rank on an 8-GPU node: cuda:0 (doctor warns about the 7 idle ones).
  EXPECT_EQ(choose_device(node("auto", 8, 0, {Env{}})).cuda_index, 0);
}

TEST(ChooseDevice, RanksWithGpusOfTheirOwnEachTakeTheirFirst) {
  // Slurm --gpus-per-task=1: each rank sees exactly one GPU, a different one: cuda:0 everywhere. This
  // was refused before ("start one rank per GPU"): 4 local ranks against 1 visible device.
  for (int k = 0; k < 4; ++k) {
    const auto c = choose_device(node("auto", 1, k, {Env{"0"}, Env{"1"}, Env{"2"}, Env{"3"}}));
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_EQ(c.cuda_index, 0);
    EXPECT_TRUE(has(c.why, "CUDA_VISIBLE_DEVICES=" + std::to_string(k))) << c.why;
    EXPECT_TRUE(has(c.why, "each of the node's 4 rank(s) has its own")) << c.why;
  }
  // UUIDs and two GPUs per task: the first of each.
  const auto c = choose_device(node("cuda", 2, 1, {Env{"GPU-aa,GPU-bb"}, Env{"GPU-cc,GPU-dd"}}));
  EXPECT_TRUE(c.error.empty()) << c.error;
  EXPECT_EQ(c.cuda_index, 0);
}

TEST(ChooseDevice, RefusesOnlyWhatCannotWorkAndNamesTheVariable) {
  // More ranks than the GPUs they all see.
  auto c = choose_device(node("cuda", 2, 0, {Env{}, Env{}, Env{}}));
  EXPECT_EQ(c.cuda_index, -1);
  EXPECT_TRUE(has(c.error, "3 ranks run on c214n3 and all see the same 2 GPU(s) (CUDA_VISIBLE_DEVICES unset)"))
      << c.error;
  EXPECT_TRUE(has(c.error, "--gpus-per-task=1")) << c.error;
  // auto with GPUs present refuses too: the user has GPUs and did not ask for the CPU.
  EXPECT_FALSE(choose_device(node("auto", 1, 1, {Env{"0"}, Env{"0"}})).error.empty());
  // Two ranks whose own lists start with the same GPU.
  c = choose_device(node("cuda", 2, 2, {Env{"0,1"}, Env{"2,3"}, Env{"0,3"}}));
  EXPECT_TRUE(has(c.error, "local ranks 0 and 2 on c214n3 would both use GPU '0'")) << c.error;
  // The variable set for some ranks only.
  c = choose_device(node("cuda", 1, 0, {Env{"1"}, Env{}}));
  EXPECT_TRUE(has(c.error, "CUDA_VISIBLE_DEVICES is set for some ranks on c214n3 but not for local rank 1")) << c.error;
  // Every rank of the node gets the same verdict (they decide from the same inputs).
  for (int k = 0; k < 2; ++k) EXPECT_FALSE(choose_device(node("cuda", 1, k, {Env{"1"}, Env{}})).error.empty());
}

TEST(ChooseDevice, NoGpuAndTheCpu) {
  auto c = choose_device(node("auto", 0, 0, {Env{""}}));
  EXPECT_TRUE(c.error.empty());
  EXPECT_EQ(c.cuda_index, -1);
  EXPECT_TRUE(has(c.why,
                  "cpu: --device auto found no CUDA device (cudaGetDeviceCount: no CUDA-capable device is "
                  "detected; CUDA_VISIBLE_DEVICES='')"))
      << c.why;
  c = choose_device(node("cuda", 0, 0, {Env{}}));
  EXPECT_TRUE(has(c.error, "--device cuda: no CUDA device is visible on c214n3")) << c.error;
  c = choose_device(node("cpu", 4, 0, {Env{}}));
  EXPECT_EQ(c.cuda_index, -1);
  EXPECT_EQ(c.why, "cpu: --device cpu");
  c = choose_device(node("gpu", 4, 0, {Env{}}));
  EXPECT_TRUE(has(c.error, "unknown device 'gpu'")) << c.error;
}
