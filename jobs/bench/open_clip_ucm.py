#!/usr/bin/env python3
"""open_clip's side of jobs/bench/siglip-vs-open-clip.sh: its dataset and model files, and the evaluation
of its checkpoint with the metrics `meridian eval` reports on an image_text set.

  open_clip_ucm.py files UCM_DIR OUT_DIR SIZE
      OUT_DIR/train.csv (tab-separated filepath, title: one row per image and caption of UCM's train split, the images
      resized once to SIZE px as JPEG, as users prepare a dataset for open_clip with img2dataset),
      OUT_DIR/test.jsonl (the test split: image path, class, captions), and OUT_DIR/model/
      open_clip_config.json: the shape of jobs/configs/ucm-siglip-tiny.yaml in open_clip's own ViT and
      text Transformer (width 192, 4 layers, 3 heads of 64, MLP x4, patch 16, SIZE px, context 32,
      an attention-pooled image tower without a pre-norm and a last-token text tower as SigLIP has,
      logit bias -10), with open_clip's own tokenizer (CLIP's BPE, 49,408 tokens).
  open_clip_ucm.py eval OUT_DIR CHECKPOINT PROMPTS_JSON
      the checkpoint on the test split: i2t and t2i R@1/5/10, mR (their mean) and zero-shot top-1 with
      each class's prompts averaged (class names as the dataset spells them), as meridian's SigLIP
      evaluation defines them (src/tasks/siglip/task.cpp); prints one JSON line.
"""
import json
import os
import sys


def files(ucm, out, size):
    from PIL import Image

    os.makedirs(f"{out}/images", exist_ok=True)
    rows, test = [], []
    for line in open(f"{ucm}/captions.jsonl"):
        r = json.loads(line)
        dst = f"{out}/images/{os.path.basename(r['image'])}"
        if not os.path.exists(dst):
            Image.open(f"{ucm}/{r['image']}").convert("RGB").resize((size, size), Image.BICUBIC).save(dst, quality=95)
        if r["split"] == "train":
            rows += [(dst, c) for c in r["captions"]]
        elif r["split"] == "test":
            test.append({"image": dst, "class": r["class"], "captions": r["captions"]})
    with open(f"{out}/train.csv", "w") as f:  # tab-separated, open_clip's default --csv-separator
        f.write("filepath\ttitle\n")
        f.writelines(f"{p}\t{' '.join(c.split())}\n" for p, c in rows)
    with open(f"{out}/test.jsonl", "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in test)
    os.makedirs(f"{out}/model", exist_ok=True)
    cfg = {
        "model_cfg": {
            "embed_dim": 192, "init_logit_bias": -10,
            "vision_cfg": {"image_size": size, "patch_size": 16, "width": 192, "layers": 4, "head_width": 64,
                           "mlp_ratio": 4.0, "no_ln_pre": True, "attentional_pool": True, "attn_pooler_queries": 1,
                           "attn_pooler_heads": 3, "norm_kwargs": {"eps": 1e-6}},
            "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 192, "heads": 3, "layers": 4,
                         "mlp_ratio": 4.0, "no_causal_mask": True, "pool_type": "last", "proj_bias": True,
                         "norm_kwargs": {"eps": 1e-6}},
        },
        "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bicubic",
                           "resize_mode": "squash"},
    }
    json.dump(cfg, open(f"{out}/model/open_clip_config.json", "w"), indent=2)
    print(f"{out}: {len(rows)} training pairs, {len(test)} test images")


def evaluate(out, checkpoint, prompts):
    import open_clip
    import torch
    import torch.nn.functional as F
    from PIL import Image

    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{out}/model")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
    model.eval()
    tok = open_clip.get_tokenizer(f"local-dir:{out}/model")
    test = [json.loads(line) for line in open(f"{out}/test.jsonl")]
    with torch.no_grad():
        img = torch.cat([model.encode_image(torch.stack([preprocess(Image.open(t["image"])) for t in test[i:i + 64]]))
                         for i in range(0, len(test), 64)])
        caps = [c for t in test for c in t["captions"]]
        txt = torch.cat([model.encode_text(tok(caps[i:i + 256])) for i in range(0, len(caps), 256)])
        img, txt = F.normalize(img, dim=-1), F.normalize(txt, dim=-1)
        k = len(test[0]["captions"])
        owner = torch.arange(len(test)).repeat_interleave(k)  # the image of each caption
        sim = img @ txt.t()  # [N, N*K]
        out_m = {}
        for r in (1, 5, 10):
            top_t = sim.topk(r, dim=1).indices  # each image's r best captions
            out_m[f"i2t_r{r}"] = 100 * (owner[top_t] == torch.arange(len(test))[:, None]).any(1).float().mean().item()
            top_i = sim.t().topk(r, dim=1).indices  # each caption's r best images
            out_m[f"t2i_r{r}"] = 100 * (top_i == owner[:, None]).any(1).float().mean().item()
        out_m["mR"] = sum(out_m.values()) / 6
        classes = sorted({t["class"] for t in test})
        words = [c.replace("_", " ").replace("-", " ") for c in classes]
        cls = torch.stack([F.normalize(F.normalize(model.encode_text(tok([p.replace("{}", w, 1) for p in prompts])),
                                                   dim=-1).mean(0), dim=0) for w in words])
        truth = torch.tensor([classes.index(t["class"]) for t in test])
        out_m["zero_shot"] = 100 * ((img @ cls.t()).argmax(1) == truth).float().mean().item()
    print(json.dumps({k: round(v, 2) for k, v in out_m.items()}))


if __name__ == "__main__":
    if sys.argv[1] == "files":
        files(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "eval":
        evaluate(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    else:
        sys.exit(__doc__)
