#!/usr/bin/env bash
# Usage: hf_siglip_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — SigLIP in and out of Hugging Face's
# layout, against tests/models/hf_siglip.py (a second implementation written from transformers'
# semantics with torch.nn): a random small SiglipModel saved as BF16 shards with the index,
# config.json and a sentencepiece spiece.model.
#  1. `embed` on 2 ranks: image and text embeddings equal the reference forward to 1e-5, and the
#     token ids equal SiglipTokenizer's rules (lower-case, punctuation removed, eos, pad).
#  2. `prep --tokenizer DIR`, `train --init DIR` (a few steps), `export` (f32, sharded; bf16): the
#     exported tensors are the checkpoint's, and embedding with the export equals embedding with the
#     checkpoint; the export's own forward by the reference equals meridian's.
#  2b. The published model before any training: `eval --model DIR` equals `train --init DIR`'s step-0
#     evaluation (every metric, zero-shot included); `predict --model DIR --classes` (a directory and
#     one image file) writes the reference's top classes per image in its order, probabilities to 2e-6.
#  3. Bad inputs exit 2 naming the file and the tensor or field: a missing, an unexpected and a
#     misshapen tensor, a truncated shard, an index naming a missing file, config.json disagreeing
#     with the tensors, an explicit model key disagreeing with config.json; export over an existing
#     directory.
set -u
mpirun=$1 meridian=$2 src=$3
ref=(python3 "$src/tests/models/hf_siglip.py")
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@" --log-level warn; }

"${ref[@]}" make "$tmp/hf" --seed 3 --dtype bf16 --shard-bytes 20000 || fail "the reference could not make a model"
ls "$tmp/hf"/model-0000*-of-*.safetensors >/dev/null 2>&1 || fail "the reference model is not sharded"
"${ref[@]}" images "$tmp/img" 6 32
printf 'Many planes, parked near the RUNWAY!\na   dense residential  area\nGolf course; green trees.\nriver\n' \
  >"$tmp/texts.txt"

# 1. Embeddings against the reference.
run embed --model "$tmp/hf" --images "$tmp/img" --out "$tmp/img.h5" --batch 4 || fail "embed images exited $?"
run embed --model "$tmp/hf" --texts "$tmp/texts.txt" --out "$tmp/txt.h5" --batch 3 || fail "embed texts exited $?"
"${ref[@]}" check "$tmp/hf" --images "$tmp/img" "$tmp/img.h5" || fail "image embeddings differ from the reference"
"${ref[@]}" check "$tmp/hf" --texts "$tmp/texts.txt" "$tmp/txt.h5" || fail "text embeddings differ from the reference"

# 2. Fine-tune from it, export, load the export again.
run prep synthetic --count 64 --seed 1 --size 32 --context-length 16 --tokenizer "$tmp/hf" --out "$tmp/syn.h5" ||
  fail "prep --tokenizer DIR exited $?"
cat >"$tmp/small.yaml" <<'EOF'
train: {batch: 8, steps: 4, log_every: 2}
optim: {lr: 1.0e-3, warmup: 1}
EOF
out=$(run train --config "$tmp/small.yaml" --data "$tmp/syn.h5" --init "$tmp/hf" --run-dir "$tmp/run" \
  --set data.eval="$tmp/syn.h5" --set train.eval_at_start=true 2>&1) || { echo "$out"; fail "train --init exited"; }
ck=$tmp/run/checkpoints/step_00000004.h5
[[ -f $ck ]] || fail "no checkpoint after train --init"
"$meridian" export --checkpoint "$ck" --out "$tmp/exp" --max-shard-mb 0.05 --log-level warn || fail "export exited $?"
[[ -f $tmp/exp/model.safetensors.index.json && -f $tmp/exp/spiece.model && -f $tmp/exp/preprocessor_config.json ]] ||
  fail "export lacks the index, spiece.model or preprocessor_config.json: $(ls "$tmp/exp")"
"${ref[@]}" same "$tmp/exp" "$ck" || fail "the exported tensors are not the checkpoint's"
"$meridian" export --checkpoint "$ck" --out "$tmp/exp16" --dtype bf16 --log-level warn || fail "export bf16 exited $?"
grep -q '"torch_dtype": "bfloat16"' "$tmp/exp16/config.json" || fail "bf16 export's config.json says $(grep torch_dtype "$tmp/exp16/config.json")"
"${ref[@]}" same "$tmp/exp16" "$ck" --bf16 || fail "the bf16 export is not the checkpoint rounded to bfloat16"
run embed --model "$ck" --images "$tmp/img" --out "$tmp/img_ck.h5" || fail "embed from the checkpoint exited $?"
run embed --model "$tmp/exp" --images "$tmp/img" --out "$tmp/img_exp.h5" || fail "embed from the export exited $?"
python3 - "$tmp/img_ck.h5" "$tmp/img_exp.h5" <<'PY' || fail "the export embeds differently from its checkpoint"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["embeddings"][...] for p in sys.argv[1:3])
sys.exit(0 if a.shape == b.shape and np.array_equal(a, b) else 1)
PY
"${ref[@]}" check "$tmp/exp" --images "$tmp/img" "$tmp/img_exp.h5" || fail "the reference reads the export differently"

# 2b. The published model as it is: eval equals the step-0 evaluation of train --init; zero-shot predict.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$tmp/hf" --data "$tmp/syn.h5" --json "$tmp/e0.json" 2>&1) ||
  { echo "$out"; fail "eval --model DIR exited"; }
grep -q "eval: Hugging Face SiglipModel directory $tmp/hf (task siglip, published weights)" <<<"$out" ||
  { echo "$out"; fail "eval does not say what it loaded"; }
python3 - "$tmp/e0.json" "$tmp/run/metrics.csv" <<'PY' || fail "eval --model differs from train --init's step-0 evaluation"
import csv, json, sys
mine = json.load(open(sys.argv[1]))["metrics"]
step0 = {r["name"][5:]: float(r["value"]) for r in csv.DictReader(open(sys.argv[2]))
         if r["step"] == "0" and r["name"].startswith("eval/")}
assert "zero_shot" in mine and set(mine) == set(step0), (sorted(mine), sorted(step0))
for k, v in mine.items():
    assert abs(v - step0[k]) <= 1e-6 * max(1, abs(v)), (k, v, step0[k])
print(f"eval --model = train --init at step 0: {', '.join(f'{k} {v:.3f}' for k, v in mine.items())}")
PY
classes="river,golf course,beach,harbor"
prompts='["{}", "a {} area"]'
run predict --model "$tmp/hf" --images "$tmp/img" --classes "$classes" --set "task.prompts=$prompts" --top-k 3 \
  --out "$tmp/zs.csv" || fail "predict --classes exited $?"
"${ref[@]}" classify "$tmp/hf" "$tmp/img" "$tmp/zs.csv" "$classes" "$prompts" || fail "zero-shot predict differs from the reference"
mkdir -p "$tmp/one" && cp "$tmp/img/img_002.ppm" "$tmp/one/"
printf 'river\ngolf course\n\nbeach\nharbor\n' >"$tmp/classes.txt"
run predict --model "$tmp/hf" --images "$tmp/one/img_002.ppm" --classes "$tmp/classes.txt" --set "task.prompts=$prompts" \
  --top-k 4 --out "$tmp/one.csv" || fail "predict on one image file exited $?"
"${ref[@]}" classify "$tmp/hf" "$tmp/one" "$tmp/one.csv" "$classes" "$prompts" || fail "predict on one image file"

# 3. Bad inputs: exit 2 on every rank, the message names the file and what is wrong.
expect_error "an empty class name" "class 2 of 3 is an empty name" \
  "$mpirun" --oversubscribe -np 2 "$meridian" predict --model "$tmp/hf" --images "$tmp/img" --classes "river, ,beach" --out "$tmp/x.csv"
mkdir -p "$tmp/bert" && echo '{"model_type": "bert"}' >"$tmp/bert/config.json"
expect_error "a directory of another architecture" "bert/config.json.*model_type.*'bert'.*siglip \(task siglip\)" \
  "$meridian" eval --model "$tmp/bert" --data "$tmp/syn.h5"
expect_error "a model of another task" "hf is a model of task siglip, not lm" \
  "$meridian" eval --model "$tmp/hf" --data "$tmp/syn.h5" --task lm
for fault in missing extra shape truncate index config; do
  name=$("${ref[@]}" break "$tmp/hf" "$tmp/bad_$fault" "$fault")
  # One process is enough to read the files (the missing tensor: 2 ranks, each must exit 2).
  launch=("$meridian")
  [[ $fault == missing ]] && launch=("$mpirun" --oversubscribe -np 2 "$meridian")
  expect_error "$fault" "bad_$fault.*${name//./\\.}" "${launch[@]}" embed --model "$tmp/bad_$fault" --images "$tmp/img" \
    --out "$tmp/x.h5"
done
[[ ! -e $tmp/x.h5 ]] || fail "a failed embed left $tmp/x.h5"
echo "model: {vision: {width: 64, heads: 4}}" >"$tmp/wide.yaml"
expect_error "model key vs config.json" "model\.vision\.width.*is 64.*config\.json field 'vision_config\.hidden_size' is 32" \
  "$meridian" train --config "$tmp/wide.yaml" --data "$tmp/syn.h5" --init "$tmp/hf" --run-dir "$tmp/run2"
expect_error "export over a directory" "exp: exists" "$meridian" export --checkpoint "$ck" --out "$tmp/exp"
echo PASS
