#!/usr/bin/env bash
# jobs/setup-node.sh --print-track with a stand-in nvidia-smi on the PATH: the track each kind of node
# gets and why, in the six cases of issue 69 (V100 with driver 550, T4 with 580, H100 with 580, A100 with
# 535, driver 470 on anything, no GPU), a node of mixed GPUs, and MERIDIAN_TORCH_TRACK. Installs nothing.
set -u
unset MERIDIAN_TORCH_TRACK  # the cases choose; tests/compat.sh runs the suite with it set
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# The stand-in answers the two queries setup-node.sh makes, as the real one does for the driver in
# SMI_DRIVER (below 510: compute_cap is not a field, and the query fails as it does there) with the GPUs of
# SMI_GPUS ("CC|NAME" per line), and prints the banner with SMI_CUDA.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
if [[ ${1:-} == --query-gpu=* ]]; then
  if [[ $1 == *compute_cap* && ${SMI_DRIVER%%.*} -lt 510 ]]; then
    echo 'Field "compute_cap" is not a valid field to query.'
    exit 2
  fi
  while IFS='|' read -r cc name; do
    [[ -n $name ]] || continue
    if [[ $1 == *compute_cap* ]]; then echo "$SMI_DRIVER, $cc, $name"; else echo "$SMI_DRIVER, $name"; fi
  done <<<"$SMI_GPUS"
  exit 0
fi
[[ -n $SMI_GPUS ]] || { echo "No devices were found"; exit 6; }
echo "+-----------------------------------------------------------------------------------------+"
echo "| NVIDIA-SMI $SMI_DRIVER              Driver Version: $SMI_DRIVER      CUDA Version: $SMI_CUDA     |"
echo "+-----------------------------------------------------------------------------------------+"
SMI
chmod +x "$tmp/bin/nvidia-smi"

# expect NAME EXIT TRACK 'PATTERN...' -- with SMI_* in the environment
expect() {
  local name=$1 want_rc=$2 want=$3 out rc=0 p
  shift 3
  out=$(PATH="$tmp/bin:$PATH" bash "$src/jobs/setup-node.sh" --print-track 2>&1) || rc=$?
  echo "$name: exit $rc: $out"
  if ((rc != want_rc)) || [[ ${out%%:*} != "$want" ]]; then
    echo "  FAIL: expected exit $want_rc and track '$want'"
    fails=$((fails + 1))
  fi
  for p in "$@"; do
    grep -qF -- "$p" <<<"$out" || { echo "  FAIL: the reason does not say '$p'"; fails=$((fails + 1)); }
  done
}

SMI_DRIVER=550.54.15 SMI_CUDA=12.4 SMI_GPUS="7.0|Tesla V100-SXM2-16GB" \
  expect "V100, driver 550" 0 cu128 "driver 550.54.15 (CUDA 12.4)" "Tesla V100-SXM2-16GB (compute capability 7.0)" \
  "cu13 cannot run here" "cu13 (torch 2.15.0, CUDA 13.2) needs driver 580+ (CUDA 13.0+) and compute capability 7.5+"
SMI_DRIVER=580.95.05 SMI_CUDA=13.0 SMI_GPUS="7.5|Tesla T4" \
  expect "T4, driver 580" 0 cu13 "Tesla T4 (compute capability 7.5)" "the default track runs here"
SMI_DRIVER=580.95.05 SMI_CUDA=13.0 SMI_GPUS=$'9.0|NVIDIA H100 80GB HBM3\n9.0|NVIDIA H100 80GB HBM3' \
  expect "H100, driver 580" 0 cu13 "2 GPU(s)" "the default track runs here"
SMI_DRIVER=535.183.01 SMI_CUDA=12.2 SMI_GPUS="8.0|NVIDIA A100-SXM4-40GB" \
  expect "A100, driver 535" 0 cu128 "driver 535.183.01 (CUDA 12.2)" "cu13 cannot run here, cu128 can" \
  "cu128 (torch 2.10.0, CUDA 12.8) needs driver 525+ (CUDA 12.0+, 570+ for all of CUDA 12.8)"
SMI_DRIVER=470.256.02 SMI_CUDA=11.4 SMI_GPUS="7.0|Tesla V100-PCIE-32GB" \
  expect "driver 470" 2 none "no track runs on this node: driver 470.256.02 (CUDA 11.4)" "Tesla V100-PCIE-32GB" \
  "needs driver 580+" "needs driver 525+" "update the NVIDIA driver"
SMI_DRIVER=470.256.02 SMI_CUDA=11.4 SMI_GPUS="?|NVIDIA A100-PCIE-40GB" \
  expect "driver 470, A100" 2 none "driver 470.256.02 (CUDA 11.4)"
SMI_DRIVER=580.95.05 SMI_CUDA=13.0 SMI_GPUS="" \
  expect "nvidia-smi lists no GPU" 0 cu13 "lists no GPU"
SMI_DRIVER=580.95.05 SMI_CUDA=13.0 SMI_GPUS=$'8.0|NVIDIA A100-SXM4-40GB\n7.0|Tesla V100-SXM2-32GB' \
  expect "A100 and V100, driver 580" 0 cu128 "the oldest Tesla V100-SXM2-32GB (compute capability 7.0)"
SMI_DRIVER=550.54.15 SMI_CUDA=12.4 SMI_GPUS="6.1|Tesla P40" \
  expect "P40 (Pascal)" 2 none "no track runs on this node" "compute capability 7.0+"
# No GPU: no nvidia-smi at all (the stand-in's folder left off the PATH, none on this machine).
if command -v nvidia-smi >/dev/null; then
  echo "SKIPPED: this machine has an nvidia-smi of its own (the no-GPU case needs none on the PATH)"
else
  rc=0
  out=$(bash "$src/jobs/setup-node.sh" --print-track 2>&1) || rc=$?
  echo "no GPU: exit $rc: $out"
  [[ $rc == 0 && ${out%%:*} == cu13 && $out == *"no nvidia-smi"* ]] || { echo "  FAIL"; fails=$((fails + 1)); }
fi
SMI_DRIVER=550.54.15 SMI_CUDA=12.4 SMI_GPUS="7.0|Tesla V100-SXM2-16GB" MERIDIAN_TORCH_TRACK=cu13 \
  expect "MERIDIAN_TORCH_TRACK=cu13 on a V100" 0 cu13 "MERIDIAN_TORCH_TRACK=cu13"
MERIDIAN_TORCH_TRACK=cu118 expect "MERIDIAN_TORCH_TRACK=cu118" 2 none "not a track of jobs/torch-tracks.tsv (cu13,cu128)"

if ((fails)); then
  echo "FAIL: $fails check(s)"
  exit 1
fi
echo "PASS: every case gets its track and reason"
