#!/usr/bin/env python3
"""The Llama SFT speed peer: Hugging Face's Trainer as its users run it (LlamaForCausalLM.from_pretrained,
TrainingArguments with bf16 on the CPU, its AdamW, DDP over gloo under torchrun), on the same data as
meridian: the pack windows of a dataset made by `meridian prep` (window k holds tokens [kL, kL + L + 1);
labels -100 where the dataset's loss_mask is 0, as transformers' SFT collators mask the prompt).

  torchrun --nproc_per_node 2 hf_trainer_sft.py MODEL_DIR DATA.h5 --seq-len L --batch B --steps N
      [--warmup W] [--lr LR] [--bf16]
Prints on rank 0: "hf_trainer tokens/s <global> step_ms <mean> steps <n>", timed over the steps after the
first W (default 2), as `meridian bench train` times its steps.
"""
import argparse
import os
import time

import h5py
import numpy as np
import torch
from transformers import LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


class PackWindows(torch.utils.data.Dataset):
    def __init__(self, path, seq_len):
        with h5py.File(path, "r") as f:
            self.tokens = f["tokens"][...].astype(np.int64)
            self.mask = f["loss_mask"][...].astype(bool)
        self.seq_len = seq_len

    def __len__(self):
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, k):
        s = slice(k * self.seq_len, (k + 1) * self.seq_len)
        ids = torch.from_numpy(self.tokens[s])
        labels = torch.where(torch.from_numpy(self.mask[s]), ids, torch.tensor(-100))
        return {"input_ids": ids, "labels": labels}


class Timer(TrainerCallback):
    def __init__(self, warmup):
        self.warmup, self.start, self.steps = warmup, None, 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            self.start = time.perf_counter()
        elif state.global_step > self.warmup:
            self.steps += 1
            self.end = time.perf_counter()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="sequences per rank")
    p.add_argument("--steps", type=int, required=True, help="timed steps (after the warmup)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--out", default="/tmp/hf-trainer-sft")
    a = p.parse_args()
    rank = int(os.environ.get("LOCAL_RANK", 0))
    # One core and one thread per rank, as mpirun --bind-to core and --threads 1 give meridian's ranks.
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = TrainingArguments(
        output_dir=a.out, max_steps=a.warmup + a.steps, per_device_train_batch_size=a.batch, learning_rate=a.lr,
        warmup_steps=1, weight_decay=0.0, bf16=a.bf16, use_cpu=True, ddp_backend="gloo", optim="adamw_torch",
        ddp_find_unused_parameters=False, logging_steps=1000, save_strategy="no", report_to=[], dataloader_num_workers=0, seed=0, disable_tqdm=True)
    timer = Timer(a.warmup)
    trainer = Trainer(model=model, args=args, train_dataset=PackWindows(a.data, a.seq_len), callbacks=[timer])
    trainer.train()
    if trainer.is_world_process_zero():
        dt = timer.end - timer.start
        world = int(os.environ.get("WORLD_SIZE", 1))
        tokens = timer.steps * a.batch * world * a.seq_len
        print(f"hf_trainer tokens/s {tokens / dt:.1f} step_ms {1000 * dt / timer.steps:.1f} steps {timer.steps}")


if __name__ == "__main__":
    main()
