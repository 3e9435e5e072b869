#!/usr/bin/env python3
"""Hugging Face's Llama for tests, from the real libraries: transformers (LlamaConfig,
LlamaForCausalLM, LlamaTokenizer, apply_chat_template, generate), tokenizers, safetensors and
sentencepiece's trainer. Needs meridian's Python environment (jobs/python-requirements-<track>.txt).

  hf_llama.py make DIR [--seed N] [--shard-bytes B] [--dtype bf16|f16|f32] [--tie]
                   [--shape HIDDEN,INTERMEDIATE,LAYERS,HEADS,KV_HEADS,VOCAB] [--no-bos-copy DIR2]
      a random small LlamaForCausalLM built by transformers from a LlamaConfig (32,48,2,4,2 and the
      tokenizer's vocabulary unless --shape; rope_theta 20000, so a reader that ignores
      rope_parameters shows), its weights drawn off their defaults (norm weights not 1), saved by
      save_pretrained as safetensors shards of at most B bytes (default 20000) with
      model.safetensors.index.json, plus a rotary_emb.inv_freq tensor per layer added to the shards
      and the index afterwards, as older checkpoints have. The tokenizer: a byte-fallback BPE
      SentencePiece model trained like Llama's (unk 0, bos 1, eos 2) wrapped by transformers'
      LlamaTokenizer (add_bos_token, legacy false) with Llama-2-chat's chat_template, saved by
      save_pretrained (tokenizer.json, and the template in tokenizer_config.json, as published
      Llama-2-chat has), and tokenizer.model beside it, as published Llama repositories have (it
      is no longer written by transformers 5). --no-bos-copy: DIR2, the same model with the
      tokenizer saved with add_bos_token false (tokenizer.json's post-processor writes no bos) and
      "legacy": true in tokenizer_config.json (a "▁" before every text after a special token).
  hf_llama.py check SPEC
      every comparison SPEC lists (one per line, fields separated by tabs), in one process:
        ids MODEL_DIR RECORDS DATASET.h5 TEMPLATE
            the dataset's /tokens, /loss_mask, /doc_offsets equal the records tokenised by the
            directory's tokenizer: Alpaca {instruction, input?, output} as Stanford Alpaca's
            train.py does (tokenizer(source + output + eos_token), no loss on the source's tokens),
            {text} the same with an empty source, {messages} by apply_chat_template with the
            directory's chat_template (TEMPLATE default) or Mistral-7B-Instruct-v0.1's (mistral),
            with loss on each assistant turn (the ids the rendering of the conversation up to the
            turn adds to its rendering up to the user turn before it).
        refuses MODEL_DIR RECORDS TEMPLATE
            apply_chat_template raises on some record of RECORDS (meridian refuses them too).
        loss MODEL_DIR DATASET.h5 SEQ_LEN MERIDIAN_EVAL.json WHAT
            LlamaForCausalLM.from_pretrained (float32; no missing or unexpected keys) over the
            dataset's pack windows (window k: tokens [kL, kL + L], targets with loss only, none
            across a document start): the mean cross-entropy of its logits (float64) equals
            meridian's eval_loss to 1e-5 over the same token count; transformers' own loss
            (labels=) agrees to 1e-5 too.
        generate MODEL_DIR PROMPT none|llama-2 N MERIDIAN_OUTPUT
            model.generate(do_sample=False, max_new_tokens=N) of tokenizer(PROMPT), or of
            apply_chat_template of one user turn: the same prompt and generated token ids as meridian
            generate logged (--log-level debug), and the same line "generated (N tokens, greedy):
            TEXT" (TEXT: tokenizer.decode(skip_special_tokens=True)).
        same DIR CHECKPOINT.h5
            the directory's tensors (safetensors) are the checkpoint's model/<name>: names, shapes,
            values equal.
      prints each measured difference; exit 1 when any check fails.
  hf_llama.py same DIR CHECKPOINT.h5
      the `same` check alone.
  hf_llama.py break SRC DST FAULT...
      copies of the model directory SRC, each with one fault (with several faults DST_FAULT each,
      else DST): shard (a shard file gone), index (the index naming a tensor no shard has), missing
      (a tensor gone from its shard and the index), shape (a tensor of the wrong shape), config
      (config.json's intermediate_size disagreeing with the tensors). Prints "FAULT NAME" per
      fault, NAME the tensor or file the error must mention. Uses safetensors, not transformers.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Mistral-7B-Instruct-v0.1's chat_template (its tokenizer_config.json): one bos, "[INST] user [/INST]",
# the answer as it is followed by eos; no system message.
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
# Llama-2-7b-chat-hf's chat_template (its tokenizer_config.json).
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
# Stanford Alpaca's PROMPT_DICT (train.py).
PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
                "Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


# ---- safetensors directories (the safetensors library; no transformers).
def weight_files(d):
    index = f"{d}/model.safetensors.index.json"
    if os.path.exists(index):
        return json.load(open(index)), sorted(set(json.load(open(index))["weight_map"].values()))
    return None, ["model.safetensors"]


def read_weights(d):
    from safetensors.torch import load_file
    out = {}
    for f in weight_files(d)[1]:
        out.update(load_file(f"{d}/{f}"))
    return out


def add_inv_freq(d, config):
    """rotary_emb.inv_freq per layer, as checkpoints written before transformers 4.3x carry, into the
    shard holding the layer's o_proj (and the index)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    index, files = weight_files(d)
    head = config.hidden_size // config.num_attention_heads
    inv = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, head, 2).float() / head))
    for f in files:
        with safe_open(f"{d}/{f}", "pt") as s:
            tensors = {k: s.get_tensor(k) for k in s.keys()}
            meta = s.metadata()
        extra = {k.replace("o_proj.weight", "rotary_emb.inv_freq"): inv.clone()
                 for k in tensors if k.endswith("self_attn.o_proj.weight")}
        if extra:
            save_file({**tensors, **extra}, f"{d}/{f}", metadata=meta)
            if index:
                index["weight_map"].update({k: f for k in extra})
    if index:
        json.dump(index, open(f"{d}/model.safetensors.index.json", "w"), indent=2)


def make(d, seed, shard_bytes, dtype, tie, shape=None, no_bos_copy=None):
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    torch.manual_seed(seed)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = ("the a river runway field harbor forest road bridge count add reverse letters words numbers answer "
             "question Write explain list three two one green blue aerial image shows many few cars planes").split()
    stage = tempfile.mkdtemp()
    try:
        with open(f"{stage}/corpus.txt", "w") as corpus:
            for _ in range(600):
                corpus.write(" ".join(rng.choice(words, size=rng.integers(3, 14))) + ".\n")
        # As Llama's tokenizer.model: BPE with byte fallback, the text as it is (identity normaliser,
        # a dummy prefix space, whitespace kept), digits split; unk 0, bos 1, eos 2, no pad.
        subprocess.run(["spm_train", f"--input={stage}/corpus.txt", f"--model_prefix={stage}/tokenizer",
                        "--vocab_size=400", "--model_type=bpe", "--byte_fallback=true",
                        "--normalization_rule_name=identity", "--add_dummy_prefix=true",
                        "--remove_extra_whitespaces=false", "--split_digits=true", "--unk_id=0", "--bos_id=1",
                        "--eos_id=2", "--pad_id=-1", "--character_coverage=1.0",
                        "--allow_whitespace_only_pieces=true", "--hard_vocab_limit=false", "--minloglevel=2"],
                       check=True, capture_output=True)
        # transformers converts tokenizer.model (SentencePieceExtractor) when it loads a directory with it.
        json.dump({"tokenizer_class": "LlamaTokenizer"}, open(f"{stage}/tokenizer_config.json", "w"))
        tok = LlamaTokenizer.from_pretrained(stage, add_bos_token=True, add_eos_token=False, legacy=False)
        tok.chat_template = LLAMA2_TEMPLATE
        tok.save_pretrained(d, save_jinja_files=False)
        shutil.copy(f"{stage}/tokenizer.model", f"{d}/tokenizer.model")
        if no_bos_copy:
            os.makedirs(no_bos_copy, exist_ok=True)
            nobos = LlamaTokenizer.from_pretrained(stage, add_bos_token=False, add_eos_token=False, legacy=True)
            nobos.chat_template = LLAMA2_TEMPLATE
            nobos.save_pretrained(no_bos_copy, save_jinja_files=False)
            shutil.copy(f"{stage}/tokenizer.model", f"{no_bos_copy}/tokenizer.model")
            path = f"{no_bos_copy}/tokenizer_config.json"  # save_pretrained drops legacy (v5 default false)
            json.dump({**json.load(open(path)), "legacy": True}, open(path, "w"), indent=2)
    finally:
        shutil.rmtree(stage)

    hidden, inter, layers, heads, kv, vocab = shape or (32, 48, 2, 4, 2, len(tok))
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=128,
                         rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 20000.0},
                         tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2, pad_token_id=None)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # off transformers' init (std 0.02, norms 1), so a wrong norm shows
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.1) + (1.0 if name.endswith("norm.weight") else 0))
    # As published Llama-2's generation_config.json (generate with do_sample=False overrides it).
    model.generation_config.do_sample, model.generation_config.temperature = True, 0.6
    model.generation_config.top_p, model.generation_config.max_length = 0.9, 4096
    model.to({"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype])
    model.save_pretrained(d, max_shard_size=shard_bytes)
    add_inv_freq(d, config)
    if no_bos_copy:
        for f in os.listdir(d):
            if not f.startswith("tokenizer"):
                shutil.copy(f"{d}/{f}", f"{no_bos_copy}/{f}")
    print(f"{d}: {model.num_parameters()} parameters, vocab {vocab}, {len(weight_files(d)[1])} weight file(s), "
          f"{dtype}")


# ---- the comparisons.
def read_records(path):
    text = open(path, encoding="utf-8").read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def chat_ids(tok, messages, template):
    def render(m):
        out = tok.apply_chat_template(m, tokenize=True, chat_template=template)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    ids = render(messages)
    mask = [0] * len(ids)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before, through = render(messages[:i]), render(messages[:i + 1])
        if ids[:len(before)] != before or ids[:len(through)] != through:
            raise AssertionError(f"the rendering up to message {i} is not a prefix of the conversation's ids")
        mask[len(before):len(through)] = [1] * (len(through) - len(before))
    return ids, mask


class Check:
    def __init__(self):
        self.failures = []
        self.tokenizers, self.models = {}, {}

    def fail(self, what):
        print(f"FAIL: {what}")
        self.failures.append(what)

    def tokenizer(self, d):
        from transformers import AutoTokenizer
        if d not in self.tokenizers:
            self.tokenizers[d] = AutoTokenizer.from_pretrained(d)
        return self.tokenizers[d]

    def model(self, d):
        import torch
        from transformers import LlamaForCausalLM
        if d not in self.models:
            model, info = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
            bad = {k: v for k, v in info.items() if v}
            print(f"{d}: LlamaForCausalLM.from_pretrained loading info: "
                  f"{bad or 'no missing, unexpected or mismatched keys'}")
            if bad:
                self.fail(f"{d}: from_pretrained: {bad}")
            self.models[d] = model.eval()
        return self.models[d]

    def ids(self, model_dir, records, dataset, template):
        import h5py
        tok = self.tokenizer(model_dir)
        chat = MISTRAL_TEMPLATE if template == "mistral" else None
        want_tokens, want_mask, want_offsets = [], [], [0]
        for r in read_records(records):
            if "messages" in r:
                ids, mask = chat_ids(tok, r["messages"], chat)
            else:  # Stanford Alpaca's train.py: tokenizer(source + target) with target = output + eos_token
                if "instruction" in r:
                    source = (PROMPT_INPUT if r.get("input", "") != "" else PROMPT_NO_INPUT).format_map(r)
                    target = r["output"]
                else:
                    source, target = "", r["text"]
                ids = tok(source + target + tok.eos_token)["input_ids"]
                prompt = len(tok(source)["input_ids"])
                mask = [0] * prompt + [1] * (len(ids) - prompt)
            want_tokens += ids
            want_mask += mask
            want_offsets.append(len(want_tokens))
        with h5py.File(dataset, "r") as f:
            got = {k: f[k][...].tolist() for k in ("doc_offsets", "tokens", "loss_mask")}
        what = f"{os.path.basename(dataset)} ({template} template, {os.path.basename(model_dir)})"
        for name, want in (("doc_offsets", want_offsets), ("tokens", want_tokens), ("loss_mask", want_mask)):
            if got[name] != want:
                at = next((i for i, (a, b) in enumerate(zip(got[name], want)) if a != b),
                          min(len(got[name]), len(want)))
                return self.fail(f"{what}: {name} differs from transformers' at {at} (lengths {len(got[name])} vs "
                                 f"{len(want)}): meridian {got[name][at:at + 8]}, transformers {want[at:at + 8]}")
        print(f"{what}: {len(want_offsets) - 1} documents, {len(want_tokens)} tokens, {sum(want_mask)} with loss: "
              f"equal to transformers' (0 differences)")

    def refuses(self, model_dir, records, template):
        tok = self.tokenizer(model_dir)
        errors = []
        for r in read_records(records):
            if "messages" in r:
                try:
                    tok.apply_chat_template(r["messages"], tokenize=False,
                                            chat_template=MISTRAL_TEMPLATE if template == "mistral" else None)
                except Exception as e:  # jinja2's TemplateError from raise_exception
                    errors.append(str(e))
        if not errors:
            return self.fail(f"{records}: apply_chat_template ({template}) renders every record; meridian refuses")
        print(f"{os.path.basename(records)} ({template}): apply_chat_template refuses it too: {errors[0]}")

    def loss(self, model_dir, dataset, seq_len, meridian_json, what):
        import h5py
        import numpy as np
        import torch
        import torch.nn.functional as F
        seq_len = int(seq_len)
        with h5py.File(dataset, "r") as f:
            tokens = torch.from_numpy(f["tokens"][...].astype(np.int64))
            mask = f["loss_mask"][...].astype(bool)
            starts = set(f["doc_offsets"][...].tolist())
        windows = (len(tokens) - 1) // seq_len
        x = torch.stack([tokens[k * seq_len:k * seq_len + seq_len + 1] for k in range(windows)])  # [W, L + 1]
        labels = x.clone()
        for k in range(windows):
            for t in range(1, seq_len + 1):
                at = k * seq_len + t
                if not mask[at] or at in starts:
                    labels[k, t] = -100
        model = self.model(model_dir)
        with torch.no_grad():
            out = model(input_ids=x, labels=labels)  # transformers shifts the labels itself
        logits, target = out.logits[:, :-1].double(), labels[:, 1:]
        total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100,
                                reduction="sum").item()
        count = int((target != -100).sum())
        ref = total / max(count, 1)
        m = json.load(open(meridian_json))["metrics"]
        err, own = abs(m["eval_loss"] - ref), abs(out.loss.item() - ref)
        print(f"{what}: {windows} windows of {seq_len}: meridian eval_loss {m['eval_loss']:.8f} "
              f"({int(m['eval_tokens'])} tokens), transformers {ref:.8f} ({count} tokens): |difference| {err:.2e} "
              f"(tolerance 1e-5); transformers' own loss (labels=) {out.loss.item():.8f}, {own:.2e} from it")
        if not (err <= 1e-5 and own <= 1e-5 and int(m["eval_tokens"]) == count):
            self.fail(f"{what}: meridian's loss differs from transformers'")

    def generate(self, model_dir, prompt, template, n, meridian_output):
        import torch
        tok, model = self.tokenizer(model_dir), self.model(model_dir)
        if template == "none":
            ids = tok(prompt)["input_ids"]
        else:
            out = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True,
                                          add_generation_prompt=True)
            ids = list(out["input_ids"] if hasattr(out, "keys") else out)
        x = torch.tensor([ids])
        with torch.no_grad():
            y = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=int(n),
                               pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
        if y and y[-1] == tok.eos_token_id:
            y = y[:-1]
        text = tok.decode(y, skip_special_tokens=True)
        want = f"generated ({len(y)} tokens, greedy): {text}"
        # split("\n"), not splitlines(): byte-fallback text may hold \x1c-\x1e, which splitlines() breaks at
        out = open(meridian_output, encoding="utf-8").read()
        lines = [ln for ln in out.split("\n") if ln.startswith("generated (")]
        got = lines[0] if lines else "(no 'generated' line)"
        m = re.search(r"token ids of the prompt \[([0-9, ]*)\], generated \[([0-9, ]*)\]", out)
        got_ids = [[int(v) for v in g.split(",") if v.strip()] for g in m.groups()] if m else None
        print(f"generate ({template}): transformers: prompt {ids}, generated {y} '{text}'; meridian: "
              f"{got_ids or '(no token ids logged)'} {got}")
        if got_ids != [ids, y] or got != want:
            self.fail(f"generate ({template}): meridian {got_ids} '{got}', transformers {[ids, y]} '{want}'")

    def same(self, d, checkpoint):
        import h5py
        import torch
        mine = read_weights(d)
        with h5py.File(checkpoint, "r") as f:
            theirs = {k: torch.from_numpy(f["model"][k][...]) for k in f["model"].keys()}
        if sorted(mine) != sorted(theirs):
            return self.fail(f"{d}: names differ from {checkpoint}: {sorted(set(mine) ^ set(theirs))[:10]}")
        shaped = [k for k in mine if mine[k].shape == theirs[k].shape]
        bad = [k for k in mine if k not in shaped or not torch.equal(mine[k].float(), theirs[k].float())]
        err = max((float((mine[k].float() - theirs[k].float()).abs().max()) for k in shaped), default=float("nan"))
        print(f"{d}: {len(mine)} tensors, {len(bad)} differ from the checkpoint's (max |difference| {err:.1e})")
        if bad:
            self.fail(f"{d}: tensors differ from the checkpoint's: {bad[:5]}")


def check(spec):
    c = Check()
    for line in open(spec, encoding="utf-8").read().splitlines():
        if line.strip():
            kind, *args = line.split("\t")
            try:
                getattr(c, kind)(*args)
            except Exception as e:  # a check that cannot run fails; the others still run
                c.fail(f"{kind} {args}: {type(e).__name__}: {e}")
    print(f"{len(c.failures)} check(s) failed" if c.failures else "every check passed")
    return 1 if c.failures else 0


def corrupt(src, dst, fault):
    import torch  # noqa: F401 (safetensors.torch)
    from safetensors import safe_open
    from safetensors.torch import save_file
    shutil.copytree(src, dst)
    index = json.load(open(f"{dst}/model.safetensors.index.json"))
    wm = index["weight_map"]

    def rewrite(file, change):
        with safe_open(f"{dst}/{file}", "pt") as s:
            tensors, meta = {k: s.get_tensor(k) for k in s.keys()}, s.metadata()
        save_file(dict(change(list(tensors.items()))), f"{dst}/{file}", metadata=meta)

    if fault == "shard":
        name = list(dict.fromkeys(wm.values()))[-1]
        os.unlink(f"{dst}/{name}")
    elif fault == "index":
        name = "model.layers.1.mlp.extra_proj.weight"
        wm[name] = wm["model.norm.weight"]
    elif fault == "missing":
        name = "model.layers.1.mlp.up_proj.weight"
        rewrite(wm.pop(name), lambda ts: [(k, v) for k, v in ts if k != name])
    elif fault == "shape":
        name = "model.layers.0.self_attn.k_proj.weight"
        rewrite(wm[name], lambda ts: [(k, v[:-1].contiguous() if k == name else v) for k, v in ts])
    elif fault == "config":
        config = json.load(open(f"{dst}/config.json"))
        config["intermediate_size"] = 56
        json.dump(config, open(f"{dst}/config.json", "w"))
        name = "model.layers.0.mlp.gate_proj.weight"
    else:
        raise SystemExit(f"break: unknown fault {fault}")
    json.dump(index, open(f"{dst}/model.safetensors.index.json", "w"), indent=2)
    print(fault, name)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "make":
        rest = [a for a in argv[3:] if a != "--tie"]
        args = dict(zip(rest[0::2], rest[1::2]))
        shape = tuple(int(v) for v in args["--shape"].split(",")) if "--shape" in args else None
        make(argv[2], int(args.get("--seed", 0)), int(args.get("--shard-bytes", 20000)), args.get("--dtype", "bf16"),
             "--tie" in argv, shape, args.get("--no-bos-copy"))
        return 0
    if cmd == "check":
        return check(argv[2])
    if cmd == "same":
        c = Check()
        c.same(argv[2], argv[3])
        return 1 if c.failures else 0
    if cmd == "break":
        faults = argv[4:]
        for fault in faults:
            corrupt(argv[2], argv[3] if len(faults) == 1 else f"{argv[3]}_{fault}", fault)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
