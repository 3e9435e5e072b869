// NCCL backend: CUDA tensors, operations on the communicator's own CUDA stream.
//
// Ordering: each operation first makes the NCCL stream wait for the caller's current CUDA stream
// (an event), so it reads finished data; Work::wait() makes the caller's current stream wait for
// the operation's completion event and returns without a host wait, so later kernels (and host
// reads, which wait for that stream) see the results; Work::synchronize() also blocks the host until
// the progress thread has seen it complete. A progress thread polls completion events and
// ncclCommGetAsyncError; the watchdog ends the job (ncclCommAbort, then MPI_Abort) when an
// operation hangs or NCCL reports an asynchronous error.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <thread>

#include "backends.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/error.h"
#include "work.h"

#define MERIDIAN_CUDA_CHECK(call)                                                                             \
  do {                                                                                                        \
    const cudaError_t meridian_cuda_rc_ = (call);                                                             \
    if (meridian_cuda_rc_ != cudaSuccess)                                                                     \
      ::meridian::detail::throw_check_failure("CUDA", #call, cudaGetErrorString(meridian_cuda_rc_), __FILE__, \
                                              __LINE__);                                                      \
  } while (0)

#define MERIDIAN_NCCL_CHECK(call)                                                                             \
  do {                                                                                                        \
    const ncclResult_t meridian_nccl_rc_ = (call);                                                            \
    if (meridian_nccl_rc_ != ncclSuccess)                                                                     \
      ::meridian::detail::throw_check_failure("NCCL", #call, ncclGetErrorString(meridian_nccl_rc_), __FILE__, \
                                              __LINE__, "set NCCL_DEBUG=WARN for NCCL's own report");         \
  } while (0)

namespace meridian::comm::detail {

namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    default:
      throw std::invalid_argument(std::string("NCCL backend: unsupported dtype ") + c10::toString(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

cudaStream_t current_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

// Makes `device` current for a scope and restores the caller's device after, so the communicator
// never changes which GPU the caller's later allocations go to.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MERIDIAN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MERIDIAN_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class NcclWork final : public CompletionWork {
 public:
  NcclWork(int device, cudaEvent_t done) : device_(device), done_(done) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  cudaEvent_t event() const { return done_; }
  // Stream order only: the event was recorded at launch, so the current stream can wait on it now.
  // The in-flight record keeps the tensors alive until the progress thread sees completion.
  void wait() override { after_completion(); }

 protected:
  void after_completion() override {
    DeviceGuard guard(device_);
    MERIDIAN_CUDA_CHECK(cudaStreamWaitEvent(current_stream(device_), done_, 0));
  }

 private:
  int device_;
  cudaEvent_t done_;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const Runtime& runtime)
      : rank_(runtime.rank()),
        size_(runtime.size()),
        device_(runtime.device().index()),
        watchdog_(runtime.comm_timeout_s(), watchdog_abort("NCCL", runtime.comm_timeout_s())) {
    if (!runtime.device().is_cuda())
      throw UserError("the NCCL backend needs a CUDA device; this rank runs on " + runtime.device().str());
    DeviceGuard guard(device_);
    ncclUniqueId id;
    if (rank_ == 0) MERIDIAN_NCCL_CHECK(ncclGetUniqueId(&id));
    runtime.broadcast_bytes(&id, sizeof(id), 0);
    const uint64_t wd = watchdog_.begin("ncclCommInitRank (" + std::to_string(size_) + " ranks)");
    MERIDIAN_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    watchdog_.end(wd);
    MERIDIAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    hook_ = add_abort_hook([this] { ncclCommAbort(comm_); });
    thread_ = std::thread([this] { progress(); });
  }

  ~NcclCommunicator() override {
    bool in_flight = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      stop_ = true;
      in_flight = !in_flight_.empty();
    }
    // Destroyed by an exception (an error on this rank) with operations in flight: abort them rather
    // than wait for peers that may never join, so the error reaches main and ends the job now.
    const bool abort = in_flight && std::uncaught_exceptions() > 0;
    if (abort) ncclCommAbort(comm_);
    cv_.notify_all();
    thread_.join();  // waits for the in-flight operations
    remove_abort_hook(hook_);
    if (!abort) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::NCCL; }

  WorkPtr allreduce_async(at::Tensor& tensor, ReduceOp op) override {
    check_tensor(tensor, c10::kCUDA, "allreduce", "input");
    check_reduce(tensor, op, "allreduce");
    const auto type = nccl_type(tensor.scalar_type());
    return launch(describe("allreduce", tensor, to_string(op)), {tensor}, [&] {
      MERIDIAN_NCCL_CHECK(
          ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, nccl_op(op), comm_, stream_));
    });
  }

  WorkPtr broadcast_async(at::Tensor& tensor, int root) override {
    check_tensor(tensor, c10::kCUDA, "broadcast", "input");
    if (root < 0 || root >= size_)
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " out of range");
    const auto type = nccl_type(tensor.scalar_type());
    return launch(describe("broadcast", tensor), {tensor}, [&] {
      MERIDIAN_NCCL_CHECK(
          ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, root, comm_, stream_));
    });
  }

  WorkPtr allgather_async(const at::Tensor& input, at::Tensor& output) override {
    check_tensor(input, c10::kCUDA, "allgather", "input");
    check_tensor(output, c10::kCUDA, "allgather", "output");
    check_split(output, input, size_, "allgather");
    const auto type = nccl_type(input.scalar_type());
    return launch(describe("allgather", input), {input, output}, [&] {
      MERIDIAN_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type, comm_, stream_));
    });
  }

  WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    check_tensor(input, c10::kCUDA, "reduce_scatter", "input");
    check_tensor(output, c10::kCUDA, "reduce_scatter", "output");
    check_split(input, output, size_, "reduce_scatter");
    check_reduce(input, op, "reduce_scatter");
    const auto type = nccl_type(input.scalar_type());
    return launch(describe("reduce_scatter", input, to_string(op)), {input, output}, [&] {
      MERIDIAN_NCCL_CHECK(
          ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), type, nccl_op(op), comm_, stream_));
    });
  }

  WorkPtr barrier_async() override {
    auto token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
    return launch("barrier", {token}, [&] {
      MERIDIAN_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }

 private:
  struct InFlight {
    std::shared_ptr<NcclWork> work;
    std::vector<at::Tensor> keep_alive;  // the caching allocator must not reuse these before completion
    uint64_t watchdog_id;
  };

  // Enqueues one operation on the NCCL stream. Serialised (launch_mu_), so calls from several
  // threads reach NCCL one at a time and in the order they were made. A failure is fatal for the job.
  template <typename Enqueue>
  WorkPtr launch(std::string description, std::vector<at::Tensor> tensors, Enqueue&& enqueue) {
    std::lock_guard<std::mutex> launching(launch_mu_);
    DeviceGuard guard(device_);
    std::shared_ptr<NcclWork> work;
    uint64_t id = 0;
    try {
      cudaEvent_t ready, done;
      MERIDIAN_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      MERIDIAN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      work = std::make_shared<NcclWork>(device_, done);
      MERIDIAN_CUDA_CHECK(cudaEventRecord(ready, current_stream(device_)));
      MERIDIAN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
      cudaEventDestroy(ready);  // destruction is deferred by CUDA until the wait has consumed it
      id = watchdog_.begin(description);
      enqueue();
      MERIDIAN_CUDA_CHECK(cudaEventRecord(done, stream_));
    } catch (const std::exception& e) {
      abort_job(where() + " " + description + " failed: " + e.what(), kExitFatal);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_.push_back(InFlight{work, std::move(tensors), id});
    }
    cv_.notify_one();
    return work;
  }

  void progress() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !in_flight_.empty(); });
      if (in_flight_.empty()) return;
      auto& front = in_flight_.front();
      const cudaError_t state = cudaEventQuery(front.work->event());
      if (state == cudaSuccess) {
        watchdog_.end(front.watchdog_id);
        front.work->mark_done();
        in_flight_.pop_front();
        continue;
      }
      if (state != cudaErrorNotReady) {
        abort_job(where() + " CUDA error while waiting for a collective: " + cudaGetErrorString(state), kExitFatal);
      }
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess) {
        abort_job(where() + " NCCL asynchronous error: " + ncclGetErrorString(async_error) +
                      " (set NCCL_DEBUG=WARN for details). Aborting the job.",
                  kExitFatal);
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
  }

  const int rank_, size_, device_;
  Watchdog watchdog_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int hook_ = 0;
  std::mutex launch_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<InFlight> in_flight_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Runtime& runtime) {
  return std::make_unique<NcclCommunicator>(runtime);
}

}  // namespace meridian::comm::detail

namespace meridian::comm {
std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  const auto text = [](int code) {
    return std::to_string(code / 10000) + "." + std::to_string((code / 100) % 100) + "." + std::to_string(code % 100);
  };
  std::string s = "NCCL " + text(v) + " (loaded";
  if (v != NCCL_VERSION_CODE) s += "; built against " + text(NCCL_VERSION_CODE);
  return s + ")";
}
}  // namespace meridian::comm
