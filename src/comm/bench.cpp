#include "meridian/comm/bench.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backends.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"

namespace meridian::comm {

namespace {

const std::vector<std::string> kCollectives{"allreduce", "broadcast", "allgather", "reduce_scatter"};

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "int32") return at::kInt;
  if (name == "int64") return at::kLong;
  throw UserError("--dtypes: unknown dtype '" + name +
                  "' (expected float32, float64, bfloat16, float16, int32, int64)");
}

using Clock = std::chrono::steady_clock;

// Closed-form data: rank r's element i is (r + 1) + (i mod 13) — exact in every dtype for the rank
// counts this runs on (bf16 represents integers exactly up to 256).
at::Tensor pattern(int64_t count, int rank, int64_t first_index, at::ScalarType dtype) {
  auto i = at::arange(first_index, first_index + count, at::kLong).remainder(13).to(at::kDouble);
  return (i + (rank + 1)).to(dtype);
}

// Expected value of element i (of the result's own indexing, global index gi) for `collective`.
at::Tensor expected(const std::string& collective, ReduceOp op, int64_t count, int rank, int n) {
  if (collective == "broadcast") return pattern(count, 0, 0, at::kDouble);
  if (collective == "allgather") {
    std::vector<at::Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(pattern(count / n, r, 0, at::kDouble));
    return at::cat(parts);
  }
  const int64_t first = collective == "reduce_scatter" ? int64_t(rank) * count : 0;
  auto k = at::arange(first, first + count, at::kLong).remainder(13).to(at::kDouble);
  switch (op) {
    case ReduceOp::Sum:
      return k * n + n * (n + 1) / 2.0;
    case ReduceOp::Avg:
      return k + (n + 1) / 2.0;
    case ReduceOp::Max:
      return k + n;
    case ReduceOp::Min:
      return k + 1;
  }
  return k;
}

struct Buffers {
  at::Tensor input, output;  // output undefined for in-place collectives
};

Buffers make_buffers(const std::string& collective, int64_t count, int n, at::ScalarType dtype, const c10::Device& dev,
                     int rank, bool fill) {
  Buffers b;
  auto opts = at::TensorOptions().dtype(dtype).device(dev);
  if (collective == "allreduce" || collective == "broadcast") {
    b.input = fill ? pattern(count, rank, 0, dtype).to(dev) : at::zeros({count}, opts);
  } else if (collective == "allgather") {
    b.input = fill ? pattern(count / n, rank, 0, dtype).to(dev) : at::zeros({count / n}, opts);
    b.output = at::zeros({count}, opts);
  } else {  // reduce_scatter: count = full input
    b.input = fill ? pattern(count, rank, 0, dtype).to(dev) : at::zeros({count}, opts);
    b.output = at::zeros({count / n}, opts);
  }
  return b;
}

void run_blocking(Communicator& comm, const std::string& collective, Buffers& b, ReduceOp op) {
  if (collective == "allreduce")
    comm.allreduce(b.input, op);
  else if (collective == "broadcast")
    comm.broadcast(b.input, 0);
  else if (collective == "allgather")
    comm.allgather(b.input, b.output);
  else
    comm.reduce_scatter(b.input, b.output, op);
}

WorkPtr launch(Communicator& comm, const std::string& collective, Buffers& b, ReduceOp op) {
  if (collective == "allreduce") return comm.allreduce_async(b.input, op);
  if (collective == "broadcast") return comm.broadcast_async(b.input, 0);
  if (collective == "allgather") return comm.allgather_async(b.input, b.output);
  return comm.reduce_scatter_async(b.input, b.output, op);
}

double max_over_ranks(Communicator& comm, double value, const c10::Device& dev) {
  auto t = at::full({1}, value, at::TensorOptions().dtype(at::kDouble).device(dev));
  comm.allreduce(t, ReduceOp::Max);
  return t.cpu().item<double>();
}

}  // namespace

double bus_factor(const std::string& collective, int n) {
  if (collective == "allreduce") return n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (collective == "allgather" || collective == "reduce_scatter") return n > 1 ? double(n - 1) / n : 0.0;
  return 1.0;  // broadcast
}

void validate(const CommBenchOptions& o) {
  for (const auto& c : o.collectives)
    if (std::find(kCollectives.begin(), kCollectives.end(), c) == kCollectives.end())
      throw UserError("--ops: unknown collective '" + c +
                      "' (expected allreduce, broadcast, allgather, reduce_scatter)");
  for (const auto& d : o.dtypes) {
    const auto t = parse_dtype(d);
    if (o.op == ReduceOp::Avg && !at::isFloatingType(t))
      throw UserError("--op avg: needs floating-point dtypes, got " + d);
  }
  if (o.min_bytes == 0 || o.min_bytes > o.max_bytes)
    throw UserError("--min-bytes/--max-bytes: need 0 < min-bytes <= max-bytes");
  if (!(o.factor > 1.0)) throw UserError("--factor: must be greater than 1");
  if (o.iters < 1 || o.warmup < 0) throw UserError("--iters must be >= 1 and --warmup >= 0");
}

std::vector<CommBenchRow> run_comm_bench(const Runtime& runtime, Communicator& comm, const CommBenchOptions& o,
                                         const std::function<void(const CommBenchRow&)>& on_row) {
  validate(o);
  const int n = comm.size();
  const c10::Device dev = comm.backend() == Backend::NCCL ? runtime.device() : c10::Device(c10::kCPU);
  std::vector<CommBenchRow> rows;
  for (const auto& collective : o.collectives) {
    for (const auto& dtype_name : o.dtypes) {
      const auto dtype = parse_dtype(dtype_name);
      const int64_t elem = c10::elementSize(dtype);
      const bool split = collective == "allgather" || collective == "reduce_scatter";
      uint64_t last_count = 0;
      for (double sz = double(o.min_bytes); sz <= double(o.max_bytes) * (1 + 1e-9); sz *= o.factor) {
        int64_t count = static_cast<int64_t>(sz) / elem;
        if (split) count = count / n * n;  // whole slices per rank
        if (count < (split ? n : 1) || uint64_t(count) == last_count) continue;
        last_count = count;
        CommBenchRow row;
        row.collective = collective;
        row.dtype = dtype_name;
        row.op = (collective == "allreduce" || collective == "reduce_scatter") ? to_string(o.op) : "-";
        row.count = split && collective == "allgather" ? count / n : count;
        row.bytes = uint64_t(count) * elem;

        // Timing on zeros: they stay exact and finite under any number of repeated sums, max, min, avg.
        Buffers timed = make_buffers(collective, count, n, dtype, dev, comm.rank(), /*fill=*/false);
        // Host waits (synchronize): NCCL's wait() only orders the GPU's streams.
        for (int i = 0; i < o.warmup; ++i) launch(comm, collective, timed, o.op)->synchronize();
        runtime.barrier();
        auto t0 = Clock::now();
        if (o.blocking && comm.backend() == Backend::MPI) {
          for (int i = 0; i < o.iters; ++i) run_blocking(comm, collective, timed, o.op);
        } else if (o.blocking) {
          for (int i = 0; i < o.iters; ++i) launch(comm, collective, timed, o.op)->synchronize();
        } else {
          std::vector<WorkPtr> works;
          for (int i = 0; i < o.iters; ++i) works.push_back(launch(comm, collective, timed, o.op));
          for (auto& w : works) w->synchronize();
        }
        const double mine = std::chrono::duration<double>(Clock::now() - t0).count() / o.iters;
        const double t = max_over_ranks(comm, mine, dev);
        row.time_us = t * 1e6;
        row.algbw_gbs = double(row.bytes) / t / 1e9;
        row.busbw_gbs = row.algbw_gbs * bus_factor(collective, n);

        // Correctness on fresh closed-form data.
        Buffers checked = make_buffers(collective, count, n, dtype, dev, comm.rank(), /*fill=*/true);
        launch(comm, collective, checked, o.op)->synchronize();
        const at::Tensor result = (checked.output.defined() ? checked.output : checked.input).cpu().to(at::kDouble);
        const at::Tensor want =
            expected(collective, o.op, collective == "reduce_scatter" ? count / n : count, comm.rank(), n);
        auto wrong = (result != want).sum().to(at::kLong).to(dev).reshape({1});
        comm.allreduce(wrong, ReduceOp::Sum);
        row.wrong = wrong.cpu().item<int64_t>();

        if (o.reference) {
          // The same buffer as the timed run; a host copy of it when the communicator's is on a GPU.
          Buffers ref = timed;
          if (!dev.is_cpu()) {
            ref.input = timed.input.cpu();
            if (timed.output.defined()) ref.output = timed.output.cpu();
          }
          at::Tensor out = ref.output.defined() ? ref.output : ref.input;
          const ReduceOp raw_op = o.op == ReduceOp::Avg ? ReduceOp::Sum : o.op;
          for (int i = 0; i < o.warmup; ++i) detail::raw_mpi_collective(collective, ref.input, out, raw_op);
          runtime.barrier();
          auto r0 = Clock::now();
          for (int i = 0; i < o.iters; ++i) detail::raw_mpi_collective(collective, ref.input, out, raw_op);
          const double rmine = std::chrono::duration<double>(Clock::now() - r0).count() / o.iters;
          const double rt = max_over_ranks(comm, rmine, dev);
          row.ref_time_us = rt * 1e6;
          row.ref_busbw_gbs = double(row.bytes) / rt / 1e9 * bus_factor(collective, n);
        }
        rows.push_back(row);
        if (on_row) on_row(row);
      }
    }
  }
  return rows;
}

}  // namespace meridian::comm
