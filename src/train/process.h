// What a training process sets up outside the loop (private to train; process.cpp): the allocator's
// behaviour for a loop that frees and allocates the same buffers every step. process.cpp also holds
// the public seed(), install_stop_signals() and stop_requested() of trainer.h. Not collective.
#pragma once

namespace meridian::train {

// Every step frees and allocates the same activation buffers again. glibc's defaults return large
// blocks to the kernel (mmap above a threshold that adapts, trimming the heap top), so each step
// page-faults them back in; keeping them in the heap is about 3% of a CPU step (bench train).
void keep_freed_memory();
// Gives the heap's free pages back to the system now (malloc_trim): after set-up (loading weights
// leaves freed buffers below keep_freed_memory's trim threshold), before the steps' peak.
void return_freed_memory();

}  // namespace meridian::train
