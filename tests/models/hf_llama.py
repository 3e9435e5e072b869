#!/usr/bin/env python3
"""A second implementation of Hugging Face's Llama, for tests: written from transformers'
modeling_llama.py, configuration_llama.py and the Llama-2 chat template semantics, and Stanford
Alpaca's train.py tokenisation, with torch.nn modules and sentencepiece's Python encoder; not from
meridian's code. Needs torch, sentencepiece and h5py (meridian's Python environment, jobs/setup-node.sh).

  hf_llama.py make DIR [--seed N] [--shard-bytes B] [--dtype bf16|f16|f32] [--tie]
                   [--shape HIDDEN,INTERMEDIATE,LAYERS,HEADS,KV_HEADS,VOCAB]
      a random small LlamaForCausalLM in the layout of a published one (meta-llama/Llama-2-7b-hf):
      config.json, the weights as safetensors shards with model.safetensors.index.json (one
      model.safetensors when they fit) and a rotary_emb.inv_freq buffer per layer as older
      checkpoints have, tokenizer.model (a byte-fallback BPE SentencePiece model like Llama's:
      unk 0, bos 1, eos 2), tokenizer_config.json, special_tokens_map.json, generation_config.json.
      --shape: other sizes (32,48,2,4,2,<the tokenizer's>; e.g. llama-1b's for the loading benchmark).
  hf_llama.py ids MODEL_DIR RECORDS DATASET.h5 [--chat-template llama-2|mistral]
      the documents of RECORDS (a JSON array or JSON Lines of Alpaca {instruction, input?, output},
      chat {messages} or {text} records) tokenised as Hugging Face fine-tuning scripts do (bos +
      the joined prompt and response + eos, no loss on bos and the prompt's own tokens; a chat in the
      Llama-2 template, one such exchange per assistant turn; or Mistral-Instruct's template, rendered
      and split at <s> and </s> as transformers does) with sentencepiece's Python encoder,
      against the dataset's /tokens, /loss_mask and /doc_offsets; exit 1 on any difference.
  hf_llama.py loss MODEL_DIR DATASET.h5 --seq-len L
      this forward's mean next-token cross-entropy over the dataset's pack windows of L tokens
      (meridian's data.mode pack: window k holds tokens [kL, kL + L], targets with loss only, none
      across a document start); prints "loss <value> tokens <count>".
  hf_llama.py generate MODEL_DIR PROMPT none|llama-2 N
      this forward's greedy continuation of PROMPT (as it is, or in Llama-2-chat's template for one
      user turn) by at most N tokens, stopping at eos; prints "<count> tokens: <text>".
  hf_llama.py same DIR CHECKPOINT.h5
      exit 0 when the directory holds the checkpoint's weights (model/<name>): the same names and
      shapes, values equal.
  hf_llama.py break SRC DST shard|index|missing|shape|config
      a copy of the model directory SRC with one fault: a shard file gone, the index naming a tensor
      no shard has, a tensor missing (from its shard and the index), a tensor of the wrong shape,
      config.json's intermediate_size disagreeing with the tensors. Prints the name the error must
      mention.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_siglip import faulty_copy, read_weights, write_weights  # noqa: E402 (safetensors by hand)


# ---- the model (transformers' LlamaForCausalLM semantics and names).
class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.head_dim = c["hidden_size"] // self.heads
        self.q_proj = nn.Linear(c["hidden_size"], self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c["hidden_size"], self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c["hidden_size"], self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c["hidden_size"], bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads  # repeat_kv
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores + torch.full((t, t), float("-inf")).triu(1)
        attn = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((attn @ v).transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], c["hidden_size"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn, self.mlp = Attention(c), MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Decoder(c)
        self.tied = c.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, tokens):
        d = self.c["hidden_size"] // self.c["num_attention_heads"]
        inv_freq = 1.0 / (self.c.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        freqs = torch.outer(torch.arange(tokens.shape[1]).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        return x @ self.model.embed_tokens.weight.t() if self.tied else self.lm_head(x)


def load_model(d):
    c = json.load(open(f"{d}/config.json"))
    model = Llama(c)
    weights = {k: v for k, v in read_weights(d).items() if not k.endswith("rotary_emb.inv_freq")}
    if model.tied:
        weights.pop("lm_head.weight", None)
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
    return model.eval()


def make(d, seed, shard_bytes, dtype, tie, shape=None):
    torch.manual_seed(seed)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = ("the a river runway field harbor forest road bridge count add reverse letters words numbers answer "
             "question Write explain list three two one green blue aerial image shows many few cars planes").split()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as corpus:
        for _ in range(600):
            corpus.write(" ".join(rng.choice(words, size=rng.integers(3, 14))) + ".\n")
    # As Llama's tokenizer.model: BPE with byte fallback, the text as it is (identity normaliser,
    # a dummy prefix space, whitespace kept), digits split; unk 0, bos 1, eos 2, no pad.
    subprocess.run(["spm_train", f"--input={corpus.name}", f"--model_prefix={d}/tokenizer", "--vocab_size=400",
                    "--model_type=bpe", "--byte_fallback=true", "--normalization_rule_name=identity",
                    "--add_dummy_prefix=true", "--remove_extra_whitespaces=false", "--split_digits=true",
                    "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1", "--character_coverage=1.0",
                    "--allow_whitespace_only_pieces=true", "--hard_vocab_limit=false", "--minloglevel=2"],
                   check=True, capture_output=True)
    os.unlink(corpus.name)
    os.unlink(f"{d}/tokenizer.vocab")
    import sentencepiece as spm
    vocab = spm.SentencePieceProcessor(model_file=f"{d}/tokenizer.model").get_piece_size()
    hidden, inter, layers, heads, kv, vocab = shape or (32, 48, 2, 4, 2, vocab)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": tie, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None,
        "rope_scaling": None, "attention_bias": False, "initializer_range": 0.02, "pretraining_tp": 1,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype], "use_cache": True,
    }
    model = Llama(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # norms off 1, so a wrong norm shows
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.1) + (1.0 if name.endswith("norm.weight") else 0))
    store = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    tensors = []
    for k, v in model.state_dict().items():
        tensors.append((k, v.detach().to(store)))
        if k.endswith("self_attn.o_proj.weight"):  # a buffer older exports carry
            d_head = config["hidden_size"] // config["num_attention_heads"]
            inv = 1.0 / (10000 ** (torch.arange(0, d_head, 2).float() / d_head))
            tensors.append((k.replace("o_proj.weight", "rotary_emb.inv_freq"), inv))
    shards = write_weights(d, tensors, shard_bytes)
    json.dump(config, open(f"{d}/config.json", "w"), indent=2)
    added = lambda s: {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": False,  # noqa: E731
                       "rstrip": False, "single_word": False}
    json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": added("<s>"), "eos_token": added("</s>"),
               "unk_token": added("<unk>"), "pad_token": None, "clean_up_tokenization_spaces": False,
               "legacy": True, "model_max_length": 1000000000000000019884624838656,
               "tokenizer_class": "LlamaTokenizer", "sp_model_kwargs": {}},
              open(f"{d}/tokenizer_config.json", "w"), indent=2)
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
              open(f"{d}/special_tokens_map.json", "w"), indent=2)
    json.dump({"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
               "temperature": 0.6, "top_p": 0.9, "max_length": 4096, "do_sample": True},
              open(f"{d}/generation_config.json", "w"), indent=2)
    print(f"{d}: {sum(p.numel() for p in model.parameters())} parameters, vocab {vocab}, {len(shards)} weight "
          f"file(s), {dtype}")


# ---- the data (Stanford Alpaca's PROMPT_DICT and train.py; transformers' Llama-2 chat template).
def alpaca_prompt(r):
    if r.get("input", ""):
        return ("Below is an instruction that describes a task, paired with an input that provides further context. "
                "Write a response that appropriately completes the request.\n\n"
                f"### Instruction:\n{r['instruction']}\n\n### Input:\n{r['input']}\n\n### Response:\n")
    return ("Below is an instruction that describes a task. Write a response that appropriately completes the "
            f"request.\n\n### Instruction:\n{r['instruction']}\n\n### Response:\n")


def mistral_ids(sp, messages):
    """Mistral-7B-Instruct's chat template as transformers renders and tokenises it: the Jinja
    {{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}{{ '[INST] ' + m.content + ' [/INST]' }}
    {% else %}{{ m.content + eos_token }}{% endif %}{% endfor %}, then the string split at the special
    tokens <s> and </s> and each piece between encoded by SentencePiece (LlamaTokenizer, legacy).
    Loss on the answers and their eos. Returns (ids, mask)."""
    assert all(m["role"] == ("user" if i % 2 == 0 else "assistant") for i, m in enumerate(messages))
    text = "<s>"
    for m in messages:
        text += "[INST] " + m["content"] + " [/INST]" if m["role"] == "user" else m["content"] + "</s>"
    ids, mask = [], []
    for piece in re.split(r"(<s>|</s>)", text):
        if piece in ("<s>", "</s>"):
            ids.append(sp.bos_id() if piece == "<s>" else sp.eos_id())
            mask.append(int(piece == "</s>"))
        elif piece:
            prompt = piece[:piece.index(" [/INST]") + len(" [/INST]")]
            joined = sp.encode(piece)
            source = len(sp.encode(prompt))
            ids += joined
            mask += [0] * source + [1] * (len(joined) - source)
    return ids, mask


def exchanges(r):
    """(prompt, response, bos) triples, each to become [bos] + ids(prompt + response) + eos: a chat
    template writes its bos_token itself; tokenizer(text) adds one when add_bos_token (None)."""
    if "messages" in r:
        m = r["messages"]
        system = m[0]["content"] if m[0]["role"] == "system" else None
        turns = m[1:] if system is not None else m
        out = []
        for i in range(0, len(turns), 2):  # {{ bos + '[INST] ' + content.strip() + ' [/INST]' }} ...
            content = turns[i]["content"]
            if i == 0 and system is not None:
                content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
            out.append(("[INST] " + content.strip() + " [/INST]", " " + turns[i + 1]["content"].strip() + " ", True))
        return out
    if "instruction" in r:
        return [(alpaca_prompt(r), r["output"], None)]
    return [("", r["text"], None)]


def read_records(path):
    text = open(path, encoding="utf-8").read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ids(model_dir, records, dataset, template="llama-2"):
    import h5py
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=f"{model_dir}/tokenizer.model")
    add_bos = json.load(open(f"{model_dir}/tokenizer_config.json")).get("add_bos_token", True)  # LlamaTokenizer's default
    want_tokens, want_mask, want_offsets = [], [], [0]
    for r in read_records(records):
        if template == "mistral" and "messages" in r:
            chat_ids, chat_mask = mistral_ids(sp, r["messages"])
            want_tokens += chat_ids
            want_mask += chat_mask
            want_offsets.append(len(want_tokens))
            continue
        for prompt, response, bos in exchanges(r):
            joined = sp.encode(prompt + response)
            source = len(sp.encode(prompt)) if prompt else 0
            head = [sp.bos_id()] if (add_bos if bos is None else bos) else []
            want_tokens += head + joined + [sp.eos_id()]
            want_mask += [0] * len(head) + [0] * source + [1] * (len(joined) - source) + [1]
        want_offsets.append(len(want_tokens))
    with h5py.File(dataset, "r") as f:
        tokens, mask, offsets = f["tokens"][...].tolist(), f["loss_mask"][...].tolist(), f["doc_offsets"][...].tolist()
    for name, got, want in (("doc_offsets", offsets, want_offsets), ("tokens", tokens, want_tokens),
                            ("loss_mask", mask, want_mask)):
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(f"FAIL: {name} differs at {at} (lengths {len(got)} vs {len(want)}): {got[at:at + 8]} vs "
                  f"{want[at:at + 8]}")
            return 1
    print(f"{len(want_offsets) - 1} documents, {len(want_tokens)} tokens, {sum(want_mask)} with loss: equal")
    return 0


def loss(model_dir, dataset, seq_len):
    import h5py

    with h5py.File(dataset, "r") as f:
        tokens = torch.from_numpy(f["tokens"][...].astype(np.int64))
        mask = torch.from_numpy(f["loss_mask"][...].astype(bool))
        starts = set(f["doc_offsets"][...].tolist())
    model = load_model(model_dir)
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range((len(tokens) - 1) // seq_len):
            a = k * seq_len
            x = tokens[a:a + seq_len]
            target = tokens[a + 1:a + seq_len + 1].clone()
            keep = torch.tensor([bool(mask[a + t + 1]) and (a + t + 1) not in starts for t in range(seq_len)])
            target[~keep] = -100
            logits = model(x.unsqueeze(0))[0]
            total += F.cross_entropy(logits.double(), target, ignore_index=-100, reduction="sum").item()
            count += int(keep.sum())
    print(f"loss {total / max(count, 1):.10f} tokens {count}")
    return 0


def generate(model_dir, prompt, template, max_new):
    """Greedy continuation of `prompt` put in `template` (none, or llama-2: transformers' chat template for
    one user turn, "[INST] " + content.strip() + " [/INST]"), with the bos tokenizer_config.json asks for."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=f"{model_dir}/tokenizer.model")
    cfg = json.load(open(f"{model_dir}/tokenizer_config.json")) if os.path.exists(f"{model_dir}/tokenizer_config.json") else {}
    text = prompt if template == "none" else "[INST] " + prompt.strip() + " [/INST]"
    ids = ([sp.bos_id()] if cfg.get("add_bos_token", True) else []) + sp.encode(text)
    model, out = load_model(model_dir), []
    with torch.no_grad():
        for _ in range(max_new):
            nxt = int(model(torch.tensor([ids + out]))[0, -1].argmax())
            if nxt == sp.eos_id():
                break
            out.append(nxt)
    print(f"{len(out)} tokens: {sp.decode(out)}")
    return 0


def same(d, checkpoint):
    import h5py

    mine = read_weights(d)
    with h5py.File(checkpoint, "r") as f:
        theirs = {k: torch.from_numpy(f["model"][k][...]) for k in f["model"].keys()}
    if sorted(mine) != sorted(theirs):
        print("FAIL: names differ:", sorted(set(mine) ^ set(theirs))[:10])
        return 1
    bad = [k for k in mine if mine[k].shape != theirs[k].shape or not torch.equal(mine[k].float(), theirs[k].float())]
    print(f"{len(mine)} tensors, {len(bad)} differ from the checkpoint {bad[:5]}")
    return 1 if bad else 0


def corrupt(src, dst, fault):
    index, save_index, rewrite = faulty_copy(src, dst)
    wm = index["weight_map"]

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
    save_index()
    print(name)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "make":
        rest = [a for a in argv[3:] if a != "--tie"]
        args = dict(zip(rest[0::2], rest[1::2]))
        shape = tuple(int(v) for v in args["--shape"].split(",")) if "--shape" in args else None
        make(argv[2], int(args.get("--seed", 0)), int(args.get("--shard-bytes", 20000)), args.get("--dtype", "bf16"),
             "--tie" in argv, shape)
        return 0
    if cmd == "ids":
        return ids(argv[2], argv[3], argv[4], argv[argv.index("--chat-template") + 1] if "--chat-template" in argv
                   else "llama-2")
    if cmd == "loss":
        return loss(argv[2], argv[3], int(argv[argv.index("--seq-len") + 1]))
    if cmd == "same":
        return same(argv[2], argv[3])
    if cmd == "generate":
        return generate(argv[2], argv[3], argv[4], int(argv[5]))
    if cmd == "break":
        corrupt(argv[2], argv[3], argv[4])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
