#!/usr/bin/env bash
# Usage: hf_llama_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — Llama in and out of Hugging Face's layout,
# against tests/models/hf_llama.py (a second implementation written from transformers' modeling_llama
# semantics with torch.nn, and sentencepiece's Python encoder): a random small LlamaForCausalLM
# saved as BF16 shards with the index, config.json, tokenizer.model and rotary_emb.inv_freq buffers.
#  1. `prep text --tokenizer DIR` of Alpaca's JSON array and of chat records (Llama-2 template, and
#     Mistral-Instruct's named with --chat-template): the token ids and loss masks equal the
#     reference's joined-text tokenisation.
#  2. `eval --model DIR` (the published model as it is; --init is the same) equals the reference's
#     loss to 1e-5 and `train --init DIR`'s step-0 evaluation; `generate --model DIR` continues a
#     prompt (as it is, and in Llama-2-chat's template) greedily as the reference does.
#  3. `train --init DIR` on 2 ranks with ZeRO-3 (read straight into the shards) ends where DDP
#     (the whole model loaded) does, bit for bit; `eval` of the checkpoint, `export` (f32, sharded):
#     the export holds the checkpoint's tensors, and the reference's loss on the export equals
#     meridian's on the checkpoint to 1e-5.
#  4. Bad inputs exit 2 naming the file and tensor or field: a missing shard, the index naming a
#     tensor no shard has, a missing and a misshapen tensor, config.json disagreeing with the
#     tensors, an explicit model key disagreeing with config.json, export over a directory.
set -u
mpirun=$1 meridian=$2 src=$3
ref=(python3 "$src/tests/models/hf_llama.py")
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@" --log-level warn; }
run_info() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@" --log-level info; }
close() {  # close A.json B_LOSS WHAT: |a - b| <= 1e-5 and the same token count
  python3 - "$@" <<'PY' || fail "$3: meridian's loss differs from the reference"
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
loss, tokens = float(sys.argv[2].split()[1]), int(sys.argv[2].split()[3])
print(f"{sys.argv[3]}: meridian {m['eval_loss']:.8f} reference {loss:.8f} ({tokens} tokens)")
sys.exit(0 if abs(m["eval_loss"] - loss) <= 1e-5 and int(m["eval_tokens"]) == tokens else 1)
PY
}

"${ref[@]}" make "$tmp/hf" --seed 5 --dtype bf16 --shard-bytes 8000 || fail "the reference could not make a model"
ls "$tmp/hf"/model-0000*-of-*.safetensors >/dev/null 2>&1 || fail "the reference model is not sharded"

# 1. Data as published, tokenised as Hugging Face fine-tuning scripts do.
cat >"$tmp/alpaca.json" <<'JSON'
[
  {"instruction": "Count the cars.", "input": "", "output": "There are three cars on the road."},
  {"instruction": "Reverse the words.", "input": "green river field", "output": "field river green"},
  {"instruction": "Write one word.", "output": "harbor"},
  {"instruction": "Add the numbers.", "input": "12 and 30", "output": "12 + 30 = 42"}
]
JSON
cat >"$tmp/chat.jsonl" <<'JSON'
{"messages": [{"role": "system", "content": "You describe aerial images."}, {"role": "user", "content": " What does the image show? "}, {"role": "assistant", "content": "A river and a bridge."}, {"role": "user", "content": "How many planes?"}, {"role": "assistant", "content": "Two planes near the runway.\n"}]}
{"messages": [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "2 + 3 = 5"}]}
{"text": "The aerial image shows many cars and a harbor."}
JSON
for set in alpaca.json chat.jsonl; do
  run prep text --jsonl "$tmp/$set" --tokenizer "$tmp/hf" --out "$tmp/$set.h5" >/dev/null || fail "prep text $set exited $?"
  "${ref[@]}" ids "$tmp/hf" "$tmp/$set" "$tmp/$set.h5" || fail "$set: token ids or loss masks differ from the reference"
done
# A template named on the command line: Mistral-Instruct's (one bos, eos after each answer, answers
# as they are), against the reference's rendering of its Jinja template; it has no system message.
grep -v '"system"' "$tmp/chat.jsonl" >"$tmp/mistral.jsonl"
cat >>"$tmp/mistral.jsonl" <<'JSON'
{"messages": [{"role": "user", "content": "Name the scene. "}, {"role": "assistant", "content": " Farmland."}, {"role": "user", "content": "And the color?"}, {"role": "assistant", "content": "Green and brown"}]}
JSON
run prep text --jsonl "$tmp/mistral.jsonl" --tokenizer "$tmp/hf" --chat-template mistral --out "$tmp/mistral.h5" \
  >/dev/null || fail "prep text --chat-template mistral exited $?"
"${ref[@]}" ids "$tmp/hf" "$tmp/mistral.jsonl" "$tmp/mistral.h5" --chat-template mistral ||
  fail "mistral: token ids or loss masks differ from the reference"
expect_error "a system message in the mistral template" "chat.jsonl.*mistral chat template has no system" \
  "$mpirun" --oversubscribe -np 2 "$meridian" prep text --jsonl "$tmp/chat.jsonl" --tokenizer "$tmp/hf" \
  --chat-template mistral --out "$tmp/bad_template.h5"
[[ ! -e $tmp/bad_template.h5 ]] || fail "a refused prep left $tmp/bad_template.h5"
# tokenizer_config.json's add_bos_token false: no bos before instructions and plain text (as
# tokenizer(text) then adds none); the chat templates write theirs.
cp -r "$tmp/hf" "$tmp/nobos"
python3 -c 'import json, sys; p = sys.argv[1]; c = json.load(open(p)); c["add_bos_token"] = False; json.dump(c, open(p, "w"))' \
  "$tmp/nobos/tokenizer_config.json"
for set in alpaca.json chat.jsonl; do
  run prep text --jsonl "$tmp/$set" --tokenizer "$tmp/nobos" --out "$tmp/nobos_$set.h5" >/dev/null || fail "prep text $set (no bos) exited $?"
  "${ref[@]}" ids "$tmp/nobos" "$tmp/$set" "$tmp/nobos_$set.h5" || fail "$set with add_bos_token false: ids differ from the reference"
done

# 2. The published model evaluated as it is.
"$mpirun" -np 1 "$meridian" eval --init "$tmp/hf" --data "$tmp/chat.jsonl.h5" --seq-len 16 --json "$tmp/e0.json" \
  --log-level warn >/dev/null || fail "eval --init exited $?"
close "$tmp/e0.json" "$("${ref[@]}" loss "$tmp/hf" "$tmp/chat.jsonl.h5" --seq-len 16)" "eval --init"
"$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$tmp/hf" --data "$tmp/chat.jsonl.h5" --seq-len 16 \
  --json "$tmp/e0m.json" --log-level warn >/dev/null || fail "eval --model exited $?"
close "$tmp/e0m.json" "$("${ref[@]}" loss "$tmp/hf" "$tmp/chat.jsonl.h5" --seq-len 16)" "eval --model on 2 ranks"
printf 'task: {name: lm}\ntrain: {batch: 2, steps: 1, eval_at_start: true, health_every: 0}\ndata: {seq_len: 16}\n' \
  >"$tmp/step0.yaml"
run train --config "$tmp/step0.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/hf" --set data.eval="$tmp/chat.jsonl.h5" \
  --run-dir "$tmp/step0" >/dev/null || fail "train --init with eval_at_start exited $?"
python3 - "$tmp/e0m.json" "$tmp/step0/metrics.csv" <<'PY' || fail "eval --model differs from train --init's step-0 evaluation"
import csv, json, sys
mine = json.load(open(sys.argv[1]))["metrics"]
step0 = {r["name"][5:]: float(r["value"]) for r in csv.DictReader(open(sys.argv[2])) if r["step"] == "0" and r["name"].startswith("eval/")}
for k in ("eval_loss", "eval_tokens"):
    assert abs(mine[k] - step0[k]) <= 1e-6 * max(1, abs(mine[k])), (k, mine[k], step0[k])
print(f"eval --model = train --init at step 0: eval_loss {mine['eval_loss']:.8f}, {int(mine['eval_tokens'])} tokens")
PY
for template in none llama-2; do
  prompt="the river near the harbor"
  [[ $template == none ]] || prompt=" Describe the runway. "
  out=$("$meridian" generate --model "$tmp/hf" --prompt "$prompt" --chat-template "$template" --max-new-tokens 8 2>&1) ||
    { echo "$out"; fail "generate --model --chat-template $template exited"; }
  grep -q "generate: Hugging Face LlamaForCausalLM directory $tmp/hf" <<<"$out" || { echo "$out"; fail "generate does not say what it loaded"; }
  mine=$(sed -n 's/^generated ([0-9]* tokens, greedy): //p' <<<"$out")
  want=$("${ref[@]}" generate "$tmp/hf" "$prompt" "$template" 8 | sed 's/^[0-9]* tokens: //')
  [[ -n $want && $mine == "$want" ]] || fail "generate ($template): '$mine', the reference '$want'"
  echo "generate --chat-template $template: '$mine' (the reference's)"
done

# 3. Fine-tune from it (ZeRO-3), export, evaluate the export with the reference.
printf 'task: {name: lm}\ntrain: {batch: 2, steps: 3, health_every: 0}\ndata: {seq_len: 16}\noptim: {lr: 1.0e-3, zero: 3}\n' \
  >"$tmp/sft.yaml"
out=$(run_info train --config "$tmp/sft.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/hf" --run-dir "$tmp/run" 2>&1) ||
  { echo "$out"; fail "train --init exited"; }
ck=$tmp/run/checkpoints/step_00000003.h5
[[ -f $ck ]] || fail "no checkpoint after train --init"
# ZeRO-3 reads the weights straight into each rank's shards (the model built shape-only); DDP loads
# the whole model. On 2 ranks both end bit for bit at the same weights, so every shard got its part.
grep -q "each rank keeping its ZeRO-3 shards" <<<"$out" || { echo "$out"; fail "ZeRO-3 did not read into its shards"; }
out=$(run_info train --config "$tmp/sft.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/hf" --run-dir "$tmp/run_ddp" \
  --set optim.zero=0 2>&1) || { echo "$out"; fail "train --init with DDP exited"; }
grep -q "one at a time" <<<"$out" || { echo "$out"; fail "DDP did not load the whole model"; }
h5diff -r "$ck" "$tmp/run_ddp/checkpoints/step_00000003.h5" /model /model >"$tmp/diff" ||
  { head "$tmp/diff"; fail "ZeRO-3 from task.init (into the shards) and DDP ended apart"; }
"$mpirun" -np 1 "$meridian" eval --checkpoint "$ck" --data "$tmp/chat.jsonl.h5" --json "$tmp/e1.json" --log-level warn \
  >/dev/null || fail "eval --checkpoint exited $?"
"$meridian" export --checkpoint "$ck" --out "$tmp/exp" --shard-size 20KB --log-level warn || fail "export exited $?"
for f in config.json generation_config.json model.safetensors.index.json tokenizer.model tokenizer_config.json; do
  [[ -f $tmp/exp/$f ]] || fail "the export lacks $f: $(ls "$tmp/exp")"
done
"${ref[@]}" same "$tmp/exp" "$ck" || fail "the exported tensors are not the checkpoint's"
close "$tmp/e1.json" "$("${ref[@]}" loss "$tmp/exp" "$tmp/chat.jsonl.h5" --seq-len 16)" "the export"

# 4. Bad inputs: exit 2 on every rank, the message names the file and what is wrong.
for fault in shard index missing shape config; do
  name=$("${ref[@]}" break "$tmp/hf" "$tmp/bad_$fault" "$fault")
  expect_error "$fault" "bad_$fault.*${name//./\\.}" "$mpirun" --oversubscribe -np 2 "$meridian" train \
    --config "$tmp/sft.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/bad_$fault" --run-dir "$tmp/run_$fault"
done
printf 'task: {name: lm}\nmodel: {dim: 64}\n' >"$tmp/wide.yaml"
expect_error "model key vs config.json" "model\.dim.*is 64.*config\.json field 'hidden_size' is 32" \
  "$meridian" train --config "$tmp/wide.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/hf" --run-dir "$tmp/run2"
expect_error "export over a directory" "exp: exists" "$meridian" export --checkpoint "$ck" --out "$tmp/exp"
# A failure after the export started (a --tokenizer directory without one) leaves nothing.
expect_error "export with no tokenizer in --tokenizer" "run_ddp: tokenizer: neither spiece.model" \
  "$meridian" export --checkpoint "$ck" --out "$tmp/exp2" --tokenizer "$tmp/run_ddp"
[[ ! -e $tmp/exp2 && ! -e $tmp/exp2.partial ]] || fail "a failed export left $(ls -d "$tmp"/exp2*)"
echo PASS
