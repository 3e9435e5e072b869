#include "meridian/comm/gpu_build.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "meridian/build_config.h"
#include "meridian/comm/probe.h"

namespace meridian::comm {

const std::vector<TorchTrack>& torch_tracks() {
  static const std::vector<TorchTrack> tracks{MERIDIAN_TORCH_TRACKS};
  return tracks;
}

CudaBuild this_cuda_build() {
  CudaBuild b;
  b.track = MERIDIAN_TORCH_TRACK;
  cudaRuntimeGetVersion(&b.cuda);
  std::istringstream archs(MERIDIAN_TORCH_CUDA_ARCHS);
  for (std::string a; archs >> a;) b.archs.push_back(a);
  return b;
}

namespace {

// The few NVML entry points needed, loaded from the driver's library: a node without a driver has none,
// and meridian links nothing of it.
struct Nvml {
  using Init = int (*)();
  using Count = int (*)(unsigned*);
  using Handle = int (*)(unsigned, void**);
  using Name = int (*)(void*, char*, unsigned);
  using Cc = int (*)(void*, int*, int*);
  using DriverCuda = int (*)(int*);
  void* lib = nullptr;
  template <class F>
  F sym(const char* name) const {
    return reinterpret_cast<F>(dlsym(lib, name));
  }
};

// NVML's GPUs and the driver's CUDA version; false when NVML is not there or does not start.
bool nvml_gpus(NodeGpus& out) {
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) return false;
  const auto init = n.sym<Nvml::Init>("nvmlInit_v2");
  const auto shutdown = n.sym<Nvml::Init>("nvmlShutdown");
  const auto count = n.sym<Nvml::Count>("nvmlDeviceGetCount_v2");
  const auto handle = n.sym<Nvml::Handle>("nvmlDeviceGetHandleByIndex_v2");
  const auto name = n.sym<Nvml::Name>("nvmlDeviceGetName");
  const auto cc = n.sym<Nvml::Cc>("nvmlDeviceGetCudaComputeCapability");
  const auto driver_cuda = n.sym<Nvml::DriverCuda>("nvmlSystemGetCudaDriverVersion");
  bool ok = false;
  if (init && shutdown && count && handle && name && init() == 0) {
    unsigned k = 0;
    if (count(&k) == 0) {
      ok = true;
      for (unsigned i = 0; i < k; ++i) {
        void* dev = nullptr;
        GpuInfo g;
        char text[96] = {};
        if (handle(i, &dev) == 0) {
          if (name(dev, text, sizeof text) == 0) g.name = text;
          if (cc) cc(dev, &g.major, &g.minor);
        }
        out.gpus.push_back(g);
      }
      if (out.driver_cuda == 0 && driver_cuda) driver_cuda(&out.driver_cuda);
    }
    shutdown();
  }
  dlclose(n.lib);
  return ok;
}

std::string first_device_file() {
  std::error_code ec;
  for (int i = 0; i < 64; ++i) {
    const std::string path = "/dev/nvidia" + std::to_string(i);
    if (std::filesystem::exists(path, ec)) return path;
  }
  return "";
}

int cuda_code(const std::string& text) {  // "12.4" -> 12040; -1 when malformed
  const auto dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 >= text.size()) return -1;
  const std::string major = text.substr(0, dot), minor = text.substr(dot + 1);
  if (major.find_first_not_of("0123456789") != std::string::npos || minor.size() != 1 || !std::isdigit(minor[0]))
    return -1;
  return std::atoi(major.c_str()) * 1000 + (minor[0] - '0') * 10;
}

std::string cc_text(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

}  // namespace

bool parse_test_node_gpu(const std::string& spec, NodeGpus& out, std::string& error) {
  out = NodeGpus{};
  out.present = true;
  out.evidence = "MERIDIAN_TEST_NODE_GPU";
  out.from_test_seam = true;
  GpuInfo g;
  std::istringstream fields(spec);
  for (std::string field; std::getline(fields, field, ';');) {
    const auto eq = field.find('=');
    const std::string key = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (key == "driver_cuda" && cuda_code(value) > 0) {
      out.driver_cuda = cuda_code(value);
    } else if (key == "name" && !value.empty()) {
      g.name = value;
    } else if (key == "cc" && cuda_code(value) > 0) {
      g.major = cuda_code(value) / 1000;
      g.minor = cuda_code(value) % 1000 / 10;
    } else {
      error = "MERIDIAN_TEST_NODE_GPU: '" + field +
              "' is not driver_cuda=MAJOR.MINOR, name=TEXT or cc=MAJOR.MINOR (fields separated by ';')";
      return false;
    }
  }
  out.gpus.push_back(g);
  return true;
}

NodeGpus node_gpus() {
  NodeGpus n;
  if (const char* spec = std::getenv("MERIDIAN_TEST_NODE_GPU")) {
    std::string error;
    if (parse_test_node_gpu(spec, n, error)) return n;
    n = NodeGpus{};
    n.error = error;
    return n;
  }
  cudaDriverGetVersion(&n.driver_cuda);  // 0 when no driver is installed; works under any runtime
  if (nvml_gpus(n) && !n.gpus.empty()) {
    n.present = true;
    n.evidence = "NVML lists " + std::to_string(n.gpus.size());
    return n;
  }
  n.gpus.clear();
  const std::string file = first_device_file();
  n.present = !file.empty();
  n.evidence = file;
  return n;
}

bool archs_run_on(const std::vector<std::string>& archs, int major, int minor) {
  if (archs.empty()) return true;
  const int cc = major * 10 + minor;
  for (const auto& a : archs) {
    const bool ptx = a.rfind("compute_", 0) == 0;
    if (!ptx && a.rfind("sm_", 0) != 0) continue;
    std::string digits = a.substr(ptx ? 8 : 3);
    const bool specific =
        !digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()));  // sm_90a, sm_100f
    while (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()))) digits.pop_back();
    if (digits.size() < 2 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int code = std::atoi(digits.c_str());  // 86, 100, 120
    if (ptx ? code <= cc : specific ? code == cc : (code / 10 == major && code % 10 <= minor)) return true;
  }
  return false;
}

std::string cuda_build_summary(const CudaBuild& build) {
  std::string archs;
  for (const auto& a : build.archs) archs += (archs.empty() ? "" : " ") + a;
  return fmt::format("CUDA {} ({}), architectures {}", cuda_version_text(build.cuda),
                     build.track.empty() ? "a LibTorch outside meridian's tracks" : "track " + build.track,
                     archs.empty() ? "unknown" : archs);
}

std::string gpu_build_refusal(const CudaBuild& build, int driver_cuda, const GpuInfo& gpu, const std::string& host) {
  const bool cc_known = gpu.major > 0;
  const int cc = gpu.major * 10 + gpu.minor;
  const bool driver_ok = driver_cuda > 0 && driver_cuda / 1000 >= build.cuda / 1000;
  const bool arch_ok = !cc_known || archs_run_on(build.archs, gpu.major, gpu.minor);
  if (driver_ok && arch_ok) return "";

  std::vector<std::string> why;
  if (!driver_ok)
    why.push_back(driver_cuda <= 0 ? "no NVIDIA driver answers (cudaDriverGetVersion: 0)"
                                   : fmt::format("the driver supports CUDA {}, older than the build's CUDA {}",
                                                 cuda_version_text(driver_cuda), build.cuda / 1000));
  if (!arch_ok)
    why.push_back(fmt::format("the build has no kernels for compute capability {}.{}", gpu.major, gpu.minor));
  // The fix: a track whose driver and architectures fit this node, else the driver to install.
  std::vector<std::string> fixes;
  for (const auto& t : torch_tracks()) {
    if (t.name == build.track || driver_cuda < t.driver_cuda || (cc_known && cc < t.cc)) continue;
    fixes.push_back(
        fmt::format("MERIDIAN_TORCH_TRACK={} jobs/setup-node.sh and a rebuild (tests/run.sh, or cmake "
                    "--build build): torch {} with CUDA {} runs compute capability {}+ on driver {}+",
                    t.name, t.torch, cuda_version_text(t.cuda), cc_text(t.cc), t.driver));
  }
  const auto& all = torch_tracks();
  const auto switches = static_cast<std::ptrdiff_t>(fixes.size());  // a track that runs now comes first
  if (!driver_ok) {  // a newer driver: for this build, or for a track whose kernels cover the GPU
    for (const auto& t : all) {
      if ((cc_known && cc < t.cc) || (t.name != build.track && driver_cuda >= t.driver_cuda)) continue;
      const std::string full = t.full_driver != t.driver ? fmt::format(", {}+ for all of it", t.full_driver) : "";
      if (t.name == build.track && arch_ok)
        fixes.insert(fixes.begin() + switches,
                     fmt::format("install NVIDIA driver {} or newer (CUDA {}{}) for this build", t.driver,
                                 cuda_version_text(t.driver_cuda), full));
      else if (t.name != build.track)
        fixes.push_back(
            fmt::format("install NVIDIA driver {} or newer (CUDA {}{}) with track {} "
                        "(MERIDIAN_TORCH_TRACK={} jobs/setup-node.sh and a rebuild)",
                        t.driver, cuda_version_text(t.driver_cuda), full, t.name, t.name));
    }
  }
  if (fixes.empty() && cc_known) {
    const auto oldest =
        std::min_element(all.begin(), all.end(), [](const TorchTrack& a, const TorchTrack& b) { return a.cc < b.cc; });
    fixes.push_back(oldest == all.end()
                        ? "use a GPU this build covers"
                        : fmt::format("none: no track of meridian carries kernels for compute capability {}.{} (the "
                                      "oldest covered is {}, track {}); use a newer GPU",
                                      gpu.major, gpu.minor, cc_text(oldest->cc), oldest->name));
  }
  std::string because;
  for (const auto& w : why) because += (because.empty() ? "" : "; ") + w;
  because[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(because[0])));
  std::string fix;
  for (const auto& f : fixes) fix += (fix.empty() ? "" : "; or ") + f;
  const std::string what = cc_known ? fmt::format("{} (compute capability {}.{})",
                                                  gpu.name.empty() ? "a GPU" : gpu.name, gpu.major, gpu.minor)
                                    : (gpu.name.empty() ? std::string("a GPU of unknown model") : gpu.name);
  return fmt::format("this build cannot run on {}'s GPU: {}, driver CUDA {}; build: {}. {}. Fix: {}", host, what,
                     cuda_version_text(driver_cuda), cuda_build_summary(build), because, fix);
}

GpuBuildVerdict gpu_build_verdict(int cuda_index, const std::string& host) {
  const NodeGpus node = node_gpus();
  if (!node.error.empty()) return {node.error, true};
  const CudaBuild build = this_cuda_build();
  if (!node.present) return {"no NVIDIA GPU on this node; build: " + cuda_build_summary(build), false};
  GpuInfo gpu = node.gpus.empty() ? GpuInfo{} : node.gpus.front();
  if (!node.from_test_seam && cuda_index >= 0) {
    const GpuInventory visible = local_gpus();
    if (cuda_index < int(visible.gpus.size())) gpu = visible.gpus[size_t(cuda_index)];
  }
  const std::string refusal = gpu_build_refusal(build, node.driver_cuda, gpu, host);
  if (!refusal.empty()) return {refusal, true};
  return {fmt::format("runs on {} (compute capability {}.{}), driver CUDA {} ({}); build: {}", gpu.name, gpu.major,
                      gpu.minor, cuda_version_text(node.driver_cuda), node.evidence, cuda_build_summary(build)),
          false};
}

}  // namespace meridian::comm
