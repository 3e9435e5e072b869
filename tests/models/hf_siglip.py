#!/usr/bin/env python3
"""A second implementation of Hugging Face's SigLIP, for tests: written from transformers'
modeling_siglip.py, configuration_siglip.py, tokenization_siglip.py and image_processing_siglip.py
semantics with torch.nn modules (nn.MultiheadAttention in the pooling head, as transformers has it),
not from meridian's code. Needs torch and sentencepiece (meridian's Python environment, jobs/setup-node.sh).

  hf_siglip.py make DIR [--seed N] [--shard-bytes B] [--dtype bf16|f16|f32]
      a random small SiglipModel in the layout of a published one: config.json, the weights as
      safetensors shards with model.safetensors.index.json (one model.safetensors when they fit),
      spiece.model trained with spm_train, tokenizer_config.json, special_tokens_map.json,
      preprocessor_config.json.
  hf_siglip.py images DIR N SIZE
      N random RGB images of SIZE x SIZE px as binary PPM files (img_000.ppm, ...).
  hf_siglip.py check MODEL_DIR (--images DIR EMBED.h5 | --texts FILE EMBED.h5) [--tol T]
      this forward's embeddings (and, for texts, token ids) against `meridian embed`'s file; prints the
      largest absolute difference; exit 1 beyond the tolerance (default 1e-5).
  hf_siglip.py classify MODEL_DIR IMAGES_DIR PREDICT.csv CLASSES PROMPTS_JSON
      `meridian predict --classes`' CSV against this forward's zero-shot probabilities (each class's
      prompts averaged, SigLIP's sigmoid per class): the same top classes per image in the same order,
      probabilities within 2e-6 (the CSV's six decimals).
  hf_siglip.py same DIR CHECKPOINT.h5 [--bf16]
      exit 0 when the directory holds the checkpoint's weights (model/<name>): the same names and
      shapes, values equal (--bf16: equal to the checkpoint's rounded to bfloat16).
  hf_siglip.py break SRC DST missing|extra|shape|truncate|index|config
      a copy of the model directory SRC with one fault: a tensor missing (from its shard and the
      index), an unexpected tensor, a tensor of the wrong shape, a shard cut short, the index naming a
      file that is not there, config.json's text intermediate_size disagreeing with the tensors. Prints the
      name the error must mention.
"""
import json
import os
import re
import string
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"F32": (torch.float32, np.float32), "F16": (torch.float16, np.float16), "BF16": (torch.bfloat16, np.int16),
          "I64": (torch.int64, np.int64)}


# ---- safetensors, by hand (the format: u64 header length, JSON header, data).
def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        code = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}[t.dtype]
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        torch_type, np_type = DTYPES[e["dtype"]]
        a, b = e["data_offsets"]
        t = torch.from_numpy(np.frombuffer(data[a:b], dtype=np_type).copy()).reshape(e["shape"])
        out[name] = t.view(torch.bfloat16) if torch_type == torch.bfloat16 else t
    return out


def write_weights(d, tensors, shard_bytes):
    """The (name, tensor) list as transformers' save_pretrained writes it: model.safetensors, or shards
    of at most shard_bytes (a larger tensor alone) with model.safetensors.index.json. Returns the shards."""
    shards, size = [[]], 0
    for name, t in tensors:
        b = t.numel() * t.element_size()
        if shards[-1] and size + b > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, t))
        size += b
    if len(shards) == 1:
        write_safetensors(f"{d}/model.safetensors", shards[0])
    else:
        weight_map = {}
        for k, shard in enumerate(shards):
            name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(f"{d}/{name}", shard)
            weight_map.update({n: name for n, _ in shard})
        total = sum(t.numel() * t.element_size() for _, t in tensors)
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
                  open(f"{d}/model.safetensors.index.json", "w"), indent=2)
    return shards


def read_weights(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    out = {}
    for shard in dict.fromkeys(json.load(open(index))["weight_map"].values()):
        out.update(read_safetensors(os.path.join(d, shard)))
    return out


# ---- the model (transformers' SiglipModel semantics and names).
class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, w = c["num_attention_heads"], c["hidden_size"]
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(w, w) for _ in range(4))

    def forward(self, x):
        b, t, w = x.shape
        d = w // self.heads
        split = lambda y: y.view(b, t, self.heads, d).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        weights = torch.softmax(q @ k.transpose(2, 3) * d**-0.5, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, w))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1 = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.fc2 = nn.Linear(c["intermediate_size"], c["hidden_size"])

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.self_attn = Attention(c)
        self.layer_norm2 = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, c["hidden_size"]))
        self.attention = nn.MultiheadAttention(c["hidden_size"], c["num_attention_heads"], batch_first=True)
        self.layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x):
        h = self.attention(self.probe.repeat(x.shape[0], 1, 1), x, x)[0]
        return (h + self.mlp(self.layernorm(h)))[:, 0]


class Vision(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.patch_embedding = nn.Conv2d(3, c["hidden_size"], c["patch_size"], stride=c["patch_size"])
        self.embeddings.position_embedding = nn.Embedding((c["image_size"] // c["patch_size"]) ** 2, c["hidden_size"])
        self.encoder = Encoder(c)
        self.post_layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.head = Head(c)

    def forward(self, pixels):
        x = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        x = x + self.embeddings.position_embedding.weight
        return self.head(self.post_layernorm(self.encoder(x)))


class Text(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.token_embedding = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.embeddings.position_embedding = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.encoder = Encoder(c)
        self.final_layer_norm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.head = nn.Linear(c["hidden_size"], c.get("projection_size", c["hidden_size"]))

    def forward(self, ids):
        x = self.embeddings.token_embedding(ids) + self.embeddings.position_embedding.weight[: ids.shape[1]]
        return self.head(self.final_layer_norm(self.encoder(x))[:, -1])


TEXT_DEFAULTS = dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                     num_attention_heads=12, max_position_embeddings=64, layer_norm_eps=1e-6, pad_token_id=1)
VISION_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       image_size=224, patch_size=16, layer_norm_eps=1e-6)


class Siglip(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.text_config = {**TEXT_DEFAULTS, **config.get("text_config", {})}
        self.vision_config = {**VISION_DEFAULTS, **config.get("vision_config", {})}
        self.vision_model, self.text_model = Vision(self.vision_config), Text(self.text_config)
        self.logit_scale, self.logit_bias = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))


def load_model(d):
    model = Siglip(json.load(open(os.path.join(d, "config.json"))))
    weights = {k: v.float() for k, v in read_weights(d).items() if not k.endswith("position_ids")}
    model.load_state_dict(weights, strict=True)
    return model.eval()


# ---- SiglipTokenizer's rules: lower-case, punctuation removed, whitespace collapsed, eos, padding.
def tokenize(d, text, length):
    import sentencepiece as spm

    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "spiece.model"))
    if cfg.get("do_lower_case", True):
        text = text.lower()
    text = re.sub(r"\s+", " ", text.translate(str.maketrans("", "", string.punctuation))).strip()
    eos, pad = sp.piece_to_id(cfg.get("eos_token", "</s>")), sp.piece_to_id(cfg.get("pad_token", "</s>"))
    ids = sp.encode(text)[: length - 1] + [eos]
    return ids + [pad] * (length - len(ids))


def read_ppm(path):
    data = open(path, "rb").read()
    magic, w, h, maxval, rest = re.match(rb"(P6)\s+(\d+)\s+(\d+)\s+(\d+)\s(.*)", data, re.S).groups()
    return np.frombuffer(rest, dtype=np.uint8)[: int(w) * int(h) * 3].reshape(int(h), int(w), 3)


# ---- commands
def make(d, seed, shard_bytes, dtype):
    torch.manual_seed(seed)
    os.makedirs(d, exist_ok=True)
    words = "airport beach bridge building dense residential farmland forest freeway golf harbor intersection " \
            "parking lot river runway sparse storage tanks tennis court baseball diamond chaparral overpass " \
            "mobile home park medium agricultural buildings green trees many cars parked white planes"
    rng = np.random.default_rng(seed)
    vocab = words.split()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as corpus:
        for _ in range(400):
            corpus.write(" ".join(rng.choice(vocab, size=rng.integers(3, 12))) + ".\n")
    # A T5-style model: pad 0, eos 1, unk 2 (as SigLIP's spiece.model).
    subprocess.run(["spm_train", f"--input={corpus.name}", f"--model_prefix={d}/spiece", "--vocab_size=120",
                    "--model_type=unigram", "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1",
                    "--character_coverage=1.0", "--hard_vocab_limit=false", "--minloglevel=2"], check=True, capture_output=True)
    os.unlink(corpus.name)
    os.unlink(f"{d}/spiece.vocab")
    config = {
        "architectures": ["SiglipModel"], "model_type": "siglip", "initializer_factor": 1.0,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype],
        # hidden_act and layer_norm_eps left out: transformers' defaults apply.
        "text_config": {"model_type": "siglip_text_model", "vocab_size": 120, "hidden_size": 32,
                        "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "max_position_embeddings": 16},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
    }
    model = Siglip(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # not the defaults: layer norms and biases off 1 and 0
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if name.endswith("norm.weight") or
                    re.search(r"layer_norm\d\.weight|layernorm\.weight", name) else 0.0))
        model.logit_scale.fill_(2.3)
        model.logit_bias.fill_(-10.0)
    store = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    tensors = [(k, v.detach().to(store)) for k, v in model.state_dict().items()]
    tensors.append(("text_model.embeddings.position_ids", torch.arange(16).unsqueeze(0)))
    shards = write_weights(d, tensors, shard_bytes)
    json.dump(config, open(f"{d}/config.json", "w"), indent=2)
    json.dump({"model_max_length": 16, "do_lower_case": True, "eos_token": "</s>", "pad_token": "</s>",
               "unk_token": "<unk>", "tokenizer_class": "SiglipTokenizer"}, open(f"{d}/tokenizer_config.json", "w"))
    json.dump({"eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"},
              open(f"{d}/special_tokens_map.json", "w"))
    json.dump({"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
               "image_std": [0.5, 0.5, 0.5], "image_processor_type": "SiglipImageProcessor", "resample": 3,
               "rescale_factor": 1 / 255, "size": {"height": 32, "width": 32}},
              open(f"{d}/preprocessor_config.json", "w"))
    print(f"{d}: {sum(p.numel() for p in model.parameters())} parameters, {len(shards)} weight file(s), {dtype}")


def images(d, n, size):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    for i in range(n):
        pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
        with open(f"{d}/img_{i:03d}.ppm", "wb") as f:
            f.write(b"P6\n%d %d\n255\n" % (size, size) + pixels.tobytes())


def check(model_dir, kind, inputs, h5_path, tol):
    import h5py

    model = load_model(model_dir)
    pre = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
    with h5py.File(h5_path, "r") as f:
        got = f["embeddings"][...]
        names = [n.decode() if isinstance(n, bytes) else n for n in f["names"][...]]
        tokens = f["tokens"][...] if "tokens" in f else None
    with torch.no_grad():
        if kind == "images":
            assert names == sorted(names), "names not in file order"
            px = np.stack([read_ppm(os.path.join(inputs, n)) for n in names]).astype(np.float32)
            px = (px * pre["rescale_factor"] - np.array(pre["image_mean"])) / np.array(pre["image_std"])
            want = model.vision_model(torch.from_numpy(px.astype(np.float32)).permute(0, 3, 1, 2))
        else:
            lines = [l.rstrip("\n") for l in open(inputs, encoding="utf-8") if l.strip()]
            assert names == lines, f"names {names[:3]} differ from the lines {lines[:3]}"
            ids = [tokenize(model_dir, line, model.text_config["max_position_embeddings"]) for line in lines]
            if tokens is None or tokens.tolist() != ids:
                print(f"FAIL: token ids differ; first row meridian {tokens[0].tolist() if tokens is not None else None}"
                      f" reference {ids[0]}")
                return 1
            want = model.text_model(torch.tensor(ids))
        want = F.normalize(want, dim=-1).numpy()
    diff = float(np.abs(want - got).max()) if want.shape == got.shape else float("inf")
    print(f"{kind}: {got.shape[0]} embeddings of {got.shape[1]}; max abs difference to the reference {diff:.3g}")
    return 0 if diff <= tol else 1


def classify(model_dir, img_dir, csv_path, classes, prompts, tol):
    """Zero-shot probabilities as SigLIP's zero-shot recipe computes them: each class's prompts embedded and
    L2-normalised, their mean normalised again; sigmoid(exp(logit_scale) * cosine + logit_bias) per class.
    Compares the top classes of each image, in order, and their probabilities with `predict`'s CSV."""
    import csv

    model = load_model(model_dir)
    pre = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
    names = sorted(n for n in os.listdir(img_dir) if n.endswith(".ppm"))
    length = model.text_config["max_position_embeddings"]
    with torch.no_grad():
        px = np.stack([read_ppm(os.path.join(img_dir, n)) for n in names]).astype(np.float32)
        px = (px * pre["rescale_factor"] - np.array(pre["image_mean"])) / np.array(pre["image_std"])
        img = F.normalize(model.vision_model(torch.from_numpy(px.astype(np.float32)).permute(0, 3, 1, 2)), dim=-1)
        cls = torch.stack([F.normalize(F.normalize(model.text_model(torch.tensor(
            [tokenize(model_dir, p.replace("{}", c, 1), length) for p in prompts])), dim=-1).mean(0), dim=0)
            for c in classes])
        probs = torch.sigmoid(img @ cls.t() * model.logit_scale.exp() + model.logit_bias)
    rows = list(csv.DictReader(open(csv_path)))
    k = len(rows) // len(names)
    worst = 0.0
    for i, name in enumerate(names):
        mine = [r for r in rows if r["image"] == name]
        want = probs[i].argsort(descending=True)[:k].tolist()
        if [r["class"] for r in mine] != [classes[j] for j in want] or [int(r["rank"]) for r in mine] != list(range(1, k + 1)):
            print(f"FAIL: {name}: {[r['class'] for r in mine]} vs the reference's {[classes[j] for j in want]}")
            return 1
        worst = max(worst, max(abs(float(r["probability"]) - float(probs[i, j])) for r, j in zip(mine, want)))
    print(f"{len(names)} images, top {k} of {len(classes)} classes: the reference's order; max |p - p_ref| {worst:.2g}")
    return 0 if worst <= tol else 1


def same(d, checkpoint, bf16):
    import h5py

    mine = {k: v for k, v in read_weights(d).items() if not k.endswith("position_ids")}
    with h5py.File(checkpoint, "r") as f:
        theirs = {k: torch.from_numpy(f["model"][k][...]) for k in f["model"].keys()}
    if sorted(mine) != sorted(theirs):
        print("FAIL: names differ:", sorted(set(mine) ^ set(theirs))[:10])
        return 1
    want_type = torch.bfloat16 if bf16 else torch.float32
    bad = [k for k in mine if mine[k].dtype != want_type or mine[k].shape != theirs[k].shape or
           not torch.equal(mine[k].float(), theirs[k].to(want_type).float())]
    print(f"{len(mine)} tensors, {len(bad)} differ from the checkpoint {bad[:5]}")
    return 1 if bad else 0


def faulty_copy(src, dst):
    """A copy of the sharded model directory src at dst, for one fault: its index (saved back by
    save_index) and rewrite(shard, change), which replaces a shard's (name, tensor) list by change's."""
    import shutil

    shutil.copytree(src, dst)
    index_path = f"{dst}/model.safetensors.index.json"
    index = json.load(open(index_path))

    def rewrite(shard, change):
        tensors = read_safetensors(f"{dst}/{shard}")
        write_safetensors(f"{dst}/{shard}", change(list(tensors.items())))

    return index, lambda: json.dump(index, open(index_path, "w")), rewrite


def corrupt(src, dst, fault):
    index, save_index, rewrite = faulty_copy(src, dst)
    wm = index["weight_map"]

    if fault == "missing":
        name = "text_model.head.bias"
        rewrite(wm.pop(name), lambda ts: [(k, v) for k, v in ts if k != name])
    elif fault == "extra":
        name = "vision_model.head.extra_scale"
        shard = wm["logit_scale"]
        rewrite(shard, lambda ts: ts + [(name, torch.ones(1, dtype=torch.bfloat16))])
        wm[name] = shard
    elif fault == "shape":
        name = "text_model.head.weight"
        rewrite(wm[name], lambda ts: [(k, v[:, :-1].contiguous() if k == name else v) for k, v in ts])
    elif fault == "truncate":
        name = list(dict.fromkeys(wm.values()))[-1]
        data = open(f"{dst}/{name}", "rb").read()
        open(f"{dst}/{name}", "wb").write(data[:-10])
    elif fault == "index":
        name = "model-00009-of-00009.safetensors"
        wm["logit_bias"] = name
    elif fault == "config":
        config = json.load(open(f"{dst}/config.json"))
        config["text_config"]["intermediate_size"] = 56
        json.dump(config, open(f"{dst}/config.json", "w"))
        name = "text_model.encoder.layers.0.mlp.fc1.weight"
    save_index()
    print(name)


def main(argv):
    cmd = argv[1]
    if cmd == "make":
        args = dict(zip(argv[3::2], argv[4::2]))
        make(argv[2], int(args.get("--seed", 0)), int(args.get("--shard-bytes", 20000)), args.get("--dtype", "bf16"))
        return 0
    if cmd == "images":
        images(argv[2], int(argv[3]), int(argv[4]))
        return 0
    if cmd == "check":
        tol = float(argv[argv.index("--tol") + 1]) if "--tol" in argv else 1e-5
        kind = "images" if "--images" in argv else "texts"
        i = argv.index("--" + kind)
        return check(argv[2], kind, argv[i + 1], argv[i + 2], tol)
    if cmd == "same":
        return same(argv[2], argv[3], "--bf16" in argv)
    if cmd == "classify":
        return classify(argv[2], argv[3], argv[4], argv[5].split(","), json.loads(argv[6]), 2e-6)
    if cmd == "break":
        corrupt(argv[2], argv[3], argv[4])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
