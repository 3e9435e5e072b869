#!/usr/bin/env python3
"""meridian's fp16 training against PyTorch's own torch.amp.GradScaler, on the same model and data.

  gradscaler_check.py HF_DIR DATASET.h5 SEQ_LEN RUN_DIR EXPORT_DIR INIT_SCALE GROWTH_INTERVAL LR CLIP OVERFLOWS

RUN_DIR: a 1-rank `meridian train --init HF_DIR` run of task lm with train.precision fp16,
train.record_samples true (the data order), a constant learning rate (optim.min_lr = optim.lr, no
warmup), no weight decay and log_every 1, with MERIDIAN_TEST_OVERFLOW_STEPS=OVERFLOWS (those steps'
scaled loss x 2^40: their backward overflows float16, on both sides); EXPORT_DIR: its last checkpoint
exported (`meridian export`). The loss scales stay far below where this model's gradients overflow
float16 by themselves (where two implementations' rounding could decide differently).
The reference is written as a PyTorch user writes it: transformers' LlamaForCausalLM from HF_DIR
(float32 master weights), torch.autocast("cpu", float16) around the forward, the loss by labels=,
GradScaler(init_scale, growth_interval) with scale(loss).backward(), unscale_(), clip_grad_norm_(),
step() and update(), torch.optim.AdamW. Each step's batch is meridian's (samples.jsonl's window
indices; window k: tokens [kL, kL + L], labels only where the loss mask is set and not at a
document start, as meridian's packing). Checked:
  - the same loss scale after every step and the same skipped steps (exactly);
  - the same loss every step and the same unscaled gradient norm on the steps applied (to fp16's
    rounding: two implementations of the model round differently);
  - the same parameters at the end, to rounding: their L2 distance under 5 % of how far training moved
    them (fp16's rounding through AdamW: about 2 %), where the same reference with one more update
    dropped is further (checked: else the comparison could not see a wrong skip).
Exit 1 naming what differs.
"""
import csv
import json
import math
import sys

import h5py
import numpy as np
import torch
from transformers import LlamaForCausalLM


def main(argv):
    hf_dir, dataset, seq_len, run_dir, export_dir = argv[:5]
    seq_len, init_scale, interval = int(seq_len), float(argv[5]), int(argv[6])
    lr, clip = float(argv[7]), float(argv[8])
    overflows = {int(s) for s in argv[9].split(",")}
    torch.manual_seed(0)
    torch.set_num_threads(1)

    rows = {}  # step -> window indices (the last line of a step counts)
    for line in open(f"{run_dir}/samples.jsonl"):
        r = json.loads(line)
        rows[r["step"]] = [w for b in r["batches"] for w in b["rows"]]
    logged = {}  # (step, name) -> value, the last logged
    for r in csv.DictReader(open(f"{run_dir}/metrics.csv")):
        logged[(int(r["step"]), r["name"])] = float(r["value"])
    with h5py.File(dataset, "r") as f:
        tokens = torch.from_numpy(f["tokens"][...].astype(np.int64))
        mask = f["loss_mask"][...].astype(bool)
        starts = set(f["doc_offsets"][...].tolist())

    def batch(windows):  # as tests/models/hf_llama.py's loss: transformers shifts the labels itself
        x = torch.stack([tokens[k * seq_len:k * seq_len + seq_len + 1] for k in windows])  # [B, L + 1]
        labels = x.clone()
        for i, k in enumerate(windows):
            for t in range(1, seq_len + 1):
                at = k * seq_len + t
                if not mask[at] or at in starts:
                    labels[i, t] = -100
        return x, labels

    def reference(extra_skip=None):
        """GradScaler's run; `extra_skip`: a step whose update is dropped as well (the control)."""
        model = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=interval)
        records = {}
        for step in sorted(rows):
            x, labels = batch(rows[step])
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(input_ids=x, labels=labels).loss
            scaler.scale(loss * 2.0**40 if step in overflows else loss).backward()
            scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
            before = scaler.get_scale()
            if step != extra_skip:
                scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            records[step] = (loss.item(), norm, scaler.get_scale(), scaler.get_scale() < before)
        return model.state_dict(), records

    start = {k: v.detach().clone() for k, v in LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
             .state_dict().items()}
    ref, records = reference()
    steps = sorted(rows)
    problems, skipped_ref, skipped_mine, worst_loss, worst_norm = [], [], [], 0.0, 0.0
    for step in steps:
        loss, norm, after, skipped = records[step]
        if skipped:
            skipped_ref.append(step)
        mine_norm = logged.get((step, "train/grad_norm"), float("nan"))
        if not math.isfinite(mine_norm):
            skipped_mine.append(step)
        mine_scale = logged.get((step, "train/loss_scale"))
        if mine_scale != after:
            problems.append(f"step {step}: loss scale {mine_scale} after the step, GradScaler {after}")
        worst_loss = max(worst_loss, abs(logged[(step, "train/loss")] - loss) / abs(loss))
        if math.isfinite(norm) and math.isfinite(mine_norm):
            worst_norm = max(worst_norm, abs(mine_norm - norm) / norm)
    if skipped_ref != skipped_mine:
        problems.append(f"skipped steps: meridian {skipped_mine}, GradScaler {skipped_ref}")
    if worst_loss > 5e-3:
        problems.append(f"losses differ by up to {worst_loss:.2e} (relative; tolerance 5e-3)")
    if worst_norm > 2e-2:
        problems.append(f"unscaled gradient norms differ by up to {worst_norm:.2e} (relative; tolerance 2e-2)")

    mine = LlamaForCausalLM.from_pretrained(export_dir, dtype=torch.float32).state_dict()

    def apart(a, b):  # L2 distance of two parameter sets, relative to how far training moved GradScaler's
        num = sum(((a[k] - b[k]) ** 2).sum().item() for k in ref)
        return math.sqrt(num / sum(((ref[k] - start[k]) ** 2).sum().item() for k in ref))

    # The control: GradScaler's run with one more step's update dropped (the first applied step after
    # the first overflow). A check that cannot tell that apart from meridian's means nothing.
    control_step = next(s for s in steps if s > min(overflows) and s not in skipped_ref)
    control, _ = reference(extra_skip=control_step)
    d, dc = apart(mine, ref), apart(mine, control)
    print(f"{len(steps)} steps: loss scales {[logged[(s, 'train/loss_scale')] for s in steps]}")
    print(f"skipped (inf/NaN gradients): meridian {skipped_mine}, GradScaler {skipped_ref}")
    print(f"losses within {worst_loss:.1e}, unscaled gradient norms within {worst_norm:.1e} (relative); parameters: "
          f"meridian's are {100 * d:.1f} % of the update from GradScaler's (tolerance 5 %), "
          f"{100 * dc:.1f} % from GradScaler's with step {control_step}'s update dropped")
    if not skipped_ref or len(skipped_ref) == len(steps):
        problems.append("the run must both skip steps and apply steps to mean anything")
    if d > 0.05:
        problems.append(f"parameters {100 * d:.1f} % of the update apart (tolerance 5 %)")
    if dc <= 0.05:
        problems.append(f"the control (a step's update dropped) is within the tolerance too ({100 * dc:.1f} %)")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
