#include "meridian/comm/communicator.h"

#include <ATen/ATen.h>

#include <atomic>
#include <sstream>
#include <stdexcept>

#include "backends.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "work.h"

namespace meridian::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

const char* to_string(Backend backend) { return backend == Backend::MPI ? "mpi" : "nccl"; }

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg") return ReduceOp::Avg;
  if (name == "max") return ReduceOp::Max;
  if (name == "min") return ReduceOp::Min;
  throw UserError("unknown reduction '" + name + "' (expected sum, avg, max or min)");
}

namespace {
std::atomic<int64_t> blocked_ns{0};
}  // namespace

double blocked_seconds() { return double(blocked_ns.load(std::memory_order_relaxed)) * 1e-9; }

void detail::add_blocked(std::chrono::steady_clock::duration d) {
  blocked_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed);
}

void Communicator::allreduce(at::Tensor& tensor, ReduceOp op) { allreduce_async(tensor, op)->wait(); }
void Communicator::broadcast(at::Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
void Communicator::allgather(const at::Tensor& input, at::Tensor& output) { allgather_async(input, output)->wait(); }
void Communicator::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  reduce_scatter_async(input, output, op)->wait();
}
void Communicator::barrier() { barrier_async()->wait(); }

Backend default_backend(const Runtime& runtime) { return runtime.device().is_cuda() ? Backend::NCCL : Backend::MPI; }

std::unique_ptr<Communicator> make_communicator(const Runtime& runtime, Backend backend) {
  if (backend == Backend::MPI) return detail::make_mpi_communicator(runtime, {});
  return detail::make_nccl_communicator(runtime);
}

namespace detail {

std::function<void(const std::string&, double)> watchdog_abort(const char* backend, double timeout_s) {
  return [backend = std::string(backend), timeout_s](const std::string& what, double elapsed) {
    std::ostringstream os;
    os << where() << " watchdog: " << what << " on the " << backend << " communicator did not complete within "
       << timeout_s << " s (elapsed " << elapsed << " s); a rank is hung, dead or skipped the call. Aborting the job.";
    abort_job(os.str(), kExitFatal);
  };
}

std::string describe(const char* collective, const at::Tensor& tensor, const char* extra) {
  std::ostringstream os;
  os << collective;
  if (extra) os << "(" << extra << ")";
  os << " of " << tensor.numel() * tensor.element_size() << " bytes (" << c10::toString(tensor.scalar_type()) << "["
     << tensor.numel() << "] on " << tensor.device() << ")";
  return os.str();
}

void check_tensor(const at::Tensor& t, c10::DeviceType device_type, const char* collective, const char* name) {
  if (!t.defined()) throw std::invalid_argument(std::string(collective) + ": " + name + " tensor is undefined");
  if (t.device().type() != device_type) {
    std::ostringstream os;
    os << collective << ": " << name << " tensor is on " << t.device() << " but this communicator needs "
       << c10::DeviceTypeName(device_type, /*lower_case=*/true) << " tensors";
    throw std::invalid_argument(os.str());
  }
  if (!t.is_contiguous())
    throw std::invalid_argument(std::string(collective) + ": " + name + " tensor is not contiguous");
}

void check_split(const at::Tensor& big, const at::Tensor& small, int parts, const char* collective) {
  if (big.scalar_type() != small.scalar_type())
    throw std::invalid_argument(std::string(collective) + ": input and output dtypes differ");
  if (big.numel() != small.numel() * parts) {
    std::ostringstream os;
    os << collective << ": expected " << parts << " x " << small.numel() << " = " << parts * small.numel()
       << " elements in the larger tensor, got " << big.numel();
    throw std::invalid_argument(os.str());
  }
}

void check_reduce(const at::Tensor& t, ReduceOp op, const char* collective) {
  if (op == ReduceOp::Avg && !at::isFloatingType(t.scalar_type()))
    throw std::invalid_argument(std::string(collective) + ": avg needs a floating-point tensor, got " +
                                c10::toString(t.scalar_type()));
}

}  // namespace detail
}  // namespace meridian::comm
