#!/usr/bin/env bash
# Usage: hf_siglip_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — SigLIP in and out of Hugging Face's
# layout, against the real libraries (tests/models/hf_siglip.py): transformers' SiglipModel,
# SiglipTokenizer and SiglipImageProcessor, open_clip's SigLipLoss, safetensors. transformers makes a
# random small SiglipModel (save_pretrained: BF16 shards with the index, config.json, spiece.model,
# preprocessor_config.json); meridian's outputs are collected and compared by one Python process at the
# end (`verify`), which prints every measured error.
#  1. `embed` on 2 ranks: image and text embeddings equal get_image_features/get_text_features
#     (L2-normalised, float32) to 1e-5; the token ids equal SiglipTokenizer(padding="max_length",
#     truncation=True) on captions with punctuation, upper case, extra spaces and one cut short;
#     exp(logit_scale) * image @ text.T + logit_bias equals SiglipModel's logits_per_image to 1e-5.
#     Images of another size (48x40 and 20x24 px, resized to 32 px): also to 1e-5 (meridian resizes as
#     SiglipImageProcessor's torchvision backend; its PIL backend's difference is printed).
#  2. `prep image-text --tokenizer DIR` of those images: its token ids are SiglipTokenizer's; `train
#     --init DIR` on it with one batch per step that is the whole dataset: the step-1 loss equals
#     SiglipModel(return_loss=True).loss to 1e-5 (both divide the summed -log sigmoid by the batch
#     size), and open_clip's SigLipLoss on transformers' embeddings equals that loss to 1e-5.
#     `prep synthetic --tokenizer DIR` makes the evaluation set.
#  3. `export` (f32, sharded; bf16): SiglipModel.from_pretrained loads each with no missing, unexpected
#     or mismatched keys, bf16's config dtype is bfloat16; the exported tensors are the checkpoint's
#     (safetensors' reader); embedding with the export equals embedding with the checkpoint; the
#     export's image and text embeddings, logits and loss (train's step 5, after the checkpoint of
#     step 4) equal transformers' on the export as in 1 and 2.
#  4. The published model before any training: `eval --model DIR` equals `train --init DIR`'s step-0
#     evaluation (every metric, zero-shot included); `predict --model DIR --classes` (a directory and
#     one image file) writes transformers' top classes per image in its order, probabilities to 2e-6.
#  5. Bad inputs exit 2 naming the file and the tensor or field: a missing, an unexpected and a
#     misshapen tensor, a truncated shard, an index naming a missing file, config.json disagreeing
#     with the tensors, an explicit model key disagreeing with config.json; export over an existing
#     directory.
set -u
mpirun=$1 meridian=$2 src=$3
ref=(python3 "$src/tests/models/hf_siglip.py")
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@" --log-level warn; }
checks=$tmp/checks.tsv  # what `verify` compares at the end, one check a line (words tab-separated)
check() { (IFS=$'\t' && echo "$*") >>"$checks"; }

"${ref[@]}" make "$tmp/hf" --seed 3 --dtype bf16 --shard-bytes 20000 || fail "transformers could not make a model"
ls "$tmp/hf"/model-0000*-of-*.safetensors >/dev/null 2>&1 || fail "the model is not sharded"
"${ref[@]}" images "$tmp/img" 6 32
"${ref[@]}" images "$tmp/sizes" 3 48 40
"${ref[@]}" images "$tmp/sizes/up" 2 20 24
printf 'Many planes, parked near the RUNWAY!\na   dense residential  area\nGolf course; green trees.\nriver\n' \
  >"$tmp/texts.txt"
printf '  Tennis court -- BASEBALL diamond, parking lot & many cars parked near white planes; storage tanks...\n' \
  >>"$tmp/texts.txt"
check load "$tmp/hf"

# 1. Embeddings.
run embed --model "$tmp/hf" --images "$tmp/img" --out "$tmp/img.h5" --batch 4 || fail "embed images exited $?"
run embed --model "$tmp/hf" --texts "$tmp/texts.txt" --out "$tmp/txt.h5" --batch 3 || fail "embed texts exited $?"
run embed --model "$tmp/hf" --images "$tmp/sizes" --out "$tmp/sizes.h5" || fail "embed resized images exited $?"
check images "$tmp/hf" "$tmp/img" "$tmp/img.h5"
check texts "$tmp/hf" "$tmp/texts.txt" "$tmp/txt.h5"
check logits "$tmp/hf" "$tmp/img" "$tmp/img.h5" "$tmp/txt.h5"
check pixels "$tmp/hf" "$tmp/sizes"
check images "$tmp/hf" "$tmp/sizes" "$tmp/sizes.h5"

# 2. A dataset of those images and captions; fine-tune from the model with the whole set as each batch.
python3 - "$tmp/img" "$tmp/pairs.csv" <<'PY'
import csv, os, sys
captions = ["Many planes, parked near the RUNWAY!", "a   dense residential  area", "Golf course; green trees.",
            "river", "Tennis court -- BASEBALL diamond, parking lot & many cars parked near white planes", "BEACH"]
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["image", "caption"])
    w.writerows(zip(sorted(os.listdir(sys.argv[1])), captions))
PY
run prep image-text --images "$tmp/img" --captions "$tmp/pairs.csv" --size 32 --captions-per-image 1 \
  --context-length 16 --tokenizer "$tmp/hf" --out "$tmp/pairs.h5" >/dev/null || fail "prep image-text exited $?"
run prep synthetic --count 64 --seed 1 --size 32 --context-length 16 --tokenizer "$tmp/hf" --out "$tmp/syn.h5" ||
  fail "prep --tokenizer DIR exited $?"
# 3 pairs per rank, 2 ranks: every step's batch is the dataset's 6 pairs. Step 1's loss is the published
# model's; step 5's that of the checkpoint after step 4, which is exported below.
cat >"$tmp/small.yaml" <<'EOF'
train: {batch: 3, steps: 5, log_every: 2}
optim: {lr: 1.0e-3, warmup: 1}
checkpoint: {every_steps: 4, at_end: false}
EOF
out=$(run train --config "$tmp/small.yaml" --data "$tmp/pairs.h5" --init "$tmp/hf" --run-dir "$tmp/run" \
  --set data.eval="$tmp/syn.h5" --set train.eval_at_start=true 2>&1) || { echo "$out"; fail "train --init exited"; }
check loss "$tmp/hf" "$tmp/run/metrics.csv" 1 "$tmp/img" "$tmp/pairs.csv" "$tmp/pairs.h5"

# 3. Export, load the export again.
ck=$tmp/run/checkpoints/step_00000004.h5
[[ -f $ck ]] || fail "no checkpoint after train --init"
"$meridian" export --checkpoint "$ck" --out "$tmp/exp" --max-shard-mb 0.05 --log-level warn || fail "export exited $?"
[[ -f $tmp/exp/model.safetensors.index.json && -f $tmp/exp/spiece.model && -f $tmp/exp/preprocessor_config.json ]] ||
  fail "export lacks the index, spiece.model or preprocessor_config.json: $(ls "$tmp/exp")"
check same "$tmp/exp" "$ck"
check load "$tmp/exp"
"$meridian" export --checkpoint "$ck" --out "$tmp/exp16" --dtype bf16 --log-level warn || fail "export bf16 exited $?"
grep -q '"torch_dtype": "bfloat16"' "$tmp/exp16/config.json" || fail "bf16 export's config.json says $(grep torch_dtype "$tmp/exp16/config.json")"
check same "$tmp/exp16" "$ck" bf16
check load "$tmp/exp16"
check dtype "$tmp/exp16" bfloat16
run embed --model "$ck" --images "$tmp/img" --out "$tmp/img_ck.h5" || fail "embed from the checkpoint exited $?"
run embed --model "$tmp/exp" --images "$tmp/img" --out "$tmp/img_exp.h5" || fail "embed from the export exited $?"
run embed --model "$tmp/exp" --texts "$tmp/texts.txt" --out "$tmp/txt_exp.h5" || fail "embed texts from the export exited $?"
python3 - "$tmp/img_ck.h5" "$tmp/img_exp.h5" <<'PY' || fail "the export embeds differently from its checkpoint"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["embeddings"][...] for p in sys.argv[1:3])
sys.exit(0 if a.shape == b.shape and np.array_equal(a, b) else 1)
PY
check images "$tmp/exp" "$tmp/img" "$tmp/img_exp.h5"
check texts "$tmp/exp" "$tmp/texts.txt" "$tmp/txt_exp.h5"
check logits "$tmp/exp" "$tmp/img" "$tmp/img_exp.h5" "$tmp/txt_exp.h5"
check loss "$tmp/exp" "$tmp/run/metrics.csv" 5 "$tmp/img" "$tmp/pairs.csv" "$tmp/pairs.h5"

# 4. The published model as it is: eval equals the step-0 evaluation of train --init; zero-shot predict.
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
check classify "$tmp/hf" "$tmp/img" "$tmp/zs.csv" "$classes" "$prompts"
mkdir -p "$tmp/one" && cp "$tmp/img/img_002.ppm" "$tmp/one/"
printf 'river\ngolf course\n\nbeach\nharbor\n' >"$tmp/classes.txt"
run predict --model "$tmp/hf" --images "$tmp/one/img_002.ppm" --classes "$tmp/classes.txt" --set "task.prompts=$prompts" \
  --top-k 4 --out "$tmp/one.csv" || fail "predict on one image file exited $?"
check classify "$tmp/hf" "$tmp/one" "$tmp/one.csv" "$classes" "$prompts"

# 5. Bad inputs: exit 2 on every rank, the message names the file and what is wrong.
expect_error "an empty class name" "class 2 of 3 is an empty name" \
  "$mpirun" --oversubscribe -np 2 "$meridian" predict --model "$tmp/hf" --images "$tmp/img" --classes "river, ,beach" --out "$tmp/x.csv"
mkdir -p "$tmp/bert" && echo '{"model_type": "bert"}' >"$tmp/bert/config.json"
expect_error "a directory of another architecture" "bert/config.json.*model_type.*'bert'.*siglip \(task siglip\)" \
  "$meridian" eval --model "$tmp/bert" --data "$tmp/syn.h5"
expect_error "a model of another task" "hf is a model of task siglip, not lm" \
  "$meridian" eval --model "$tmp/hf" --data "$tmp/syn.h5" --task lm
mapfile -t faults < <("${ref[@]}" break "$tmp/hf" "$tmp/bad_" missing extra shape truncate index config)
[[ ${#faults[@]} == 6 ]] || fail "break made ${#faults[@]} faulty copies, not 6"
for line in "${faults[@]}"; do
  read -r fault name <<<"$line"
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

# Every comparison with transformers and open_clip, in one process.
"${ref[@]}" verify "$checks" || fail "meridian differs from transformers or open_clip (above)"
echo PASS
