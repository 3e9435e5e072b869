#!/usr/bin/env python3
"""SigLIP by the real libraries, for tests/models/hf_siglip_mpi_test.sh: transformers' SiglipModel,
SiglipTokenizer and SiglipImageProcessor, open_clip's SigLipLoss, safetensors' reader and writer.
Nothing here computes the model itself. Only `make` and `verify` import transformers (one process each);
`images` needs numpy, `break` safetensors and torch.

  hf_siglip.py make DIR [--seed N] [--shard-bytes B] [--dtype bf16|f16|f32]
      a random small SiglipModel built by transformers from a SiglipConfig, its weights moved off their
      initial values (layer norms and biases not 1 and 0, logit_scale 2.3, logit_bias -10), saved by
      save_pretrained (safetensors shards of at most B bytes with model.safetensors.index.json, or one
      model.safetensors); SiglipTokenizer.save_pretrained over a spiece.model trained with spm_train;
      SiglipImageProcessor.save_pretrained (32 x 32 px, mean and std 0.5, bicubic).
  hf_siglip.py images DIR N WIDTH [HEIGHT]
      N random RGB images of WIDTH x HEIGHT px (HEIGHT: WIDTH) as binary PPM files (img_000.ppm, ...).
  hf_siglip.py break SRC DST_PREFIX FAULT...
      for each FAULT (missing|extra|shape|truncate|index|config) a copy DST_PREFIX<FAULT> of the sharded
      model directory SRC with that fault: a tensor missing (from its shard and the index), an
      unexpected tensor, a tensor of the wrong shape, a shard cut short, the index naming a file that
      is not there, config.json's text intermediate_size disagreeing with the tensors. Prints
      "FAULT NAME" per line, NAME what the error must mention.
  hf_siglip.py verify CHECKS
      every check listed in the file CHECKS (one per line, words separated by tabs), in one process;
      prints each check's measured error and exits 1 when any fails (after running them all):
        images MODEL IMG_DIR EMBED.h5         `meridian embed --images` against get_image_features of
            SiglipImageProcessor's pixels, L2-normalised, to 1e-5
        texts MODEL TEXTS EMBED.h5            `meridian embed --texts`: /tokens equal SiglipTokenizer(
            padding="max_length", truncation=True), embeddings get_text_features', to 1e-5
        pixels MODEL IMG_DIR                  SiglipImageProcessor (torchvision, transformers' default)
            against SiglipImageProcessorPil per image size: prints the largest difference (not asserted)
        loss MODEL METRICS.csv STEP IMG_DIR CAPTIONS DATA.h5   train's train/loss at STEP (its forward
            with MODEL's weights) on a batch that is the whole dataset (prep image-text of IMG_DIR and
            the CSV CAPTIONS) against SiglipModel(return_loss=True)'s loss and open_clip's SigLipLoss on
            transformers' embeddings, to 1e-5; the dataset's token ids against SiglipTokenizer's
        logits MODEL IMG.h5 TXT.h5            logits_per_image of SiglipModel against
            exp(logit_scale) * image @ text.T + logit_bias of meridian's embeddings, to 1e-5
        load MODEL                            from_pretrained(output_loading_info=True): no missing,
            unexpected or mismatched keys
        dtype MODEL DTYPE                     SiglipConfig.from_pretrained(MODEL).dtype is DTYPE
        classify MODEL IMG_DIR PREDICT.csv CLASSES PROMPTS_JSON   `meridian predict --classes`' CSV
            against SigLIP's zero-shot recipe with transformers' features (each class's prompts
            normalised and averaged, normalised again; sigmoid(exp(scale) cos + bias)): the same top
            classes in order, probabilities within 2e-6 (the CSV's six decimals)
        same DIR CHECKPOINT.h5 [bf16]         the export holds the checkpoint's tensors (read with
            safetensors.torch.load_file): the same names and shapes, values equal (bf16: the
            checkpoint's rounded to bfloat16)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# ---- safetensors files through the safetensors library (also imported by tests/train/lora_mpi_test.sh,
# tests/detect/ultralytics_mpi_test.sh and jobs/bench/llama-load-memory.sh).


def write_safetensors(path, tensors):
    """(name, tensor) pairs as one .safetensors file (tensors sharing memory are copied apart)."""
    from safetensors.torch import save_file

    out, seen = {}, set()
    for name, t in tensors:
        t = t.detach().contiguous()
        if t.numel() and t.data_ptr() in seen:
            t = t.clone()
        seen.add(t.data_ptr())
        out[name] = t
    save_file(out, path, metadata={"format": "pt"})


def read_safetensors(path):
    """{name: tensor} of one .safetensors file."""
    from safetensors.torch import load_file

    return load_file(path)


def read_weights(d):
    """Every tensor of a model directory (model.safetensors or the shards its index names)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    out = {}
    for shard in dict.fromkeys(json.load(open(index))["weight_map"].values()):
        out.update(read_safetensors(os.path.join(d, shard)))
    return out


def faulty_copy(src, dst):
    """A copy of the sharded model directory src at dst, for one fault: its index (saved back by
    save_index) and rewrite(shard, change), which replaces a shard's (name, tensor) list by change's."""
    shutil.copytree(src, dst)
    index_path = f"{dst}/model.safetensors.index.json"
    index = json.load(open(index_path))

    def rewrite(shard, change):
        tensors = read_safetensors(f"{dst}/{shard}")
        write_safetensors(f"{dst}/{shard}", change(list(tensors.items())))

    return index, lambda: json.dump(index, open(index_path, "w")), rewrite


# ---- commands without transformers


def images(d, n, width, height):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7 + 1000 * (width != 32) + height)
    for i in range(n):
        # Smooth and noisy parts, so that a resize filter shows in the pixels.
        y, x = np.mgrid[0:height, 0:width]
        base = 128 + 100 * np.sin(x[..., None] * rng.uniform(0.1, 0.6, 3) + y[..., None] * rng.uniform(0.1, 0.6, 3))
        noise = rng.integers(-60, 61, size=(height, width, 3))
        pixels = np.clip(base + noise * (i % 2), 0, 255).astype(np.uint8)
        with open(f"{d}/img_{i:03d}.ppm", "wb") as f:
            f.write(b"P6\n%d %d\n255\n" % (width, height) + pixels.tobytes())


def corrupt(src, dst, fault):
    import torch

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
    else:
        raise SystemExit(f"break: unknown fault {fault}")
    save_index()
    return name


# ---- make: transformers builds and saves the model


def make(d, seed, shard_bytes, dtype):
    import re

    import torch
    import transformers
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel, SiglipTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()

    torch.manual_seed(seed)
    os.makedirs(d, exist_ok=True)
    words = "airport beach bridge building dense residential farmland forest freeway golf harbor intersection " \
            "parking lot river runway sparse storage tanks tennis court baseball diamond chaparral overpass " \
            "mobile home park medium agricultural buildings green trees many cars parked white planes"
    rng = np.random.default_rng(seed)
    vocab = words.split()
    with tempfile.TemporaryDirectory() as work:
        with open(f"{work}/corpus.txt", "w") as corpus:
            for _ in range(400):
                corpus.write(" ".join(rng.choice(vocab, size=rng.integers(3, 12))) + ".\n")
        # A T5-style model: pad 0, eos 1, unk 2 (as SigLIP's spiece.model).
        subprocess.run(["spm_train", f"--input={work}/corpus.txt", f"--model_prefix={work}/spiece", "--vocab_size=120",
                        "--model_type=unigram", "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1",
                        "--character_coverage=1.0", "--hard_vocab_limit=false", "--minloglevel=2"], check=True,
                       capture_output=True)
        SiglipTokenizer(f"{work}/spiece.model", model_max_length=16).save_pretrained(d)
    # hidden_act and layer_norm_eps left to transformers' defaults.
    # The text tower's special ids: the tokenizer's (eos and pad </s>, no bos).
    config = SiglipConfig(
        text_config=dict(vocab_size=120, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=16, pad_token_id=1, eos_token_id=1,
                         bos_token_id=None),
        vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8))
    model = SiglipModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # not the defaults: layer norms and biases off 1 and 0
            norm = re.search(r"norm\d?\.weight$", name) is not None
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if norm else 0.0))
        model.logit_scale.fill_(2.3)
        model.logit_bias.fill_(-10.0)
    model.to({"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype])
    model.save_pretrained(d, max_shard_size=shard_bytes)
    SiglipImageProcessor(size={"height": 32, "width": 32}, resample=3, image_mean=[0.5, 0.5, 0.5],
                         image_std=[0.5, 0.5, 0.5]).save_pretrained(d)
    shards = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    print(f"{d}: {sum(p.numel() for p in model.parameters())} parameters, {len(shards)} weight file(s), {dtype}")


# ---- verify: every comparison with transformers and open_clip, in one process


class Verifier:
    def __init__(self):
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        self.models, self.failed = {}, []

    def model(self, d):
        if d not in self.models:
            from transformers import SiglipImageProcessor, SiglipImageProcessorPil, SiglipModel, SiglipTokenizer

            m = SiglipModel.from_pretrained(d, dtype=self.torch.float32).eval()
            self.models[d] = (m, SiglipTokenizer.from_pretrained(d), SiglipImageProcessor.from_pretrained(d),
                              SiglipImageProcessorPil.from_pretrained(d))
        return self.models[d]

    def result(self, what, error, tol):
        ok = error <= tol
        print(f"  {'ok  ' if ok else 'FAIL'} {what}: max abs error {error:.3g} (tolerance {tol:g})")
        if not ok:
            self.failed.append(what)

    @staticmethod
    def h5(path):
        import h5py

        with h5py.File(path, "r") as f:
            names = [n.decode() if isinstance(n, bytes) else n for n in f["names"][...]]
            return f["embeddings"][...], names, (f["tokens"][...] if "tokens" in f else None)

    @staticmethod
    def pictures(img_dir, names=None):
        from PIL import Image

        if names is None:  # every image under img_dir, as meridian lists them (relative paths, sorted)
            names = sorted(os.path.relpath(os.path.join(r, n), img_dir) for r, _, files in os.walk(img_dir)
                           for n in files if n.endswith(".ppm"))
        return names, [Image.open(os.path.join(img_dir, n)).convert("RGB") for n in names]

    def pixels(self, d, pictures):
        """SiglipImageProcessor's pixel values (transformers' default, torchvision) [N, 3, H, W]."""
        return self.model(d)[2](pictures, return_tensors="pt")["pixel_values"]

    def image_features(self, d, pictures):
        """get_image_features (the pooled output of the vision tower), L2-normalised [N, E]."""
        with self.torch.no_grad():
            out = self.model(d)[0].get_image_features(pixel_values=self.pixels(d, pictures)).pooler_output
        return self.torch.nn.functional.normalize(out, dim=-1)

    def tokens(self, d, texts):
        m, tok, *_ = self.model(d)
        length = m.config.text_config.max_position_embeddings
        return tok(texts, padding="max_length", max_length=length, truncation=True, return_tensors="pt")["input_ids"]

    def text_features(self, d, ids):
        m = self.model(d)[0]
        with self.torch.no_grad():
            out = m.get_text_features(input_ids=ids).pooler_output
        return self.torch.nn.functional.normalize(out, dim=-1)

    # -- the checks
    def check_images(self, d, img_dir, h5):
        got, names, _ = self.h5(h5)
        names, pics = self.pictures(img_dir, names)
        want = self.image_features(d, pics).numpy()
        err = float(np.abs(want - got).max()) if want.shape == got.shape else float("inf")
        sizes = ", ".join(sorted({f"{p.size[0]}x{p.size[1]}" for p in pics}))
        self.result(f"{len(names)} image embeddings of {os.path.basename(d)} ({sizes} px) vs meridian embed", err, 1e-5)

    def check_texts(self, d, texts, h5):
        got, names, tokens = self.h5(h5)
        lines = [line.rstrip("\n") for line in open(texts, encoding="utf-8") if line.strip()]
        if names != lines:
            self.failed.append(f"names {names[:3]} differ from the lines {lines[:3]}")
            return
        ids = self.tokens(d, lines)
        if tokens is None or tokens.tolist() != ids.tolist():
            bad = [i for i in range(len(lines)) if tokens is None or tokens[i].tolist() != ids[i].tolist()]
            print(f"  FAIL token ids of {len(bad)} of {len(lines)} texts differ from SiglipTokenizer's, e.g. "
                  f"{lines[bad[0]]!r}: meridian {None if tokens is None else tokens[bad[0]].tolist()}, "
                  f"transformers {ids[bad[0]].tolist()}")
            self.failed.append("token ids")
        else:
            print(f"  ok   token ids of {len(lines)} texts equal SiglipTokenizer's ({ids.shape[1]} each)")
        want = self.text_features(d, ids).numpy()
        err = float(np.abs(want - got).max()) if want.shape == got.shape else float("inf")
        self.result(f"{len(lines)} text embeddings of {os.path.basename(d)} vs meridian embed", err, 1e-5)

    def check_pixels(self, d, img_dir):
        _, _, fast, pil = self.model(d)
        _, every = self.pictures(img_dir)
        for size in sorted({p.size for p in every}):
            pics = [p for p in every if p.size == size]
            a = fast(pics, return_tensors="pt")["pixel_values"].numpy()
            b = pil(pics, return_tensors="pt")["pixel_values"].numpy()
            level = 2 / 255  # one grey level after rescale and normalise
            print(f"  info {len(pics)} images {size[0]}x{size[1]} -> {a.shape[3]}x{a.shape[2]} px: "
                  f"SiglipImageProcessor (torchvision, transformers' default and meridian's resize) vs "
                  f"SiglipImageProcessorPil: max {np.abs(a - b).max() / level:.2f} grey levels, "
                  f"{(np.abs(a - b) > level / 2).mean():.1%} of the values differ")

    def check_loss(self, d, metrics_csv, step, img_dir, captions_csv, data_h5):
        import csv

        import h5py
        from open_clip.loss import SigLipLoss

        torch = self.torch
        m = self.model(d)[0]
        rows = list(csv.reader(open(captions_csv)))[1:]
        names, pics = self.pictures(img_dir, [r[0] for r in rows])
        texts = [r[1] for r in rows]
        ids = self.tokens(d, texts)
        with h5py.File(data_h5, "r") as f:  # the dataset's token ids, one caption per image, in the CSV's order
            data_tokens = f["tokens"][...]
        data_tokens = data_tokens.reshape(len(rows), -1)
        if data_tokens.tolist() != ids.tolist():
            print(f"  FAIL prep image-text's token ids differ from SiglipTokenizer's: {data_tokens[:2].tolist()} "
                  f"vs {ids[:2].tolist()}")
            self.failed.append("prep token ids")
        else:
            print(f"  ok   prep image-text --tokenizer: the {len(rows)} captions' token ids equal SiglipTokenizer's")
        px = self.pixels(d, pics)
        with torch.no_grad():
            out = m(input_ids=ids, pixel_values=px, return_loss=True)
            img = torch.nn.functional.normalize(m.get_image_features(pixel_values=px).pooler_output, dim=-1)
            txt = torch.nn.functional.normalize(m.get_text_features(input_ids=ids).pooler_output, dim=-1)
            # open_clip's SigLipLoss: logit_scale already exponentiated; divides by the number of images.
            oc = SigLipLoss()(img, txt, m.logit_scale.exp(), m.logit_bias)
        mine = [float(r["value"]) for r in csv.DictReader(open(metrics_csv))
                if r["step"] == step and r["name"] == "train/loss"]
        if len(mine) != 1:
            self.failed.append(f"no train/loss at step {step} in {metrics_csv}")
            return
        hf, oc = float(out.loss), float(oc)
        print(f"  info sigmoid loss of the {len(rows)} pairs: meridian {mine[0]:.7f}, transformers {hf:.7f}, "
              f"open_clip {oc:.7f} (each: the summed -log sigmoid over the batch size)")
        self.result(f"train/loss at step {step} vs SiglipModel(return_loss=True).loss", abs(mine[0] - hf), 1e-5)
        self.result("open_clip SigLipLoss vs SiglipModel's loss", abs(oc - hf), 1e-5)

    def check_logits(self, d, img_dir, img_h5, txt_h5):
        torch = self.torch
        m = self.model(d)[0]
        img, img_names, _ = self.h5(img_h5)
        txt, _, tokens = self.h5(txt_h5)
        _, pics = self.pictures(img_dir, img_names)
        px = self.pixels(d, pics)
        with torch.no_grad():
            want = m(input_ids=torch.from_numpy(tokens).long(), pixel_values=px).logits_per_image.numpy()
        mine = img @ txt.T * float(m.logit_scale.detach().exp()) + float(m.logit_bias.detach())
        self.result(f"logits_per_image [{want.shape[0]}, {want.shape[1]}] vs meridian's embeddings, scale and bias",
                    float(np.abs(want - mine).max()), 1e-5)

    def check_load(self, d):
        from transformers import SiglipModel

        _, info = SiglipModel.from_pretrained(d, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        print(f"  {'FAIL' if bad else 'ok  '} SiglipModel.from_pretrained({os.path.basename(d)}): "
              f"{bad or 'no missing, unexpected or mismatched keys'}")
        if bad:
            self.failed.append(f"loading {d}")

    def check_dtype(self, d, dtype):
        from transformers import SiglipConfig

        got = str(SiglipConfig.from_pretrained(d).dtype).replace("torch.", "")
        print(f"  {'ok  ' if got == dtype else 'FAIL'} SiglipConfig.from_pretrained({os.path.basename(d)}).dtype "
              f"is {got}")
        if got != dtype:
            self.failed.append(f"dtype of {d}")

    def check_classify(self, d, img_dir, csv_path, classes, prompts):
        import csv

        torch = self.torch
        classes, prompts = classes.split(","), json.loads(prompts)
        m = self.model(d)[0]
        names, pics = self.pictures(img_dir)
        with torch.no_grad():
            img = self.image_features(d, pics)
            cls = torch.stack([torch.nn.functional.normalize(self.text_features(
                d, self.tokens(d, [p.replace("{}", c, 1) for p in prompts])).mean(0), dim=0) for c in classes])
            probs = torch.sigmoid(img @ cls.t() * m.logit_scale.exp() + m.logit_bias)
        rows = list(csv.DictReader(open(csv_path)))
        k = len(rows) // len(names)
        worst = 0.0
        for i, name in enumerate(names):
            mine = [r for r in rows if r["image"] == name]
            want = probs[i].argsort(descending=True)[:k].tolist()
            if [r["class"] for r in mine] != [classes[j] for j in want] or \
                    [int(r["rank"]) for r in mine] != list(range(1, k + 1)):
                print(f"  FAIL {name}: {[r['class'] for r in mine]} vs transformers' {[classes[j] for j in want]}")
                self.failed.append(f"zero-shot order {csv_path}")
                return
            worst = max(worst, max(abs(float(r["probability"]) - float(probs[i, j])) for r, j in zip(mine, want)))
        self.result(f"zero-shot {os.path.basename(csv_path)}: {len(names)} images, top {k} of {len(classes)} classes "
                    "in transformers' order; probabilities", worst, 2e-6)

    def check_same(self, d, checkpoint, bf16=None):
        import h5py

        torch = self.torch
        mine = read_weights(d)
        with h5py.File(checkpoint, "r") as f:
            theirs = {k: torch.from_numpy(f["model"][k][...]) for k in f["model"].keys()}
        if sorted(mine) != sorted(theirs):
            print("  FAIL names differ:", sorted(set(mine) ^ set(theirs))[:10])
            self.failed.append(f"tensor names of {d}")
            return
        want_type = torch.bfloat16 if bf16 else torch.float32
        bad = [k for k in mine if mine[k].dtype != want_type or mine[k].shape != theirs[k].shape or
               not torch.equal(mine[k].float(), theirs[k].to(want_type).float())]
        print(f"  {'FAIL' if bad else 'ok  '} {os.path.basename(d)}: {len(mine)} tensors, {len(bad)} differ from "
              f"the checkpoint's{' rounded to bfloat16' if bf16 else ''} {bad[:5]}")
        if bad:
            self.failed.append(f"tensors of {d}")


def verify(checks_path):
    v = Verifier()
    for line in open(checks_path):
        words = line.rstrip("\n").split("\t")
        if not words[0]:
            continue
        print(f"{words[0]} {' '.join(os.path.basename(w) for w in words[1:4])}")
        getattr(v, "check_" + words[0])(*words[1:])
    if v.failed:
        print(f"FAIL: {len(v.failed)} check(s): {'; '.join(v.failed)}")
        return 1
    return 0


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "make":
        args = dict(zip(argv[3::2], argv[4::2]))
        make(argv[2], int(args.get("--seed", 0)), int(args.get("--shard-bytes", 20000)), args.get("--dtype", "bf16"))
        return 0
    if cmd == "images":
        images(argv[2], int(argv[3]), int(argv[4]), int(argv[5] if len(argv) > 5 else argv[4]))
        return 0
    if cmd == "break":
        for fault in argv[4:]:
            print(fault, corrupt(argv[2], argv[3] + fault, fault))
        return 0
    if cmd == "verify":
        return verify(argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
