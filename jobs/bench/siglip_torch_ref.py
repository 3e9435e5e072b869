#!/usr/bin/env python3
"""The PyTorch DDP (gloo) reference for meridian's SigLIP speed goals, written the way PyTorch users
write such a model: library modules (nn.TransformerEncoder of pre-norm nn.TransformerEncoderLayer,
whose nn.MultiheadAttention runs with need_weights=False), the differentiable all-gather of
torch.distributed.nn, DistributedDataParallel with its defaults, clip_grad_norm_ and the stock
torch.optim.AdamW (two parameter groups: no weight decay on biases, norms, embeddings and the
temperature, as meridian). It is not a mirror of meridian's code (the mirror, siglip_torch_ddp.py,
measured 1.08-1.10x slower than meridian where this one is the bar; it is in git history).

The model is meridian's tiny SigLIP (jobs/configs/ucm-siglip-tiny.yaml): image 128, patch 16,
vision and text width 192, depth 4, 3 heads, MLP 4x, context 32, mean-pooled patches, the text's
last (eos) token, sigmoid loss over the global batch. Batches are random tensors of the prepared
UCM shapes made up front, so the reference never waits for data (meridian reads its dataset).

Start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and GLOO_SOCKET_IFNAME
across nodes): jobs/bench/scaling.sh does it on the virtual cluster, torch-ddp-reference.sh on one
host (ranks pinned one per core). --bf16 runs forward and loss under torch.autocast (cpu, bfloat16).
--fp16-hook registers DDP's stock fp16_compress_hook (gradients reduced in float16, half the bytes:
the PyTorch user's answer to meridian's comm.grad_dtype: bf16).
Rank 0 prints a line per --log-every steps and ends with
  torch_ddp samples/s <global> step_ms <mean> steps <n>
"""

import argparse
import math
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
import torch.nn as nn
import torch.nn.functional as F


class Tower(nn.Module):
    def __init__(self, width, depth, heads, mlp_ratio):
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=int(width * mlp_ratio), dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)

    def forward(self, x, padding=None):
        return self.norm(self.blocks(x, src_key_padding_mask=padding))


class SigLIP(nn.Module):
    def __init__(self, image_size=128, patch=16, width=192, depth=4, heads=3, mlp_ratio=4.0, context=32,
                 vocab=520, embed=192):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, width, patch, stride=patch)
        self.vision_pos = nn.Parameter(torch.randn(1, (image_size // patch) ** 2, width) * 0.02)
        self.vision = Tower(width, depth, heads, mlp_ratio)
        self.vision_proj = nn.Linear(width, embed, bias=False)
        self.token_embed = nn.Embedding(vocab, width)
        self.text_pos = nn.Parameter(torch.randn(1, context, width) * 0.01)
        self.text = Tower(width, depth, heads, mlp_ratio)
        self.text_proj = nn.Linear(width, embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.logit_bias = nn.Parameter(torch.tensor(-10.0))

    def forward(self, images, tokens, lengths):
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.vision_pos
        image = F.normalize(self.vision_proj(self.vision(x).mean(1)), dim=-1)
        t = tokens.size(1)
        padding = torch.arange(t).unsqueeze(0) >= lengths.unsqueeze(1)
        y = self.text(self.token_embed(tokens) + self.text_pos[:, :t], padding)
        text = F.normalize(self.text_proj(y[torch.arange(y.size(0)), lengths - 1]), dim=-1)
        return image, text


def sigmoid_loss(image, text, scale, bias):
    """Local images against every rank's texts (open_clip-style gather with gradient)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    texts = torch.cat(dist_fn.all_gather(text), 0) if world > 1 else text
    logits = image @ texts.t() * scale.exp() + bias
    labels = -torch.ones_like(logits)
    b = image.size(0)
    labels[:, rank * b:(rank + 1) * b] += 2 * torch.eye(b)
    return -F.logsigmoid(labels * logits).sum() / b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="timed steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    ap.add_argument("--vocab", type=int, default=520)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--bf16", action="store_true", help="forward and loss under torch.autocast(cpu, bfloat16)")
    ap.add_argument("--fp16-hook", action="store_true",
                    help="DDP's fp16_compress_hook: gradients reduced in float16")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.threads < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --batch >= 1, --threads >= 1")

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = SigLIP(vocab=args.vocab)
    n_params = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model)
    if args.fp16_hook:
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n or "pos" in n]
    decay = [p for n, p in model.named_parameters() if not (p.ndim < 2 or "embed" in n or "pos" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr)

    g = torch.Generator().manual_seed(1000 + rank)
    batches = []
    for _ in range(4):
        images = torch.rand(args.batch, 3, 128, 128, generator=g) * 2 - 1
        lengths = torch.randint(4, 33, (args.batch,), generator=g)
        tokens = torch.randint(4, args.vocab, (args.batch, 32), generator=g)
        tokens[torch.arange(32).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
        batches.append((images, tokens, lengths))
    if rank == 0:
        print(f"siglip tiny (PyTorch {torch.__version__}, idiomatic): {n_params} parameters, {world} ranks x batch "
              f"{args.batch}, {args.threads} thread(s), warm-up {args.warmup} + {args.steps} timed steps", flush=True)

    times = []
    total = args.warmup + args.steps
    for step in range(total):
        images, tokens, lengths = batches[step % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            image, text = ddp(images, tokens, lengths)
        loss = sigmoid_loss(image.float(), text.float(), model.logit_scale, model.logit_bias)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the logged loss, as every trainer logs it
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
        if rank == 0 and (step % args.log_every == 0 or step + 1 == total):
            print(f"step {step:>4}  loss {mean.item() / world:.4f}  {dt * 1e3:.0f} ms", flush=True)

    elapsed = torch.tensor([sum(times)], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    if rank == 0:
        seconds = elapsed.item()
        print(f"torch_ddp samples/s {args.steps * args.batch * world / seconds:.2f} "
              f"step_ms {seconds / args.steps * 1e3:.1f} steps {args.steps}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
