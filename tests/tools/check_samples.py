#!/usr/bin/env python3
"""Checks a run's sample record (RUN_DIR/samples.jsonl, train.record_samples) against the data order a
training run promises: every step from 1 to STEPS recorded, each global batch GLOBAL_BATCH rows, and
within each epoch no dataset row twice (drop_last), an epoch that ended holding exactly its
floor(N / GLOBAL_BATCH) x GLOBAL_BATCH rows. A resumed attempt writes the steps after its checkpoint
again: the last line of a step counts, as the run's state does.

Usage: check_samples.py RUN_DIR N STEPS GLOBAL_BATCH   (exit 1 with what is wrong)
Prints one line: the steps, epochs, world sizes and lines superseded by a later attempt."""
import json
import sys


def main():
    run_dir, n, steps, global_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    last = {}  # step -> the record that counts
    superseded = broken = 0
    with open(f"{run_dir}/samples.jsonl", encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                broken += 1  # a line cut short by a killed attempt
                continue
            superseded += record["step"] in last
            last[record["step"]] = record
    problems = []
    missing = [s for s in range(1, steps + 1) if s not in last]
    if missing:
        problems.append(f"steps without a record: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    per_epoch = {}
    for step in sorted(last):
        rows = [r for b in last[step]["batches"] for r in b["rows"]]
        if len(rows) != global_batch:
            problems.append(f"step {step}: {len(rows)} rows, not the global batch {global_batch}")
        for batch in last[step]["batches"]:
            per_epoch.setdefault(batch["epoch"], []).extend(batch["rows"])
    per_epoch_rows = n // global_batch * global_batch
    for epoch, rows in sorted(per_epoch.items()):
        twice = len(rows) - len(set(rows))
        if twice:
            problems.append(f"epoch {epoch}: {twice} row(s) seen more than once")
        if any(r < 0 or r >= n for r in rows):
            problems.append(f"epoch {epoch}: rows outside [0, {n})")
        if epoch != max(per_epoch) and len(rows) != per_epoch_rows:
            problems.append(f"epoch {epoch} ended with {len(rows)} rows, not {per_epoch_rows}")
    if problems:
        print("sample record: " + "; ".join(problems))
        sys.exit(1)
    sizes = sorted({last[s]["world_size"] for s in last})
    print(f"sample record: steps 1..{steps}, {len(per_epoch)} epoch(s), every row at most once per epoch and every "
          f"ended epoch whole ({per_epoch_rows} rows), world sizes {sizes}; {superseded} line(s) superseded by a "
          f"later attempt, {broken} cut short")


if __name__ == "__main__":
    main()
