#!/usr/bin/env python3
"""torch.distributed (gloo) float32 sum all-reduce timings, the reference column of
jobs/bench/comm-nodes.sh. Start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
(and GLOO_SOCKET_IFNAME across nodes). Rank 0 prints, per size:
  gloo allreduce <bytes> <time_us> <busbw GB/s>
time: the slowest rank's mean over --iters calls after --warmup; busbw = bytes * 2 (n - 1) / n / time.
"""
import argparse
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1048576,4194304,16777216", help="bytes, comma-separated")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    for size in (int(s) for s in args.sizes.split(",")):
        t = torch.ones(size // 4)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        mean = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            s = mean.item()
            print(f"gloo allreduce {size} {s * 1e6:.1f} {size * 2 * (n - 1) / n / s / 1e9:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
