#include "meridian/ckpt/bench.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"

namespace meridian::ckpt {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rank 0 alone: one stream of `tensors` through stdio and fsync (as a checkpoint is fsynced before
// it is renamed into place), then read back (from the page cache when it still holds the file).
std::pair<double, double> plain_write_read(const std::string& path, const std::vector<at::Tensor>& tensors) {
  auto t0 = Clock::now();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw SystemError(path + ": cannot create");
  for (const auto& t : tensors)
    if (std::fwrite(t.data_ptr(), 1, t.nbytes(), f) != t.nbytes())
      throw SystemError(path + ": write failed (disk full?)");
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) throw SystemError(path + ": flush failed");
  if (std::fclose(f) != 0) throw SystemError(path + ": close failed");
  const double write_s = since(t0);
  t0 = Clock::now();
  f = std::fopen(path.c_str(), "rb");
  if (!f) throw SystemError(path + ": cannot open");
  std::vector<char> buffer(8 << 20);
  while (std::fread(buffer.data(), 1, buffer.size(), f) == buffer.size()) {
  }
  std::fclose(f);
  const double read_s = since(t0);
  std::filesystem::remove(path);
  return {write_s, read_s};
}
}  // namespace

CkptBenchResult run_ckpt_bench(const comm::Runtime& rt, const CkptBenchOptions& o) {
  const int64_t bytes = o.bytes;
  const int tensors = o.tensors, repeat = o.repeat;
  const std::string& dir = o.dir;
  if (tensors < 1 || repeat < 1) throw UserError("bench ckpt: --tensors and --repeat must be at least 1");
  if (bytes < int64_t(tensors) * 4 * 1024) throw UserError("bench ckpt: --size must be at least 4 KiB per tensor");
  if (rt.rank() == 0) std::filesystem::create_directories(dir);
  rt.barrier();
  // The same values on every rank (replicated state), rows of 1024 floats.
  at::manual_seed(0);
  std::vector<at::Tensor> state;
  const int64_t rows = bytes / tensors / 4096;
  for (int i = 0; i < tensors; ++i) state.push_back(at::randn({rows, 1024}));
  const double total = double(rows) * 4096 * tensors;
  const std::string path = dir + "/bench_ckpt.h5";
  double best_write = 1e30, best_read = 1e30, best_plain_write = 1e30, best_plain_read = 1e30, seal = 0;
  for (int k = 0; k < repeat; ++k) {
    rt.barrier();
    auto t0 = Clock::now();
    double sealed = 0;
    {
      ckpt::Writer w(rt, path);
      for (int i = 0; i < tensors; ++i) w.replicated("model/t" + std::to_string(i), state[size_t(i)]);
      w.close();
      sealed = w.seal_seconds();
    }
    rt.barrier();
    const double wrote = since(t0);
    sealed = double(rt.max(int64_t(sealed * 1e6))) / 1e6;
    if (wrote < best_write) best_write = wrote, seal = sealed;
    // Read back as a resume does: every rank reads (and checks) everything.
    t0 = Clock::now();
    {
      ckpt::Reader r(path);
      for (int i = 0; i < tensors; ++i) r.read("model/t" + std::to_string(i));
    }
    rt.barrier();
    best_read = std::min(best_read, since(t0));
    if (rt.rank() == 0) {
      const auto [w, r] = plain_write_read(dir + "/bench_plain.bin", state);
      best_plain_write = std::min(best_plain_write, w);
      best_plain_read = std::min(best_plain_read, r);
    }
    rt.barrier();
  }
  if (rt.rank() == 0) std::filesystem::remove(path);
  return {total, best_write, best_read, rt.rank() == 0 ? best_plain_write : 0, rt.rank() == 0 ? best_plain_read : 0,
          seal};
}

}  // namespace meridian::ckpt
