#!/usr/bin/env bash
# Usage: hf_llama_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — Llama in and out of Hugging Face's layout,
# against the real transformers (tests/models/hf_llama.py: one process makes the model, one at the end
# runs every comparison): a random small LlamaForCausalLM made by transformers from a LlamaConfig and
# saved by save_pretrained (BF16 shards with the index, config.json with dtype and rope_parameters
# (rope_theta 20000), generation_config.json), rotary_emb.inv_freq buffers added as older
# checkpoints have, its tokenizer (a byte-fallback BPE tokenizer.model wrapped by LlamaTokenizer)
# saved by save_pretrained (tokenizer.json, tokenizer_config.json with Llama-2-chat's chat_template)
# and tokenizer.model beside it, as published Llama repositories have.
#  1. `prep text --tokenizer DIR` of Alpaca's JSON array and of chat records (the directory's Llama-2
#     template, and Mistral-Instruct's named with --chat-template): token ids and loss masks equal
#     the transformers tokenizer's (Alpaca as Stanford Alpaca's train.py joins it; chats rendered by
#     apply_chat_template, loss on the assistant turns; plain text, one starting with a space); also
#     with a tokenizer saved with add_bos_token false (tokenizer.json writes no bos) and "legacy":
#     true. The mistral template refuses a system message, as apply_chat_template does.
#  2. `eval --model DIR` (the published model as it is; --init is the same) equals
#     LlamaForCausalLM.from_pretrained's loss (float32, no missing or unexpected keys) on the pack
#     windows of two datasets to 1e-5 (the mean over the windows; meridian prints no logits), and
#     `train --init DIR`'s step-0 evaluation; `generate --model DIR` continues a prompt (as it is, and
#     in Llama-2-chat's template by apply_chat_template) with the prompt and generated token ids and
#     decoded text of model.generate(do_sample=False).
#  3. `train --init DIR` on 2 ranks with ZeRO-3 (read straight into the shards) ends where DDP
#     (the whole model loaded) does, bit for bit; `eval` of the checkpoint, `export` (f32, sharded):
#     the export holds the checkpoint's tensors, from_pretrained loads it with no missing or
#     unexpected keys, and its loss equals meridian's on the checkpoint to 1e-5.
#  4. Bad inputs exit 2 naming the file and tensor or field: a missing shard, the index naming a
#     tensor no shard has, a missing and a misshapen tensor, config.json disagreeing with the
#     tensors, rope_parameters with a scaling (linear), an explicit model key disagreeing with
#     config.json, export over a directory, a directory with tokenizer.json alone (what
#     save_pretrained writes; meridian reads tokenizer.model).
set -u
mpirun=$1 meridian=$2 src=$3
ref=(python3 "$src/tests/models/hf_llama.py")
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@" --log-level warn; }
run_info() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@" --log-level info; }
spec=$tmp/checks.tsv  # the comparisons with transformers, run together at the end (hf_llama.py check)
want() { (IFS=$'\t'; echo "$*") >>"$spec"; }

"${ref[@]}" make "$tmp/hf" --seed 5 --dtype bf16 --shard-bytes 8000 --no-bos-copy "$tmp/nobos" 2>"$tmp/make.err" ||
  { cat "$tmp/make.err"; fail "transformers could not make a model"; }
ls "$tmp/hf"/model-0000*-of-*.safetensors >/dev/null 2>&1 || fail "the model is not sharded"

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
  want ids "$tmp/hf" "$tmp/$set" "$tmp/$set.h5" default
done
# A template named on the command line: Mistral-Instruct's (one bos, eos after each answer, answers
# as they are); it has no system message. The text starting with a space gets no "▁" before it.
grep -v '"system"' "$tmp/chat.jsonl" >"$tmp/mistral.jsonl"
cat >>"$tmp/mistral.jsonl" <<'JSON'
{"messages": [{"role": "user", "content": "Name the scene. "}, {"role": "assistant", "content": " Farmland."}, {"role": "user", "content": "And the color?"}, {"role": "assistant", "content": "Green and brown"}]}
{"text": " A road by the field."}
JSON
run prep text --jsonl "$tmp/mistral.jsonl" --tokenizer "$tmp/hf" --chat-template mistral --out "$tmp/mistral.h5" \
  >/dev/null || fail "prep text --chat-template mistral exited $?"
want ids "$tmp/hf" "$tmp/mistral.jsonl" "$tmp/mistral.h5" mistral
expect_error "a system message in the mistral template" "chat.jsonl.*mistral chat template has no system" \
  "$mpirun" --oversubscribe -np 2 "$meridian" prep text --jsonl "$tmp/chat.jsonl" --tokenizer "$tmp/hf" \
  --chat-template mistral --out "$tmp/bad_template.h5"
[[ ! -e $tmp/bad_template.h5 ]] || fail "a refused prep left $tmp/bad_template.h5"
want refuses "$tmp/hf" "$tmp/chat.jsonl" mistral
# The tokenizer saved with add_bos_token false (no bos before instructions and plain text, as
# tokenizer(text) then adds none; the chat templates write theirs) and "legacy": true (a "▁" before
# the text after each of the template's special tokens).
for set in alpaca.json chat.jsonl; do
  run prep text --jsonl "$tmp/$set" --tokenizer "$tmp/nobos" --out "$tmp/nobos_$set.h5" >/dev/null || fail "prep text $set (no bos) exited $?"
  want ids "$tmp/nobos" "$tmp/$set" "$tmp/nobos_$set.h5" default
done

# 2. The published model evaluated as it is (on 2 ranks an even number of windows: an evaluation
# leaves out at most ranks - 1 windows of the tail).
"$mpirun" -np 1 "$meridian" eval --init "$tmp/hf" --data "$tmp/chat.jsonl.h5" --seq-len 16 --json "$tmp/e0.json" \
  --log-level warn >/dev/null || fail "eval --init exited $?"
want loss "$tmp/hf" "$tmp/chat.jsonl.h5" 16 "$tmp/e0.json" "eval --init"
"$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$tmp/hf" --data "$tmp/chat.jsonl.h5" --seq-len 16 \
  --json "$tmp/e0m.json" --log-level warn >/dev/null || fail "eval --model exited $?"
want loss "$tmp/hf" "$tmp/chat.jsonl.h5" 16 "$tmp/e0m.json" "eval --model on 2 ranks"
"$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$tmp/hf" --data "$tmp/alpaca.json.h5" --seq-len 32 \
  --json "$tmp/e0a.json" --log-level warn >/dev/null || fail "eval --model (alpaca) exited $?"
want loss "$tmp/hf" "$tmp/alpaca.json.h5" 32 "$tmp/e0a.json" "eval --model on the Alpaca set"
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
  out=$("$meridian" generate --model "$tmp/hf" --prompt "$prompt" --chat-template "$template" --max-new-tokens 8 \
    --log-level debug 2>&1) ||
    { echo "$out"; fail "generate --model --chat-template $template exited"; }
  grep -q "generate: Hugging Face LlamaForCausalLM directory $tmp/hf" <<<"$out" || { echo "$out"; fail "generate does not say what it loaded"; }
  echo "$out" >"$tmp/generate_$template.txt"
  want generate "$tmp/hf" "$prompt" "$template" 8 "$tmp/generate_$template.txt"
done

# 3. Fine-tune from it (ZeRO-3), export, evaluate the export with transformers.
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
want same "$tmp/exp" "$ck"
want loss "$tmp/exp" "$tmp/chat.jsonl.h5" 16 "$tmp/e1.json" "the export"

# Every comparison with transformers, in one process.
"${ref[@]}" check "$spec" 2>"$tmp/check.err" || { tail -20 "$tmp/check.err"; fail "meridian differs from transformers (above)"; }

# 4. Bad inputs: exit 2 on every rank, the message names the file and what is wrong.
faults=(shard index missing shape config)
names=$("${ref[@]}" break "$tmp/hf" "$tmp/bad" "${faults[@]}") || fail "break exited $?"
for fault in "${faults[@]}"; do
  name=$(sed -n "s/^$fault //p" <<<"$names")
  [[ -n $name ]] || fail "break did not make the $fault fault: $names"
  expect_error "$fault" "bad_$fault.*${name//./\\.}" "$mpirun" --oversubscribe -np 2 "$meridian" train \
    --config "$tmp/sft.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/bad_$fault" --run-dir "$tmp/run_$fault"
done
# transformers 5's rope_parameters with a scaling meridian does not compute.
cp -r "$tmp/hf" "$tmp/bad_rope"
python3 -c 'import json, sys; p = sys.argv[1]; c = json.load(open(p)); c["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 20000.0}; json.dump(c, open(p, "w"))' \
  "$tmp/bad_rope/config.json"
expect_error "rope_parameters with linear scaling" "bad_rope/config\.json.*rope_parameters.*linear" \
  "$meridian" eval --model "$tmp/bad_rope" --data "$tmp/chat.jsonl.h5"
printf 'task: {name: lm}\nmodel: {dim: 64}\n' >"$tmp/wide.yaml"
expect_error "model key vs config.json" "model\.dim.*is 64.*config\.json field 'hidden_size' is 32" \
  "$meridian" train --config "$tmp/wide.yaml" --data "$tmp/alpaca.json.h5" --init "$tmp/hf" --run-dir "$tmp/run2"
expect_error "export over a directory" "exp: exists" "$meridian" export --checkpoint "$ck" --out "$tmp/exp"
# A failure after the export started (a --tokenizer directory without one) leaves nothing.
expect_error "export with no tokenizer in --tokenizer" "run_ddp: tokenizer: neither spiece.model" \
  "$meridian" export --checkpoint "$ck" --out "$tmp/exp2" --tokenizer "$tmp/run_ddp"
[[ ! -e $tmp/exp2 && ! -e $tmp/exp2.partial ]] || fail "a failed export left $(ls -d "$tmp"/exp2*)"
# What save_pretrained writes alone (tokenizer.json, no tokenizer.model): refused, saying so.
mkdir "$tmp/json_only" && cp "$tmp/hf"/tokenizer.json "$tmp/hf"/tokenizer_config.json "$tmp/json_only/"
expect_error "tokenizer.json without tokenizer.model" "json_only: tokenizer: .*tokenizer\.json alone is not read" \
  "$meridian" prep text --jsonl "$tmp/alpaca.json" --tokenizer "$tmp/json_only" --out "$tmp/json_only.h5"
echo PASS
