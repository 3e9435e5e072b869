// Collective communication over torch tensors, with MPI (CPU tensors) and NCCL (CUDA tensors) backends.
//
// Contract for every collective below:
//  * Collective: every rank of the communicator calls it, in the same order, with tensors of the
//    same dtype and matching sizes. Tensors must be contiguous and on the backend's device
//    (std::invalid_argument otherwise, raised on the caller's thread before anything is sent).
//  * *_async returns at once; the operation runs in order with the communicator's other operations
//    on its own progress thread (MPI) or CUDA stream (NCCL). The tensors must stay alive and
//    untouched until the Work completes (the Work holds a reference).
//  * Completion: after Work::wait() returns, whatever the caller does next sees the results. MPI:
//    wait() blocks the calling thread until the results are in host memory. NCCL: wait() makes the
//    caller's current CUDA stream wait for the operation and returns at once; the host does not wait
//    (later kernels, and host reads such as .item() or .cpu(), which wait for that stream, see the
//    results). Work::synchronize() is the explicit host wait, for the few places that need one.
//  * Hangs: every operation runs under the communicator's watchdog; one that is not complete within
//    the timeout (Runtime's comm_timeout_s) ends the whole job with a message naming the operation,
//    bytes, rank, host and elapsed time (abort_job). A failed operation is likewise fatal.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace at {
class Tensor;
}

namespace meridian::comm {

class Runtime;

enum class ReduceOp { Sum, Avg, Max, Min };  // Avg: sum / size; floating-point tensors only
enum class Backend { MPI, NCCL };

const char* to_string(ReduceOp op);
const char* to_string(Backend backend);
ReduceOp parse_reduce_op(const std::string& name);  // "sum", "avg", "max", "min"; UserError otherwise

class Work {
 public:
  virtual ~Work() = default;
  // Orders what the caller does next after the operation: MPI blocks until it has completed, NCCL
  // makes the current CUDA stream wait for it without blocking the host (see the contract above).
  virtual void wait() = 0;
  // Blocks the calling thread until the operation has completed, then as wait() (the watchdog ends
  // the job if it never completes). For timing and host-side waits; MPI's wait() is this.
  virtual void synchronize() = 0;
  // Blocks at most `timeout`; true when completed (then as after synchronize()), false when still running.
  virtual bool wait_for(std::chrono::duration<double> timeout) = 0;
  // Non-blocking completion test.
  virtual bool is_completed() = 0;
  // When the operation was seen complete by the progress thread (for timelines); the epoch of
  // steady_clock while still running.
  virtual std::chrono::steady_clock::time_point completed_at() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;

  // In place: every rank ends with op over all ranks' `tensor`.
  virtual WorkPtr allreduce_async(at::Tensor& tensor, ReduceOp op) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual WorkPtr broadcast_async(at::Tensor& tensor, int root) = 0;
  // output.numel() == size * input.numel(); rank r's input lands in output's r-th slice of input.numel().
  virtual WorkPtr allgather_async(const at::Tensor& input, at::Tensor& output) = 0;
  // input.numel() == size * output.numel(); rank r gets op over ranks of input's r-th slice.
  virtual WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  virtual WorkPtr barrier_async() = 0;

  // Blocking forms: the async form followed by wait() (NCCL: stream-ordered, the host does not
  // wait). A backend may run them on
  // the calling thread when nothing else is queued (MPI does, saving a thread hand-off per call).
  virtual void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  virtual void broadcast(at::Tensor& tensor, int root = 0);
  virtual void allgather(const at::Tensor& input, at::Tensor& output);
  virtual void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op = ReduceOp::Sum);
  virtual void barrier();
};

// Seconds the process's threads have spent blocked in Work::wait / wait_for (synchronous collectives
// included) since it started: time this rank waited for others, wherever in a step the collective
// was (gradient buckets, a loss's gathers, control values). Not collective; thread-safe. NCCL's
// wait() orders streams without blocking the host, so NCCL collectives add nothing here.
double blocked_seconds();

// Collective over the runtime's world. MPI: any CPU tensor; NCCL: CUDA tensors on the runtime's
// device.
std::unique_ptr<Communicator> make_communicator(const Runtime& runtime, Backend backend);
// The backend matching the runtime's device: NCCL on CUDA, MPI on CPU.
Backend default_backend(const Runtime& runtime);
// "NCCL 2.30.7 (loaded)", with the version built against where it differs. Not collective.
std::string nccl_version();

}  // namespace meridian::comm
