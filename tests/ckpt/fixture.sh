# Sourced by the checkpoint tests: a small synthetic dataset and a tiny SigLIP config in $tmp
# (needs $mpirun, $meridian, $tmp and fail()). $1: the train: line.
make_fixture() {
  "$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --count 128 --size 32 --vocab-size 300 --context-length 16 \
    --out "$tmp/data.h5" --log-level warn >/dev/null || fail "prep exited $?"
  cat >"$tmp/small.yaml" <<YAML
model:
  image_size: 32
  patch: 8
  vision: {width: 32, depth: 1, heads: 2, mlp_ratio: 2}
  context_length: 16
  vocab_size: 300
  text: {width: 32, depth: 1, heads: 2, mlp_ratio: 2}
  embed: 32
task: {prompts: ["a photo of {}.", "an aerial image of {}."]}
$1
optim: {lr: 2.0e-3, warmup: 3}
data: {augment: true}
YAML
}
