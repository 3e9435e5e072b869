#!/usr/bin/env python3
"""Ultralytics' own YOLO (the ultralytics package, pinned in jobs/python-requirements-<track>.txt) as the
reference for meridian's detection models, loss, export, predict and eval. Everything here calls the
real library: ultralytics.nn.tasks.DetectionModel built from a model YAML, v8DetectionLoss,
non_max_suppression and DetectionValidator. Nothing is downloaded: ctest sets YOLO_OFFLINE (no
analytics, no online checks) and YOLO_CONFIG_DIR; nothing here plots (plots=False; the validator's
dataset check that fetches a font is stubbed), trains (no AMP check that would fetch yolo11n.pt) or
names a *.pt file; the validator writes into a temporary directory, not runs/.

Usage (python3 of meridian's environment):
  ultralytics_yolo.py make DIR --yaml YAML --scale S --nc N --seed K --size PX [--batch B]
                           [--case DIR:YAML:S:NC:SEED:PX[:WIDTH] ...]
      a DetectionModel built by Ultralytics from YAML (a file, e.g. jobs/configs/ultralytics/yolo11.yaml,
      at --scale; or one of Ultralytics' own, e.g. yolo11n.yaml, whose letter is the scale) with nc
      classes, random weights and BatchNorm statistics: DIR/model.safetensors (its state_dict, float32,
      with num_batches_tracked), DIR/io.safetensors: "input" [B, 3, PX, PX] and "out.<l>" the raw head
      outputs of each level in eval mode ([B, 64 + nc, PX/s, PX/s]: Detect's boxes and scores before
      decoding, per level), "out64.<l>" the same in float64; DIR/info.json: Ultralytics' parameter
      count (model.info()'s: parameters, not buffers), strides and Detect.bias_init's values (each
      level's box and class biases as built). Each --case makes one more model in
      the same process (importing ultralytics costs seconds); WIDTH replaces the scale's width multiple.
  ultralytics_yolo.py loss OUT
      v8DetectionLoss (box 7.5, cls 0.5, dfl 1.5: Ultralytics' defaults, as model.args) on random head
      levels and targets of batches of 4 images (see the cases in loss(): one image without boxes;
      small overlapping boxes; a large box around smaller ones; no box at all): OUT (one safetensors
      file) holds, per case, the levels, the targets in meridian's form (xyxy pixels, classes, offsets),
      Ultralytics' loss items (box, cls, dfl: not multiplied by the batch size), loss.sum() (what its
      trainer backpropagates: the items' sum times the batch size) and its gradient w.r.t. each level.
  ultralytics_yolo.py check [--export DIR --checkpoint H5] [--weights DIR --images DIR --labels DIR
                            --conf C --iou I --max-det M] [--data DATA.yaml --metrics JSON]
      --export: meridian's export as Ultralytics takes it: DetectionModel built from the exported YAML
      alone (its nc, its one scale), load_state_dict(strict=True), every tensor equal to the
      checkpoint's (its EMA weights when it has them).
      --weights/--images/--labels: the export DIR's model on the (square, already letterboxed) images:
      its output through ultralytics.utils.nms.non_max_suppression(conf, iou, max_det) and scale_boxes
      (as its DetectionPredictor.postprocess: the image's own size here, so only the clipping) gives the
      boxes, classes and scores that meridian predict wrote in --labels (YOLO txt, normalised), to 1e-3
      of the image size (boxes) and absolutely (scores).
      --data/--metrics: DetectionValidator (plots=False, the same conf 0.001 / iou 0.7 / max_det 300
      as meridian eval; its NMS is multi_label=True, as `yolo val`'s: every class above conf of an
      anchor is a candidate, where predict keeps the best class) on the Ultralytics dataset DATA.yaml
      with the export's model: the mAP50-95 and
      mAP50 of its matches equal meridian eval's (--metrics, its --json) within 0.01 points, scored by
      pycocotools' 101-point rule as meridian (Ultralytics' own trapezoid figures are printed beside;
      see check_val) (--imgsz: the images' 64).
"""
import argparse
import json
import logging
import os
import re
import sys

import torch
from safetensors.torch import load_file, save_file
from ultralytics.nn.tasks import DetectionModel, yaml_model_load
from ultralytics.utils import LOGGER

LOGGER.setLevel(logging.WARNING)  # no "Overriding model.yaml nc" or validator progress lines


def build(yaml_path, scale=None, nc=None, width=None):
    """Ultralytics' DetectionModel from a YAML file or one of its own names (yolo11n.yaml), quietly;
    width: another width multiple for the scale (its letter still decides C3k and A2C2f's options)."""
    cfg = yaml_model_load(yaml_path)
    if scale:
        cfg["scale"] = scale
    elif cfg.get("scales") and not cfg.get("scale"):
        cfg["scale"] = next(iter(cfg["scales"]))  # the export keeps one scale
    if width:
        depth, _, max_channels = cfg["scales"][cfg["scale"]]
        cfg["scales"][cfg["scale"]] = [depth, width, max_channels]
    return DetectionModel(cfg, nc=nc, verbose=False)


def randomize(model, seed):
    """Weights and BatchNorm statistics far from their initialisation (so that every tensor matters)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked") or name.endswith("dfl.conv.weight"):
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif name.endswith("running_mean") or name.endswith("bias") or name.endswith("gamma"):
                t.copy_(torch.randn(t.shape, generator=g) * 0.1)
            elif name.endswith("bn.weight"):
                t.copy_(torch.rand(t.shape, generator=g) * 0.5 + 0.75)
            else:  # convolution weights: variance-preserving
                t.copy_(torch.randn(t.shape, generator=g) * (1.0 / t[0].numel()) ** 0.5)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.num_batches_tracked.fill_(7)


def head_levels(preds):
    """Detect's raw outputs ({"boxes": [B, 64, A], "scores": [B, nc, A], "feats"}) as meridian's
    levels [B, 64 + nc, H, W]."""
    both = torch.cat((preds["boxes"], preds["scores"]), 1)
    sizes = [f.shape[2:] for f in preds["feats"]]
    parts = both.split([h * w for h, w in sizes], dim=2)
    return [p.reshape(*p.shape[:2], h, w).contiguous() for p, (h, w) in zip(parts, sizes)]


def make(out, yaml_path, scale, nc, seed, size, batch, width=None):
    model = build(yaml_path, scale, nc, width).eval()
    head = model.model[-1]  # Detect.bias_init's values, before the weights are randomised
    with torch.no_grad():
        bias_init = {k: [m[-1].bias[0].item() for m in branch] for k, branch in (("box", head.cv2), ("cls", head.cv3))}
    randomize(model, seed)
    os.makedirs(out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{out}/model.safetensors")
    x = torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        levels = head_levels(model(x)[1])
        levels64 = head_levels(model.double()(x.double())[1])
    tensors = {"input": x}
    tensors.update({f"out.{i}": t for i, t in enumerate(levels)})
    tensors.update({f"out64.{i}": t for i, t in enumerate(levels64)})
    save_file(tensors, f"{out}/io.safetensors")
    with open(f"{out}/info.json", "w") as f:
        json.dump({"parameters": sum(p.numel() for p in model.parameters()), "nc": model.yaml["nc"],
                   "scale": model.yaml.get("scale"), "strides": model.stride.tolist(), "bias_init": bias_init}, f)
    print(f"{out}: Ultralytics {os.path.basename(yaml_path)} scale {model.yaml.get('scale')} (width "
          f"{model.yaml['scales'][model.yaml['scale']][1]}) nc {nc}: "
          f"{sum(p.numel() for p in model.parameters())} parameters")


def loss(out):
    from ultralytics.cfg import get_cfg
    from ultralytics.utils.loss import v8DetectionLoss
    from ultralytics.utils.ops import xywh2xyxy

    nc, size = 4, 64
    model = build("yolov8n.yaml", nc=nc)  # the loss reads only Detect's nc, reg_max and strides
    model.args = get_cfg()  # Ultralytics' defaults: box 7.5, cls 0.5, dfl 1.5
    crit = v8DetectionLoss(model)
    strides = model.stride.tolist()
    g = torch.Generator().manual_seed(3)
    tensors = {}
    # boxes: image 2 without boxes, boxes of 6-29 px; crowded: overlapping boxes of 3-16 px near the
    # centre (anchors inside several boxes; sides under the assigner's 16 px floor); nested: a large
    # box around three smaller ones in each image (an anchor positive for two may overlap a third
    # best); empty: no box.
    # Boxes are normalised xywh, as Ultralytics' batches carry them.
    cases = {
        "boxes": ([(0, 3), (0, 1), (0, 0), (1, 2), (1, 2), (3, 1), (3, 0), (3, 3), (3, 2)], (0.2, 0.6), (0.1, 0.35),
                  -3, 0.3),
        "crowded": ([(0, 0), (0, 1), (0, 2), (0, 0), (0, 3), (1, 1), (1, 1), (1, 0), (2, 2), (3, 3)], (0.4, 0.2),
                    (0.05, 0.2), 0, 1.0),
        "nested": ([(b, (b + k) % 4) for b in range(4) for k in range(4)], (0.3, 0.4),
                   (0.08, 0.2), -1, 0.2),
        "empty": ([], (0.2, 0.6), (0.1, 0.35), -3, 0.3),
    }
    for case, (rows, (lo, span), (wlo, wspan), shift, slope) in cases.items():
        bsz = 4
        levels = [torch.randn(bsz, 64 + nc, size // int(s), size // int(s), generator=g) * 2 for s in strides]
        for l in levels:
            l[:, 64:] += shift  # class logits: mostly low scores as an object detector's, or not
            # DFL logits falling with the bin: boxes of a few strides, the size of the targets
            l[:, :64] -= slope * torch.arange(16.0).repeat(4).view(1, 64, 1, 1)
            l.requires_grad_(True)
        xy = torch.rand(len(rows), 2, generator=g) * span + lo
        wh = torch.rand(len(rows), 2, generator=g) * wspan + wlo
        if case == "nested":  # each image's first box large, around its other three
            xy[::4], wh[::4] = 0.5, 0.7
        batch = {"batch_idx": torch.tensor([float(r[0]) for r in rows]), "cls": torch.tensor([[float(r[1])] for r in rows]),
                 "bboxes": torch.cat((xy, wh), 1)}
        preds = {"boxes": torch.cat([l[:, :64].reshape(bsz, 64, -1) for l in levels], 2),
                 "scores": torch.cat([l[:, 64:].reshape(bsz, nc, -1) for l in levels], 2), "feats": levels}
        total, items = crit(preds, batch)  # total: [box, cls, dfl] * batch size
        backward = total.sum()  # what Ultralytics' trainer backpropagates
        grads = torch.autograd.grad(backward, levels)
        scale = torch.tensor([size, size, size, size], dtype=torch.float32)
        offsets = [0]
        for b in range(bsz):
            offsets.append(offsets[-1] + sum(1 for r in rows if r[0] == b))
        tensors.update({f"{case}.level.{i}": l.detach() for i, l in enumerate(levels)})
        tensors.update({f"{case}.grad.{i}": t for i, t in enumerate(grads)})
        tensors[f"{case}.gt_boxes"] = xywh2xyxy(batch["bboxes"] * scale).reshape(-1, 4)  # preprocess's pixels
        tensors[f"{case}.gt_classes"] = torch.tensor([r[1] for r in rows], dtype=torch.int64)
        tensors[f"{case}.gt_offsets"] = torch.tensor(offsets, dtype=torch.int64)
        tensors[f"{case}.items"] = torch.stack([items[k] for k in crit.loss_names]).float()
        tensors[f"{case}.total"] = backward.detach().reshape(1)
        tensors[f"{case}.strides"] = torch.tensor(strides)
        print(f"Ultralytics v8DetectionLoss ({case}): items {dict((k, round(float(v), 6)) for k, v in items.items())}, "
              f"loss.sum() {backward.item():.6f} (batch {bsz})")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, out)


def exported(d):
    """The export directory's model as Ultralytics builds it from the YAML alone, weights loaded strictly."""
    yamls = [f for f in os.listdir(d) if f.endswith(".yaml")]
    assert len(yamls) == 1, f"expected one model YAML in {d}: {yamls}"
    cfg = yaml_model_load(f"{d}/{yamls[0]}")
    assert len(cfg["scales"]) == 1, f"the export keeps one scale: {list(cfg['scales'])}"
    model = build(f"{d}/{yamls[0]}")
    weights = load_file(f"{d}/model.safetensors")
    model.load_state_dict(weights, strict=True)  # raises on a missing, unexpected or misshapen tensor
    if isinstance(cfg.get("names"), (list, dict)):
        names = cfg["names"]
        model.names = dict(enumerate(names)) if isinstance(names, list) else {int(k): v for k, v in names.items()}
    return model.eval(), cfg, weights


def check_same(d, checkpoint):
    import h5py

    _, cfg, weights = exported(d)
    with h5py.File(checkpoint, "r") as f:
        group = f["ema"] if "ema" in f else f["model"]
        theirs = {k: torch.from_numpy(group[k][...]) for k in group.keys()}
    missing = [k for k in weights if k not in theirs and not k.endswith("num_batches_tracked")]
    bad = [k for k in weights if k in theirs and not torch.equal(weights[k].double(), theirs[k].double())]
    print(f"export: Ultralytics' DetectionModel from {d} loads {len(weights)} tensors strictly ({cfg['nc']} classes, "
          f"scale {list(cfg['scales'])[0]}, names {cfg.get('names')}); not in the checkpoint: {missing[:5]}; differ: "
          f"{bad[:5]}")
    return not missing and not bad


def check_predict(d, images, labels, conf, iou, max_det):
    import cv2
    import numpy as np
    from ultralytics.utils.nms import non_max_suppression
    from ultralytics.utils.ops import scale_boxes

    model = exported(d)[0]
    files = sorted(f for f in os.listdir(images) if f.lower().endswith((".png", ".jpg", ".bmp")))
    worst, count, ok = 0.0, 0, True
    for name in files:
        bgr = cv2.imread(f"{images}/{name}")
        h, w = bgr.shape[:2]
        assert h == w, f"{name}: the images must be square (letterboxed) so that no letterbox differs"
        x = torch.from_numpy(np.ascontiguousarray(bgr[:, :, ::-1].transpose(2, 0, 1))).float()[None] / 255
        with torch.no_grad():
            det = non_max_suppression(model(x), conf_thres=conf, iou_thres=iou, max_det=max_det)[0]
            det[:, :4] = scale_boxes(x.shape[2:], det[:, :4], (h, w))  # as its predictor: to the image, clipped
        theirs = det.double()
        path = f"{labels}/{os.path.splitext(name)[0]}.txt"
        rows = [list(map(float, line.split())) for line in open(path) if line.strip()] if os.path.exists(path) else []
        ours = torch.tensor(rows, dtype=torch.float64).reshape(-1, 6)  # class cx cy w h conf, normalised
        if len(ours) != len(theirs):
            print(f"{name}: meridian predict {len(ours)} boxes, Ultralytics {len(theirs)}")
            ok = False
            continue
        cx, cy, bw, bh = (ours[:, k] * w for k in range(1, 5))
        xyxy = torch.stack((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), 1)
        # Each of meridian's boxes against the nearest unmatched Ultralytics box (scores equal to the
        # labels' 6 decimals could order them either way); relative to the image size (the box
        # coordinates' scale); meridian's labels keep 6 decimals.
        box_err = conf_err = 0.0
        same_class, free = True, list(range(len(theirs)))
        for i in range(len(ours)):
            d = [((xyxy[i] - theirs[j, :4]).abs().max().item() / w, j) for j in free]
            e, j = min(d)
            free.remove(j)
            box_err, conf_err = max(box_err, e), max(conf_err, abs(ours[i, 5].item() - theirs[j, 4].item()))
            same_class &= int(ours[i, 0]) == int(theirs[j, 5])
        worst, count = max(worst, box_err, conf_err), count + len(ours)
        if box_err > 1e-3 or conf_err > 1e-3 or not same_class:
            print(f"{name}: boxes differ by {box_err:.2e}, scores by {conf_err:.2e}, classes equal: {same_class}")
            ok = False
    print(f"predict: {count} boxes on {len(files)} images equal Ultralytics' non_max_suppression(conf={conf}, iou={iou}, "
          f"max_det={max_det}) of its DetectionModel: max relative difference {worst:.2e} (box coordinates / image "
          f"size, scores)")
    return ok and count > 0


def check_val(d, data, metrics, imgsz):
    """Ultralytics' own mAP integrates each precision envelope with np.trapz over 101 interpolated
    points (its compute_ap: 0.995 for a perfect class), pycocotools (and meridian eval) average the
    envelope at 101 recall thresholds; the same matches give figures up to ~0.5 points apart. So the
    check re-scores Ultralytics' own matches (its validator's tp, conf, classes) by its own ap_per_class
    with pycocotools' 101-point rule in place of compute_ap, and prints its reported figures beside."""
    import tempfile
    from pathlib import Path

    import numpy as np
    import ultralytics.data.utils
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.utils import metrics as M

    # check_det_dataset fetches Arial.ttf for its plots (a HEAD request even with YOLO_OFFLINE set);
    # nothing here plots.
    ultralytics.data.utils.check_font = lambda *args, **kwargs: None

    class Validator(DetectionValidator):
        def get_stats(self):
            self.matches = {k: np.concatenate(v, 0) for k, v in self.metrics.stats.items()}  # get_stats clears them
            return super().get_stats()

    model = exported(d)[0]
    with open(metrics) as f:
        ours_json = json.load(f)
    ours, counts = ours_json["metrics"], ours_json.get("counts", "")
    args = dict(data=data, imgsz=imgsz, batch=4, conf=0.001, iou=0.7, max_det=300, plots=False, verbose=False,
                save_json=False, save_txt=False, device="cpu", workers=0, rect=False, split="val", mode="val",
                task="detect")
    with tempfile.TemporaryDirectory() as save_dir:  # not runs/detect/val under the working directory
        validator = Validator(save_dir=Path(save_dir), args=args)
        stats = validator(model=model)
    reported = {"map50": 100 * stats["metrics/mAP50(B)"], "map50_95": 100 * stats["metrics/mAP50-95(B)"]}

    trapz_ap = M.compute_ap

    def coco_ap(recall, precision):  # pycocotools' COCOeval.accumulate, on one precision/recall curve
        envelope = np.flip(np.maximum.accumulate(np.flip(precision)))
        at = np.searchsorted(recall, np.linspace(0, 1, 101), side="left")
        return np.where(at < len(envelope), envelope[np.minimum(at, len(envelope) - 1)], 0).mean(), *trapz_ap(
            recall, precision)[1:]

    m = validator.matches
    M.compute_ap = coco_ap
    try:
        ap = M.ap_per_class(m["tp"], m["conf"], m["pred_cls"], m["target_cls"])[5]  # [classes, 10 IoU thresholds]
    finally:
        M.compute_ap = trapz_ap
    theirs = {"map50": 100 * ap[:, 0].mean(), "map50_95": 100 * ap.mean()}
    diff = {k: abs(theirs[k] - ours[k]) for k in theirs}
    # The two prediction sets' sizes: unequal when the figures differ says the detections differ (not the
    # matching or the scoring), e.g. meridian decoding one class per anchor where the validator's
    # multi-label NMS keeps every class above conf.
    counted = re.search(r"(\d+) detections", counts)
    print(f"val: DetectionValidator's {len(m['conf'])} detections on {validator.seen} images (multi_label NMS); "
          f"meridian eval's {counted.group(1) if counted else '?'} ({counts})")
    print(f"val: Ultralytics' DetectionValidator reports mAP50 {reported['map50']:.3f} mAP50-95 "
          f"{reported['map50_95']:.3f} (its trapezoid rule); its matches by pycocotools' 101-point rule: mAP50 "
          f"{theirs['map50']:.3f} mAP50-95 {theirs['map50_95']:.3f}; meridian eval mAP50 {ours['map50']:.3f} mAP50-95 "
          f"{ours['map50_95']:.3f}: differences {diff['map50']:.2e} and {diff['map50_95']:.2e} points (tolerance 0.01)")
    return ours["map50"] > 1 and diff["map50_95"] <= 0.01 and diff["map50"] <= 0.01


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["make", "loss", "check"])
    p.add_argument("args", nargs="*")
    p.add_argument("--yaml")
    p.add_argument("--scale")
    p.add_argument("--nc", type=int, default=80)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--case", action="append", default=[])
    p.add_argument("--export")
    p.add_argument("--checkpoint")
    p.add_argument("--weights")
    p.add_argument("--images")
    p.add_argument("--labels")
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--iou", type=float, default=0.7)
    p.add_argument("--max-det", type=int, default=300)
    p.add_argument("--data")
    p.add_argument("--metrics")
    p.add_argument("--imgsz", type=int, default=64)
    a = p.parse_args(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    if a.command == "make":
        if a.args:
            make(a.args[0], a.yaml, a.scale, a.nc, a.seed, a.size, a.batch)
        for case in a.case:
            d, y, s, nc, seed, size, *width = case.split(":")
            make(d, y, s or None, int(nc), int(seed), int(size), a.batch, float(width[0]) if width else None)
        return 0
    if a.command == "loss":
        loss(a.args[0])
        return 0
    ok = True
    if a.export:
        ok &= check_same(a.export, a.checkpoint)
    if a.weights and a.images:
        ok &= check_predict(a.weights, a.images, a.labels, a.conf, a.iou, a.max_det)
    if a.weights and a.data:
        ok &= check_val(a.weights, a.data, a.metrics, a.imgsz)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
