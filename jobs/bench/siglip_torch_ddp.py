#!/usr/bin/env python3
"""PyTorch DDP (gloo) reference for meridian's SigLIP training step, for the speed goal
"meridian >= 1.1x PyTorch DDP (gloo), 2 ranks x 1 thread, batch 32 per rank, float32".

Mirrors, module by module, src/models/siglip.cpp (model), src/parallel/ddp.cpp
(all_gather_with_grad, clip_grad_norm) and src/train/trainer.cpp + src/tasks/siglip_task.cpp (one training step):

  images uint8 [B, S, S, 3] -> float NCHW in [-1, 1]; encode_images; encode_text;
  siglip_loss (local images vs every rank's texts, differentiable all-gather on its own group);
  backward; DDP average; clip_grad_norm 1.0; AdamW (lr 5e-4, weight decay 1e-4, warmup 10 then
  cosine to 1e-5); loss averaged over ranks and read back (as the C++ logs it every step).

Data is random and generated up front (a few batches, cycled), so this measures model plus
communication, not I/O. Start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (jobs/bench/torch-ddp-reference.sh does it); torch.distributed.run from Debian's
python3-torch 1.13 fails on Python 3.11.

Rank 0 ends with one machine-readable line:
  torch_ddp samples/s <global> step_ms <mean> steps <n>
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# jobs/configs/siglip-tiny.yaml (and the SiglipConfig / TrainSettings defaults).
TINY = dict(image_size=128, patch=16, vision=dict(width=192, depth=4, heads=3, mlp_ratio=4.0),
            context_length=32, vocab_size=8000, text=dict(width=192, depth=4, heads=3, mlp_ratio=4.0),
            embed=192, pad_id=0)
TRAIN = dict(lr=5e-4, min_lr=1e-5, weight_decay=1e-4, clip=1.0, warmup=10)


class Block(nn.Module):
    """BlockImpl: pre-norm, fused qkv Linear, explicit softmax attention, GELU (exact) MLP."""

    def __init__(self, width, heads, mlp_ratio):
        super().__init__()
        self.heads = heads
        hidden = max(1, int(round(width * mlp_ratio)))  # std::llround
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x, key_padding=None):
        b, t, w = x.shape
        d = w // self.heads
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)  # [3, B, H, T, D]
        scores = torch.matmul(qkv[0], qkv[1].transpose(-2, -1)) / math.sqrt(d)  # [B, H, T, T]
        if key_padding is not None:
            scores = scores.masked_fill(key_padding.view(b, 1, 1, t), -1e9)
        attn = torch.matmul(torch.softmax(scores, -1), qkv[2]).transpose(1, 2).reshape(b, t, w)
        y = x + self.proj(attn)
        return y + self.fc2(F.gelu(self.fc1(self.ln2(y))))


class Siglip(nn.Module):
    """SiglipImpl. Parameter set and shapes identical; only the registration order differs (Python
    lists a module's own parameters before its submodules'), which DDP's bucket order ignores
    after the first iteration anyway (it rebuilds buckets in gradient-ready order)."""

    def __init__(self, c):
        super().__init__()
        v, tx = c["vision"], c["text"]
        grid = c["image_size"] // c["patch"]
        self.patch_embed = nn.Conv2d(3, v["width"], c["patch"], stride=c["patch"])
        self.vision_pos = nn.Parameter(torch.randn(1, grid * grid, v["width"]) * 0.02)
        self.vision_blocks = nn.ModuleList(Block(v["width"], v["heads"], v["mlp_ratio"]) for _ in range(v["depth"]))
        self.vision_ln = nn.LayerNorm(v["width"])
        self.vision_proj = nn.Linear(v["width"], c["embed"], bias=False)
        self.token_embed = nn.Embedding(c["vocab_size"], tx["width"])
        self.text_pos = nn.Parameter(torch.randn(1, c["context_length"], tx["width"]) * 0.01)
        self.text_blocks = nn.ModuleList(Block(tx["width"], tx["heads"], tx["mlp_ratio"]) for _ in range(tx["depth"]))
        self.text_ln = nn.LayerNorm(tx["width"])
        self.text_proj = nn.Linear(tx["width"], c["embed"], bias=False)
        self.logit_scale = nn.Parameter(torch.full((1,), math.log(10.0)))
        self.logit_bias = nn.Parameter(torch.full((1,), -10.0))

    def encode_images(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.vision_pos  # [B, P, W]
        for block in self.vision_blocks:
            x = block(x)
        x = self.vision_ln(x).mean(1)  # mean-pooled patches (no class token)
        return F.normalize(self.vision_proj(x), dim=-1)

    def encode_text(self, tokens, lengths):
        b, t = tokens.shape
        x = self.token_embed(tokens) + self.text_pos.narrow(1, 0, t)
        positions = torch.arange(t, dtype=torch.long).unsqueeze(0)
        padding = positions >= lengths.long().unsqueeze(1)  # [B, T], true = ignore
        for block in self.text_blocks:
            x = block(x, padding)
        x = self.text_ln(x)
        last = (lengths.long() - 1).clamp_min(0).view(b, 1, 1).expand(b, 1, x.size(2))
        x = x.gather(1, last).squeeze(1)  # the eos token
        return F.normalize(self.text_proj(x), dim=-1)

    def forward(self, images, tokens, lengths):
        # One forward through DDP's wrapper so its reducer sees the whole step's graph.
        return self.encode_images(images), self.encode_text(tokens, lengths), self.logit_scale, self.logit_bias


class AllGatherWithGrad(torch.autograd.Function):
    """parallel::all_gather_with_grad: forward all-gathers the rows in rank order; backward gives
    each rank its slice of the gradient summed over ranks (reduce-scatter; gloo has none, so
    all-reduce and slice: the tensor is [N b, E], a few tens of KB)."""

    @staticmethod
    def forward(ctx, local, group):
        ctx.group = group
        ctx.rows = local.size(0)
        local = local.contiguous()
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, local, group=group)
        return torch.cat(parts, 0)

    @staticmethod
    def backward(ctx, grad):
        g = grad.contiguous().clone()
        dist.all_reduce(g, op=dist.ReduceOp.SUM, group=ctx.group)
        r = dist.get_rank(ctx.group)
        return g.narrow(0, r * ctx.rows, ctx.rows).contiguous(), None


def siglip_loss(image_emb, text_emb, scale, bias, group):
    if text_emb.dtype in (torch.bfloat16, torch.float16):  # --bf16: the loss (and the gather) in float32
        image_emb, text_emb = image_emb.float(), text_emb.float()
    b = image_emb.size(0)
    texts = AllGatherWithGrad.apply(text_emb, group) if group is not None else text_emb
    first = dist.get_rank(group) * b if group is not None else 0
    logits = torch.matmul(image_emb, texts.t()) * scale.exp() + bias  # [b, N b]
    labels = -torch.ones_like(logits)
    labels.narrow(1, first, b).fill_diagonal_(1.0)
    return -F.logsigmoid(labels * logits).sum() / b


def image_input(images):
    # uint8 [B, S, S, 3] -> float [B, 3, S, S] in [-1, 1] (the size already matches: no resize).
    return images.permute(0, 3, 1, 2).to(torch.float32).div_(127.5).sub_(1.0).contiguous()


def learning_rate(step, total):
    lr, min_lr, warmup = TRAIN["lr"], TRAIN["min_lr"], TRAIN["warmup"]
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def make_batches(n, batch, c, seed):
    g = torch.Generator().manual_seed(seed)
    s, L = c["image_size"], c["context_length"]
    out = []
    for _ in range(n):
        images = torch.randint(0, 256, (batch, s, s, 3), dtype=torch.uint8, generator=g)
        lengths = torch.randint(2, L + 1, (batch,), dtype=torch.int32, generator=g)  # eos included
        tokens = torch.randint(4, c["vocab_size"], (batch, L), dtype=torch.int32, generator=g)
        tokens.masked_fill_(torch.arange(L).unsqueeze(0) >= lengths.long().unsqueeze(1), c["pad_id"])
        out.append((images, tokens, lengths))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="timed steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    ap.add_argument("--bf16", action="store_true", help="autocast(cpu, bfloat16) around forward and loss")
    ap.add_argument("--batches", type=int, default=4, help="distinct random batches, cycled")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.threads < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --batch >= 1, --threads >= 1")

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    loss_group = dist.new_group(backend="gloo")  # as the C++: the gather in backward has its own communicator

    torch.manual_seed(args.seed)
    model = Siglip(TINY)
    n_params = sum(p.numel() for p in model.parameters())
    # C++ defaults: bucket 25 MB, first bucket 1 MB, no unused parameters, gradients as views into
    # the flat buckets, zero_grad in place (LibTorch 1.13's Optimizer::zero_grad zeroes).
    ddp = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False, bucket_cap_mb=25,
                                              find_unused_parameters=False, gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(model.parameters(), lr=TRAIN["lr"], weight_decay=TRAIN["weight_decay"])

    batches = make_batches(args.batches, args.batch, TINY, args.seed * 1000 + rank)
    total = args.warmup + args.steps
    if rank == 0:
        print(f"siglip tiny: {n_params} parameters ({n_params / 1e6:.2f}M), {world} ranks x batch {args.batch}, "
              f"{args.threads} thread(s), {'bf16 autocast' if args.bf16 else 'float32'}, "
              f"warm-up {args.warmup} + {args.steps} timed steps, torch {torch.__version__}", flush=True)

    times = []
    for step in range(total):
        images, tokens, lengths = batches[step % len(batches)]
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, total)
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            img, txt, scale, bias = ddp(image_input(images), tokens.long(), lengths.long())
            loss = siglip_loss(img, txt, scale, bias, loss_group if world > 1 else None)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TRAIN["clip"])
        opt.step()
        mean = loss.detach().float().reshape(1).clone()
        dist.all_reduce(mean)
        mean_loss = mean.item() / world
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
        if rank == 0 and (step % 10 == 0 or step + 1 == total):
            print(f"step {step:>4}  loss {mean_loss:.4f}  lr {learning_rate(step, total):.2e}  "
                  f"t {model.logit_scale.exp().item():.2f}  b {model.logit_bias.item():.2f}  {dt * 1e3:.0f} ms", flush=True)

    # The slowest rank sets the pace: take the max over ranks of the summed step time.
    elapsed = torch.tensor([sum(times)], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds = elapsed.item()
    if rank == 0:
        samples = args.steps * args.batch * world
        print(f"torch_ddp samples/s {samples / seconds:.2f} step_ms {seconds / args.steps * 1e3:.1f} steps {args.steps}",
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
