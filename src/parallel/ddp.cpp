#include "meridian/parallel/ddp.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/core/trace.h"

namespace meridian::parallel {

namespace {
using Clock = std::chrono::steady_clock;

std::string describe(const std::string& name, const at::Tensor& p) {
  std::ostringstream os;
  os << name << " " << p.sizes() << " " << c10::toString(p.scalar_type());
  return os.str();
}

}  // namespace

struct DistributedDataParallel::Impl {
  struct Slot {
    std::string name;
    at::Tensor param;
    int64_t bucket = 0, offset = 0, numel = 0;
    bool ready = false;
  };
  struct Bucket {
    at::Tensor buffer;  // flat, comm dtype, on the parameters' device
    std::vector<size_t> slots;
    size_t pending = 0;
    bool full = false;
    comm::WorkPtr work;
    Clock::time_point launched;
  };

  const comm::Runtime& rt;
  comm::Communicator& comm;
  std::shared_ptr<torch::nn::Module> module;
  DdpOptions o;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  size_t next_launch = 0;
  bool sync = true;
  core::Trace* trace = nullptr;
  double last_wait = 0;
  std::vector<unsigned> hook_ids;
  // Gradients as views into the bucket buffers (float32 communication): autograd accumulates
  // straight into the bucket, a post-accumulation hook marks it ready, and the average is computed in
  // place, so no copy in and no copy out. The accumulators are kept alive here (a parameter holds
  // only a weak reference) and their hooks find us through `alive`, cleared when we go away.
  bool views = false;
  bool pre_divide = false;  // float16 buckets: divided by the world size before the sum
  // The accumulator's handle type is LibTorch's: std::shared_ptr<Node> up to 2.10 (the cu128 track),
  // c10::intrusive_ptr<Node> later (cu13).
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<AccumulatorPtr> accumulators;
  std::vector<uintptr_t> post_hook_keys;
  std::shared_ptr<Impl*> alive;

  Impl(const comm::Runtime& r, comm::Communicator& c, std::shared_ptr<torch::nn::Module> m, const DdpOptions& opts)
      : rt(r), comm(c), module(std::move(m)), o(opts) {}

  void check_same_model() {
    std::string text;  // every parameter, trainable or frozen, and every buffer
    for (const auto& item : module->named_parameters(true))
      text += describe(item.key(), item.value()) + (item.value().requires_grad() ? "\n" : " frozen\n");
    for (const auto& item : module->named_buffers(true)) text += describe(item.key(), item.value()) + " buffer\n";
    const auto hashes = rt.allgather(std::to_string(fnv1a(text.data(), text.size())));
    bool same = true;
    for (const auto& h : hashes) same = same && h == hashes[0];
    if (same) return;
    // Name the first difference of every rank that differs from rank 0 (same message everywhere).
    const auto texts = rt.allgather(text);
    const auto hosts = rt.allgather(rt.host());
    const auto lines = [](const std::string& t) {
      std::vector<std::string> v;
      std::stringstream ss(t);
      for (std::string l; std::getline(ss, l);) v.push_back(l);
      return v;
    };
    const auto ref = lines(texts[0]);
    std::string message = "the model differs between ranks:";
    for (int r = 1; r < rt.size(); ++r) {
      if (hashes[r] == hashes[0]) continue;
      const auto mine = lines(texts[r]);
      size_t i = 0;
      while (i < mine.size() && i < ref.size() && mine[i] == ref[i]) ++i;
      message += " rank " + std::to_string(r) + " on " + hosts[r] + " has ";
      message += i < mine.size() ? "'" + mine[i] + "'" : "no more parameters";
      message +=
          " where rank 0 on " + hosts[0] + " has " + (i < ref.size() ? "'" + ref[i] + "'" : "no more parameters") + ";";
    }
    throw UserError(message);
  }

  void build_buckets() {
    const auto dtype = o.communication_dtype;
    const int64_t elem = c10::elementSize(dtype);
    int64_t cap = int64_t(o.first_bucket_mb * (1 << 20));
    Bucket current;
    int64_t bytes = 0;
    const auto close_bucket = [&]() {
      if (current.slots.empty()) return;
      int64_t numel = 0;
      for (size_t i : current.slots)
        slots[i].bucket = int64_t(buckets.size()), slots[i].offset = numel, numel += slots[i].numel;
      current.buffer = at::zeros({numel}, slots[current.slots[0]].param.options().dtype(dtype));
      buckets.push_back(std::move(current));
      current = Bucket{};
      bytes = 0;
      cap = int64_t(o.bucket_mb * (1 << 20));
    };
    for (size_t k = slots.size(); k-- > 0;) {  // reverse registration order
      current.slots.push_back(k);
      bytes += slots[k].numel * elem;
      if (bytes >= cap) close_bucket();
    }
    close_bucket();
    for (auto& b : buckets) b.pending = b.slots.size();
  }

  // The slot's part of its bucket as a tensor of the parameter's shape sharing the bucket's storage.
  // Not an autograd view (set_ rather than view()), because LibTorch's Optimizer::zero_grad calls
  // detach_() on gradients, which views refuse.
  at::Tensor view_of(const Slot& s) {
    const at::Tensor& buffer = buckets[s.bucket].buffer;
    std::vector<int64_t> strides(s.param.dim(), 1);
    for (int64_t d = s.param.dim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * s.param.size(d + 1);
    at::NoGradGuard no_grad;
    at::Tensor t = at::empty({0}, buffer.options());
    t.set_(buffer.storage(), buffer.storage_offset() + s.offset, s.param.sizes(), strides);
    return t;
  }

  // Makes the parameter's .grad the bucket view again, keeping its value (after zero_grad set it to
  // none, autograd made a fresh tensor: one copy brings it back).
  void adopt_grad(Slot& s) {
    at::NoGradGuard no_grad;
    at::Tensor view = view_of(s);
    const at::Tensor& grad = s.param.grad();
    if (grad.defined() && grad.data_ptr() == view.data_ptr()) return;
    if (grad.defined())
      view.copy_(grad);
    else
      view.zero_();
    s.param.mutable_grad() = view;
  }

  // View mode: called after autograd accumulated this step's gradient into the parameter's .grad.
  void on_accumulated(size_t i) {
    if (!sync) return;
    if (slots[i].ready)
      throw UserError(
          "DistributedDataParallel: parameter '" + slots[i].name +
          "' received a second gradient before "
          "finish() (two backward passes in one synchronised step; use set_sync(false) for all but the last)");
    adopt_grad(slots[i]);
    mark_ready(i);
  }

  // Copy mode (bf16 communication): called by autograd with the parameter's gradient before it is
  // accumulated into .grad.
  void on_grad(size_t i, const at::Tensor& grad) {
    if (!sync) return;
    Slot& s = slots[i];
    if (s.ready)
      throw UserError("DistributedDataParallel: parameter '" + s.name +
                      "' received a second gradient before finish() "
                      "(two backward passes in one synchronised step; use set_sync(false) for all but the last)");
    at::NoGradGuard no_grad;
    const at::Tensor& accumulated = s.param.grad();  // micro-steps without sync accumulate here
    at::Tensor total = accumulated.defined() ? accumulated + grad : grad;
    buckets[s.bucket].buffer.narrow(0, s.offset, s.numel).copy_(total.reshape({-1}));
    mark_ready(i);
  }

  void mark_ready(size_t i) {
    Slot& s = slots[i];
    s.ready = true;
    Bucket& b = buckets[s.bucket];
    if (--b.pending == 0) b.full = true;
    if (o.overlap) launch_ready();
  }

  // Buckets go out strictly in index order, so every rank issues the same collectives in the same
  // order even if gradients arrive in a different order.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].full) {
      Bucket& b = buckets[next_launch++];
      b.launched = Clock::now();
      // float16 on the wire: each rank's share divided before the sum, as DDP's fp16_compress_hook
      // does (a sum of N loss-scaled gradients would overflow float16 N times sooner).
      if (pre_divide) b.buffer.mul_(1.0 / rt.size());
      b.work = comm.allreduce_async(b.buffer, comm::ReduceOp::Sum);
    }
  }

  void finish() {
    if (!sync) return;
    bool any = false;
    for (const auto& s : slots) any = any || s.ready;
    if (!any)  // decided locally, but every rank runs the same program
      throw UserError("DistributedDataParallel::finish() without a backward pass since the last finish()");
    // Parameters without a gradient this step: their share is their accumulated gradient or zero,
    // so the collectives still match across ranks.
    std::vector<std::string> unused;
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].ready) continue;
        unused.push_back(slots[i].name);
        if (views) {
          adopt_grad(slots[i]);
        } else {
          auto dst = buckets[slots[i].bucket].buffer.narrow(0, slots[i].offset, slots[i].numel);
          const at::Tensor& g = slots[i].param.grad();
          if (g.defined())
            dst.copy_(g.reshape({-1}));
          else
            dst.zero_();
        }
        mark_ready(i);
      }
    }
    launch_ready();
    const auto t0 = Clock::now();
    for (size_t k = 0; k < buckets.size(); ++k) {
      auto& b = buckets[k];
      b.work->wait();
      if (trace && b.work->is_completed())  // NCCL's wait() does not wait for completion: unknown yet
        trace->span("allreduce bucket " + std::to_string(k), "comm", b.launched, b.work->completed_at(), "comm");
    }
    const auto t1 = Clock::now();
    last_wait = std::chrono::duration<double>(t1 - t0).count();
    if (trace) trace->span("wait for gradients", "wait", t0, t1, "compute");
    // Unused parameters are an error unless asked for, decided together so no rank hangs.
    const auto all_unused = rt.allgather(unused.empty() ? "" : describe_list(unused));
    reset();
    if (!o.find_unused_parameters) {
      std::string message;
      for (int r = 0; r < rt.size(); ++r)
        if (!all_unused[r].empty()) message += " rank " + std::to_string(r) + ": " + all_unused[r] + ";";
      if (!message.empty())
        throw UserError(
            "parameters received no gradient in this step (pass find_unused_parameters if that is "
            "intended):" +
            message);
    }
    // Only now, after the wait, the average (float16 buckets: divided before the sum).
    at::NoGradGuard no_grad;
    const double scale = pre_divide ? 1.0 : 1.0 / rt.size();
    if (views) {
      for (auto& b : buckets) b.buffer.mul_(scale);  // in place: every .grad is a view of it
      return;
    }
    for (auto& s : slots) {
      const auto sum = buckets[s.bucket].buffer.narrow(0, s.offset, s.numel).view(s.param.sizes());
      at::Tensor& grad = s.param.mutable_grad();
      if (!grad.defined()) grad = at::empty_like(s.param);
      at::mul_out(grad, sum, at::scalar_tensor(scale, sum.options()));  // one pass, no temporary
    }
  }

  static std::string describe_list(const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
    return s;
  }

  void reset() {
    for (auto& s : slots) s.ready = false;
    for (auto& b : buckets) b.pending = b.slots.size(), b.full = false, b.work.reset();
    next_launch = 0;
  }
};

void broadcast_module(comm::Communicator& comm, torch::nn::Module& module) {
  // Every parameter (frozen ones too: rank 0's pretrained backbone must reach everyone) and every
  // buffer; through a contiguous copy where needed.
  at::NoGradGuard no_grad;
  const auto broadcast = [&](const at::Tensor& t) {
    at::Tensor data = t.data();
    if (data.is_contiguous()) return comm.broadcast(data, 0);
    at::Tensor copy = data.contiguous();
    comm.broadcast(copy, 0);
    data.copy_(copy);
  };
  for (const auto& p : module.parameters(true)) broadcast(p);
  for (const auto& b : module.buffers(true)) broadcast(b);
}

void average_buffers(comm::Communicator& comm, torch::nn::Module& module) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> buffers;
  for (const auto& b : module.buffers(true))
    if (c10::isFloatingType(b.scalar_type())) buffers.push_back(b);
  if (buffers.empty() || comm.size() == 1) return;
  // In double: the mean of W identical float32 (or float64 up to rounding) values is that value, so
  // statistics that are already equal (SyncBatchNorm) stay bit-identical.
  std::vector<at::Tensor> flat;
  for (const auto& b : buffers) flat.push_back(b.detach().reshape({-1}).to(at::kDouble));
  at::Tensor all = at::cat(flat);
  comm.allreduce(all, comm::ReduceOp::Avg);
  int64_t at = 0;
  for (auto& b : buffers) {
    b.detach().copy_(all.narrow(0, at, b.numel()).view(b.sizes()));
    at += b.numel();
  }
}

DistributedDataParallel::DistributedDataParallel(const comm::Runtime& runtime, comm::Communicator& comm,
                                                 std::shared_ptr<torch::nn::Module> module, const DdpOptions& options)
    : impl_(std::make_unique<Impl>(runtime, comm, std::move(module), options)) {
  if (options.bucket_mb <= 0 || options.first_bucket_mb <= 0) throw UserError("bucket sizes must be positive");
  auto& m = *impl_;
  for (const auto& item : m.module->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    if (item.value().scalar_type() != at::kFloat)
      throw UserError("DistributedDataParallel: parameter '" + item.key() + "' is " +
                      c10::toString(item.value().scalar_type()) + "; float32 parameters expected");
    m.slots.push_back({item.key(), item.value(), 0, 0, item.value().numel(), false});
  }
  if (m.slots.empty()) throw UserError("DistributedDataParallel: the module has no trainable parameters");
  m.check_same_model();
  broadcast_module(comm, *m.module);
  m.build_buckets();
  m.views = options.communication_dtype == at::kFloat;
  m.pre_divide = options.communication_dtype == at::kHalf;
  m.alive = std::make_shared<Impl*>(impl_.get());
  for (size_t i = 0; i < m.slots.size(); ++i) {
    if (m.views) {
      m.adopt_grad(m.slots[i]);
      auto accumulator = torch::autograd::impl::grad_accumulator(m.slots[i].param);
      std::weak_ptr<Impl*> alive = m.alive;
      m.post_hook_keys.push_back(accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [alive, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (auto self = alive.lock()) (*self)->on_accumulated(i);
            return outputs;
          })));
      m.accumulators.push_back(std::move(accumulator));
    } else {
      Impl* self = impl_.get();
      m.hook_ids.push_back(
          m.slots[i].param.register_hook([self, i](const at::Tensor& grad) { self->on_grad(i, grad); }));
    }
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  impl_->alive.reset();  // hooks that outlive us find nothing
  for (size_t i = 0; i < impl_->accumulators.size(); ++i)
    impl_->accumulators[i]->del_post_hook(impl_->post_hook_keys[i]);
  for (size_t i = 0; i < impl_->slots.size() && i < impl_->hook_ids.size(); ++i)
    impl_->slots[i].param.remove_hook(impl_->hook_ids[i]);
  // In-flight reductions keep their buffers alive (the Work holds them); wait for them unless we are
  // unwinding an error, where peers may never join (the job is ending).
  if (std::uncaught_exceptions() == 0)
    for (auto& b : impl_->buckets)
      if (b.work) b.work->wait();
  if (impl_->views) {
    // Leave each parameter a gradient of its own, not a part of our buffers.
    at::NoGradGuard no_grad;
    for (auto& s : impl_->slots)
      if (s.param.grad().defined()) s.param.mutable_grad() = s.param.grad().clone();
  }
}

void DistributedDataParallel::set_sync(bool sync) { impl_->sync = sync; }
void DistributedDataParallel::finish() { impl_->finish(); }
void DistributedDataParallel::set_trace(core::Trace* trace) { impl_->trace = trace; }
int64_t DistributedDataParallel::bucket_count() const { return int64_t(impl_->buckets.size()); }
double DistributedDataParallel::last_wait_s() const { return impl_->last_wait; }

at::Tensor grad_norm(const std::vector<at::Tensor>& parameters) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> squares;
  for (const auto& p : parameters)
    if (p.grad().defined()) squares.push_back(p.grad().to(at::kDouble).pow(2).sum());
  if (squares.empty()) {
    const auto device = parameters.empty() ? c10::Device(c10::kCPU) : parameters.front().device();
    return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  }
  return at::stack(squares).sum().sqrt();
}

void clip_gradients(const std::vector<at::Tensor>& parameters, double norm, double max_norm) {
  at::NoGradGuard no_grad;
  if (norm > max_norm && norm > 0 && std::isfinite(norm))
    for (const auto& p : parameters)
      if (p.grad().defined()) p.grad().mul_(max_norm / (norm + 1e-6));
}

double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm) {
  const double norm = grad_norm(parameters).item<double>();
  clip_gradients(parameters, norm, max_norm);
  return norm;
}

namespace {
// Uneven counts travel padded to the largest: every rank's rows at r x max in the wire layout.
class AllGatherFunction : public torch::autograd::Function<AllGatherFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& local, int64_t comm_address,
                            std::vector<int64_t> counts) {
    auto* comm = reinterpret_cast<comm::Communicator*>(comm_address);
    if (counts.empty()) counts.assign(size_t(comm->size()), local.size(0));
    MERIDIAN_CHECK(int64_t(counts.size()) == comm->size() && counts[size_t(comm->rank())] == local.size(0),
                   "all_gather_with_grad: counts do not match the ranks or this rank's rows");
    const int64_t widest = *std::max_element(counts.begin(), counts.end());
    ctx->saved_data["comm"] = comm_address;
    ctx->saved_data["counts"] = counts;
    at::Tensor in = local.contiguous();
    if (widest > in.size(0)) {
      std::vector<int64_t> pad_shape = in.sizes().vec();
      pad_shape[0] = widest - in.size(0);
      in = at::cat({in, at::zeros(pad_shape, in.options())});
    }
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] *= comm->size();
    at::Tensor out = at::empty(shape, in.options());
    comm->allgather(in, out);
    if (std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == widest; })) return out;
    std::vector<at::Tensor> parts;
    for (size_t r = 0; r < counts.size(); ++r) parts.push_back(out.narrow(0, int64_t(r) * widest, counts[r]));
    return at::cat(parts);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const int64_t widest = *std::max_element(counts.begin(), counts.end());
    at::Tensor g = grads[0].contiguous();
    std::vector<int64_t> shape = g.sizes().vec();
    if (!std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == widest; })) {
      shape[0] = widest * int64_t(counts.size());
      at::Tensor padded = at::zeros(shape, g.options());
      int64_t from = 0;
      for (size_t r = 0; r < counts.size(); ++r) {
        padded.narrow(0, int64_t(r) * widest, counts[r]).copy_(g.narrow(0, from, counts[r]));
        from += counts[r];
      }
      g = padded;
    }
    shape[0] = widest;
    at::Tensor mine = at::empty(shape, g.options());
    comm->reduce_scatter(g, mine, comm::ReduceOp::Sum);  // my slice's gradient, summed over ranks
    return {mine.narrow(0, 0, counts[size_t(comm->rank())]), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor all_gather_with_grad(comm::Communicator& comm, const at::Tensor& local, const std::vector<int64_t>& counts) {
  return AllGatherFunction::apply(local, reinterpret_cast<int64_t>(&comm), counts);
}

}  // namespace meridian::parallel
