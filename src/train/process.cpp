#include "process.h"

#include <malloc.h>
#include <torch/utils.h>

#include <atomic>
#include <csignal>
#include <cstdint>

#include "meridian/train/trainer.h"

namespace meridian::train {

void seed(uint64_t value) { torch::manual_seed(value); }

namespace {
// Set from a signal handler on whichever thread receives the signal (lock-free: signal-safe).
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
extern "C" void on_stop_signal(int signal) {
  g_signal.store(signal, std::memory_order_relaxed);
  g_stop.store(true, std::memory_order_relaxed);
}
}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // system calls in flight (file reads, sleeps) resume instead of failing
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }
int stop_signal() { return g_signal.load(std::memory_order_relaxed); }

// Every step frees and allocates the same activation buffers again. glibc's defaults return large
// blocks to the kernel (mmap above a threshold that adapts, trimming the heap top), so each step
// page-faults them back in; keeping them in the heap is about 3% of a CPU step (bench train).
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: blocks below 32 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // give the heap top back only beyond 1 GiB free
  mallopt(M_TOP_PAD, 64 << 20);
}

void return_freed_memory() { malloc_trim(0); }

}  // namespace meridian::train
