#!/usr/bin/env bash
# Usage: lora_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — LoRA fine-tuning and export on lm-tiny, 2 ranks:
#  - base weights exported from a short full run (`meridian export` without adapters), then LoRA
#    (rank 4 on q_proj and v_proj) from them with DDP and with ZeRO-3 + activation checkpointing:
#    the same weights (within 1e-6); the base weights in the checkpoint are exactly the exported
#    ones (frozen), the adapters moved, and the optimizer state covers the adapters only;
#  - `meridian export` of the LoRA checkpoint: Hugging Face names without lora_*, and every adapted
#    weight equal to W + (alpha / r) B A computed with numpy from the checkpoint's tensors.
set -u
mpirun=$1 meridian=$2 src=$3
source "$(dirname "$0")/../mpi_script_lib.sh"
synthetic text.h5
run() {  # run NAME [--set ...]
  local name=$1
  shift
  "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
    --set train.batch=4 --set data.seq_len=64 --set train.steps=4 --set optim.lr=1e-2 --set optim.warmup=1 \
    --set train.health_every=0 --set train.log_every=100 --run-dir "$tmp/$name" --log-level warn "$@" \
    >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "train $name $* exited"; }
}
ck() { echo "$tmp/$1/checkpoints/step_00000004.h5"; }
run full --set train.steps=2 --set checkpoint.at_end=true
"$meridian" export --checkpoint "$tmp/full/checkpoints/step_00000002.h5" --out "$tmp/base.safetensors" \
  >"$tmp/export_base.log" 2>&1 || { cat "$tmp/export_base.log"; fail "export of a full run"; }
lora=(--set task.init="$tmp/base.safetensors" --set task.lora.rank=4 --set task.lora.alpha=8)
run lora_ddp "${lora[@]}"
run lora_z3 "${lora[@]}" --set optim.zero=3 --set train.activation_checkpointing=true
"$meridian" export --checkpoint "$(ck lora_ddp)" --out "$tmp/merged.safetensors" >"$tmp/export.log" 2>&1 ||
  { cat "$tmp/export.log"; fail "export of a LoRA run"; }
python3 - "$(ck lora_ddp)" "$(ck lora_z3)" "$tmp/base.safetensors" "$tmp/merged.safetensors" <<'PY' || fail "LoRA checks"
import json, struct, sys
import h5py, numpy as np

def safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"])
    return out

ddp, z3 = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
base, merged = safetensors(sys.argv[3]), safetensors(sys.argv[4])
model = ddp["model"]
worst = max(float(np.abs(model[n][()] - z3["model"][n][()]).max()) for n in model)
assert worst <= 1e-6, f"DDP and ZeRO-3 LoRA runs differ by {worst}"
adapters = [n for n in model if ".lora_" in n]
assert len(adapters) == 2 * 2 * 2, adapters  # 2 layers x (q_proj, v_proj) x (A, B)
for n in model:
    if ".lora_" not in n:
        assert np.array_equal(model[n][()], base[n]), f"frozen {n} changed"
assert all(np.abs(model[n][()]).max() > 0 for n in adapters if n.endswith("lora_B")), "B did not move"
trained = sorted(k for k in ddp["optim"])
assert trained == sorted(adapters), f"optimizer state for {trained}"
assert sorted(merged) == sorted(n for n in model if ".lora_" not in n), "merged names"
for n in merged:
    expected = model[n][()]
    if n.endswith(("q_proj.weight", "v_proj.weight")):
        layer = n[: -len("weight")]
        expected = expected + (8 / 4) * model[layer + "lora_B"][()] @ model[layer + "lora_A"][()]
        assert np.abs(expected - model[n][()]).max() > 0, f"{n}: the adapter changed nothing"
    assert np.allclose(merged[n], expected, rtol=1e-5, atol=1e-6), f"{n} merged wrong"
print("LoRA: DDP vs ZeRO-3", worst, "; adapters", len(adapters), "; merged", len(merged), "tensors")
PY
# bfloat16 with ZeRO: the frozen base is read straight into bfloat16 (never a float32 model): the
# checkpoint's base weights are the file's rounded to bfloat16 (torch's rounding), the adapters
# float32 and trained.
run lora_bf3 "${lora[@]}" --set optim.zero=3 --set train.precision=bf16
python3 - "$(ck lora_bf3)" "$tmp/base.safetensors" "$src/tests/models" <<'PY' || fail "LoRA with a bfloat16 base"
import sys
import h5py, torch
sys.path.insert(0, sys.argv[3])
from hf_siglip import read_safetensors  # the safetensors library's reader
model, base = h5py.File(sys.argv[1], "r")["model"], read_safetensors(sys.argv[2])
for n in model:
    raw = model[n][()]  # bfloat16 tensors are stored as their uint16 bits
    got = torch.from_numpy(raw.view("int16")).view(torch.bfloat16).float() if raw.dtype == "uint16" else torch.from_numpy(raw)
    if ".lora_" in n:
        assert model[n].dtype == "float32", (n, model[n].dtype)
        continue
    assert raw.dtype == "uint16", (n, raw.dtype)
    want = torch.as_tensor(base[n]).to(torch.bfloat16).float()
    assert torch.equal(got, want), f"frozen {n} is not the file's bfloat16 rounding"
assert any(float(model[n][()].__abs__().max()) > 0 for n in model if n.endswith("lora_B")), "B did not move"
print("LoRA bf16: frozen base = the file rounded to bfloat16;", sum(".lora_" in n for n in model), "adapters")
PY

echo PASS
