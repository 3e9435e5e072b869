// MPI backend: CPU tensors, one progress thread per communicator running operations in order.
//
// Why a thread: Open MPI's nonblocking collectives progress only inside MPI calls, so async work
// needs a thread that drives it. Blocking calls on a dedicated thread are the simplest way to get
// overlap with the caller's compute.
// Why a ring for large sums: Open MPI 4.1's tuned MPI_Allreduce and MPI_Reduce_scatter_block reach
// half the link rate or less over TCP (mpi_ring.h has the figures); sums of at least `ring_bytes`
// (default 256 KiB, env MERIDIAN_MPI_RING_BYTES) of float, double, bfloat16 or half go around a
// ring of point-to-point messages instead. The choice depends only on the operation, so every rank
// makes the same one, and the result does not depend on where ranks run.
// Why segments for the rest: Open MPI 4.1's MPI_Allreduce falls off a cliff on large messages
// (measured here, 2 ranks: ~4-8 GB/s busbw at 1-4 MB, 0.25-0.39 GB/s at 64 MB); reducing in segments
// of a few MB keeps every call in the fast regime. See `meridian bench comm --segment-bytes`.
// How it waits: nonblocking calls tested with sleeps in between once 1 ms has passed (mpi_wait.h), so
// that a waiting rank does not spin on a core it shares; MERIDIAN_MPI_WAIT=block: MPI's blocking calls.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <functional>
#include <thread>

#include "backends.h"
#include "meridian/comm/runtime.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/error.h"
#include "meridian/core/units.h"
#include "mpi_check.h"
#include "mpi_ring.h"
#include "mpi_wait.h"
#include "reduce_kernels.h"
#include "work.h"

namespace meridian::comm::detail {

namespace {

constexpr size_t kDefaultSegmentBytes = 4u << 20;
constexpr size_t kDefaultRingBytes = 256u << 10;
constexpr size_t kRingPieceBytes = 1u << 20;

// --- 16-bit floats: MPI has no bf16/fp16 type, so they travel as MPI_UINT16_T with our own ops that
// widen to float, combine, and round once per combination.
template <typename T, typename F>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  F f;
  for (int i = 0; i < *len; ++i) b[i] = T(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}
struct FSum {
  float operator()(float a, float b) const { return a + b; }
};
struct FMax {
  float operator()(float a, float b) const { return std::max(a, b); }
};
struct FMin {
  float operator()(float a, float b) const { return std::min(a, b); }
};

void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_into_bf16(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in), *len);
}

struct HalfOps {
  MPI_Op bf16[3], fp16[3];  // sum, max, min
  HalfOps() {
    MPI_Op_create(&bf16_sum_op, 1, &bf16[0]);
    MPI_Op_create(&half_op<c10::BFloat16, FMax>, 1, &bf16[1]);
    MPI_Op_create(&half_op<c10::BFloat16, FMin>, 1, &bf16[2]);
    MPI_Op_create(&half_op<c10::Half, FSum>, 1, &fp16[0]);
    MPI_Op_create(&half_op<c10::Half, FMax>, 1, &fp16[1]);
    MPI_Op_create(&half_op<c10::Half, FMin>, 1, &fp16[2]);
  }
};
const HalfOps& half_ops() {
  static HalfOps ops;  // created once, after MPI_Init, never freed (MPI_Finalize releases them)
  return ops;
}

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kBFloat16:
    case at::kHalf:
      return MPI_UINT16_T;
    default:
      throw std::invalid_argument(std::string("MPI backend: unsupported dtype ") + c10::toString(t));
  }
}

// Avg is Sum on the wire, divided after the wait.
MPI_Op mpi_op(at::ScalarType t, ReduceOp op) {
  const int index = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;
  if (t == at::kBFloat16) return half_ops().bf16[index];
  if (t == at::kHalf) return half_ops().fp16[index];
  static const MPI_Op native[3] = {MPI_SUM, MPI_MAX, MPI_MIN};
  return native[index];
}

int checked_count(int64_t n, const char* collective) {
  if (n > INT32_MAX)
    throw std::invalid_argument(std::string(collective) + ": more than 2^31-1 elements per rank in one call");
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const Runtime& runtime, const MpiOptions& options)
      : rank_(runtime.rank()),
        size_(runtime.size()),
        watchdog_(runtime.comm_timeout_s(), watchdog_abort("MPI", runtime.comm_timeout_s())) {
    segment_bytes_ = options.segment_bytes;
    if (segment_bytes_ == 0) {
      const char* env = std::getenv("MERIDIAN_MPI_SEGMENT_BYTES");
      segment_bytes_ = env && *env ? parse_bytes(env, "MERIDIAN_MPI_SEGMENT_BYTES") : kDefaultSegmentBytes;
    }
    // Whole elements of any dtype, and counts that fit MPI's int.
    segment_bytes_ = std::clamp<uint64_t>(segment_bytes_, 64, uint64_t(1) << 30);
    const char* ring_env = std::getenv("MERIDIAN_MPI_RING_BYTES");
    ring_bytes_ = options.ring_bytes      ? *options.ring_bytes
                  : ring_env && *ring_env ? parse_bytes(ring_env, "MERIDIAN_MPI_RING_BYTES")
                                          : kDefaultRingBytes;
    half_ops();
    MERIDIAN_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MERIDIAN_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    // MERIDIAN_MPI_WAIT, read here on the caller's thread (a bad value is a UserError), and the same
    // on every rank: a nonblocking collective never matches a blocking one, mixed modes would hang.
    const int poll = poll_waits() ? 1 : 0;
    int modes[2] = {poll, -poll};
    MERIDIAN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, modes, 2, MPI_INT, MPI_MAX, comm_));
    if (modes[0] != -modes[1])
      throw UserError(
          "MERIDIAN_MPI_WAIT differs between ranks (poll on some, block on others): set it the same on "
          "every rank (mpirun -x MERIDIAN_MPI_WAIT=block), or on none (poll)");
    ring_ = std::make_unique<MpiRing>(comm_, rank_, size_, std::min<size_t>(segment_bytes_, kRingPieceBytes));
    thread_ = std::thread([this] { progress(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      // Destroyed by an exception (an error on this rank): operations not yet started are dropped
      // rather than run, so the error reaches main and ends the job now instead of waiting for peers
      // that may never join; the one already running completes or is ended by the watchdog.
      if (std::uncaught_exceptions() > 0) queue_.clear();
    }
    cv_.notify_all();
    thread_.join();  // runs the queued operations first
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::MPI; }

  WorkPtr allreduce_async(at::Tensor& tensor, ReduceOp op) override { return enqueue(allreduce_task(tensor, op)); }
  WorkPtr broadcast_async(at::Tensor& tensor, int root) override { return enqueue(broadcast_task(tensor, root)); }
  WorkPtr allgather_async(const at::Tensor& input, at::Tensor& output) override {
    return enqueue(allgather_task(input, output));
  }
  WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    return enqueue(reduce_scatter_task(input, output, op));
  }
  WorkPtr barrier_async() override { return enqueue(barrier_task()); }

  void allreduce(at::Tensor& tensor, ReduceOp op) override { run_blocking(allreduce_task(tensor, op)); }
  void broadcast(at::Tensor& tensor, int root) override { run_blocking(broadcast_task(tensor, root)); }
  void allgather(const at::Tensor& input, at::Tensor& output) override { run_blocking(allgather_task(input, output)); }
  void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    run_blocking(reduce_scatter_task(input, output, op));
  }
  void barrier() override { run_blocking(barrier_task()); }

 private:
  struct Task {
    std::string description;
    std::function<void()> run;
    std::shared_ptr<CompletionWork> work;
  };

  // Each *_task validates its arguments on the caller's thread (std::invalid_argument, before any
  // communication) and returns the operation, ready to run on either thread.
  Task allreduce_task(at::Tensor& tensor, ReduceOp op) {
    check_tensor(tensor, c10::kCPU, "allreduce", "input");
    check_reduce(tensor, op, "allreduce");
    const MPI_Datatype type = mpi_type(tensor.scalar_type());
    const MPI_Op mop = mpi_op(tensor.scalar_type(), op);
    if (use_ring(tensor, op))
      return {describe("allreduce", tensor, to_string(op)),
              [this, tensor, op]() mutable {
                ring_->allreduce(tensor.data_ptr(), tensor.numel(), tensor.scalar_type());
                if (op == ReduceOp::Avg) tensor.div_(size_);
              },
              nullptr};
    return {describe("allreduce", tensor, to_string(op)),
            [this, tensor, op, type, mop]() mutable {
              const int64_t elem = tensor.element_size();
              const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(segment_bytes_) / elem);
              char* base = static_cast<char*>(tensor.data_ptr());
              for (int64_t off = 0; off < tensor.numel(); off += step) {
                const int n = static_cast<int>(std::min(step, tensor.numel() - off));
                detail::allreduce(base + off * elem, n, type, mop, comm_);
              }
              if (op == ReduceOp::Avg) tensor.div_(size_);
            },
            nullptr};
  }

  Task broadcast_task(at::Tensor& tensor, int root) {
    check_tensor(tensor, c10::kCPU, "broadcast", "input");
    if (root < 0 || root >= size_)
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " out of range");
    return {describe("broadcast", tensor, ("root " + std::to_string(root)).c_str()),
            [this, tensor, root]() {
              const size_t bytes = tensor.numel() * tensor.element_size();
              char* base = static_cast<char*>(tensor.data_ptr());
              const size_t step = std::min<size_t>(segment_bytes_ * 4, INT32_MAX);
              for (size_t off = 0; off < bytes; off += step) {
                const int n = static_cast<int>(std::min(step, bytes - off));
                detail::broadcast(base + off, n, MPI_BYTE, root, comm_);
              }
            },
            nullptr};
  }

  Task allgather_task(const at::Tensor& input, at::Tensor& output) {
    check_tensor(input, c10::kCPU, "allgather", "input");
    check_tensor(output, c10::kCPU, "allgather", "output");
    check_split(output, input, size_, "allgather");
    const int n = checked_count(input.numel(), "allgather");
    const MPI_Datatype type = mpi_type(input.scalar_type());
    return {
        describe("allgather", input),
        [this, input, output, n, type]() { detail::allgather(input.data_ptr(), n, type, output.data_ptr(), comm_); },
        nullptr};
  }

  Task reduce_scatter_task(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
    check_tensor(input, c10::kCPU, "reduce_scatter", "input");
    check_tensor(output, c10::kCPU, "reduce_scatter", "output");
    check_split(input, output, size_, "reduce_scatter");
    check_reduce(input, op, "reduce_scatter");
    const int n = checked_count(output.numel(), "reduce_scatter");
    const MPI_Datatype type = mpi_type(input.scalar_type());
    const MPI_Op mop = mpi_op(input.scalar_type(), op);
    if (use_ring(input, op))
      return {describe("reduce_scatter", input, to_string(op)),
              [this, input, output, op]() mutable {
                ring_->reduce_scatter(input.data_ptr(), output.data_ptr(), output.numel(), input.scalar_type());
                if (op == ReduceOp::Avg) output.div_(size_);
              },
              nullptr};
    return {describe("reduce_scatter", input, to_string(op)),
            [this, input, output, n, type, mop, op]() mutable {
              detail::reduce_scatter_block(input.data_ptr(), output.data_ptr(), n, type, mop, comm_);
              if (op == ReduceOp::Avg) output.div_(size_);
            },
            nullptr};
  }

  bool use_ring(const at::Tensor& t, ReduceOp op) const {
    return size_ > 1 && (op == ReduceOp::Sum || op == ReduceOp::Avg) && has_sum_kernel(t.scalar_type()) &&
           size_t(t.numel()) * t.element_size() >= ring_bytes_;
  }

  Task barrier_task() {
    return {"barrier", [this]() { detail::barrier(comm_); }, nullptr};
  }

  WorkPtr enqueue(Task task) {
    task.work = std::make_shared<CompletionWork>();
    WorkPtr work = task.work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return work;
  }

  // Runs `task` on the calling thread when no operation is queued or running (in order, since the
  // progress thread only takes a task while holding exec_mu_); otherwise queues it and waits.
  void run_blocking(Task task) {
    std::unique_lock<std::mutex> exec(exec_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    if (queue_.empty()) {
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      execute(task);
      add_blocked(std::chrono::steady_clock::now() - t0);
      return;
    }
    // Operations are queued: this one goes behind them, and we wait holding no lock.
    task.work = std::make_shared<CompletionWork>();
    WorkPtr work = task.work;
    queue_.push_back(std::move(task));
    lock.unlock();
    exec.unlock();
    cv_.notify_one();
    work->wait();
  }

  // Runs one operation under the watchdog; a failure is fatal for the job.
  void execute(Task& task) {
    const uint64_t id = watchdog_.begin(task.description);
    try {
      task.run();
    } catch (const std::exception& e) {
      abort_job(where() + " " + task.description + " failed: " + e.what(), kExitFatal);
    }
    watchdog_.end(id);
  }

  void progress() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
      }
      std::lock_guard<std::mutex> exec(exec_mu_);
      Task task;
      {
        std::lock_guard<std::mutex> lock(mu_);
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      execute(task);
      task.work->mark_done();
    }
  }

  const int rank_, size_;
  size_t segment_bytes_, ring_bytes_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<MpiRing> ring_;
  Watchdog watchdog_;
  std::mutex exec_mu_;  // held while an operation runs, on either thread
  std::mutex mu_;       // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const Runtime& runtime, const MpiOptions& options) {
  return std::make_unique<MpiCommunicator>(runtime, options);
}

void raw_mpi_collective(const std::string& collective, at::Tensor& input, at::Tensor& output, ReduceOp op) {
  const MPI_Datatype type = mpi_type(input.scalar_type());
  if (collective == "allreduce") {
    MERIDIAN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, input.data_ptr(), checked_count(input.numel(), "allreduce"), type,
                                     mpi_op(input.scalar_type(), op), MPI_COMM_WORLD));
  } else if (collective == "broadcast") {
    MERIDIAN_MPI_CHECK(MPI_Bcast(input.data_ptr(), checked_count(input.numel(), "broadcast"), type, 0, MPI_COMM_WORLD));
  } else if (collective == "allgather") {
    const int n = checked_count(input.numel(), "allgather");
    MERIDIAN_MPI_CHECK(MPI_Allgather(input.data_ptr(), n, type, output.data_ptr(), n, type, MPI_COMM_WORLD));
  } else if (collective == "reduce_scatter") {
    MERIDIAN_MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(),
                                                checked_count(output.numel(), "reduce_scatter"), type,
                                                mpi_op(input.scalar_type(), op), MPI_COMM_WORLD));
  } else {
    throw std::invalid_argument("raw_mpi_collective: unknown collective " + collective);
  }
}

}  // namespace meridian::comm::detail
