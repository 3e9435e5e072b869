#!/usr/bin/env python3
"""pycocotools' COCO and COCOeval (iouType "bbox", default Params: 10 IoU thresholds, 101 recall
points, areas all / small / medium / large, maxDets 1 / 10 / 100) scoring COCO-style data for
meridian's tests: the reference for meridian's detection mAP (src/detect/coco_map.cpp).

Usage: coco_reference.py cases OUT.json | images DIR ANNOTATIONS.json | score ANNOTATIONS.json RESULTS.json
  images: 12 BMP images of several non-square sizes with coloured rectangles, and their COCO
    instances file (image ids from 101, category ids 3 and 9; three crowd regions of category 3,
    drawn over the rectangles; every third image's areas 0.8 x its boxes', as segmentations give)
  score: COCOeval of a COCO results file against the instances file: prints summarize()'s 12
    figures as JSON (map50_95, map50, map75, map_small, map_medium, map_large, ar1, ar10, ar100,
    ar_small, ar_medium, ar_large; -1 where COCOeval has none)
  cases:
    writes random cases (crowd regions, all three area ranges, an image with more than 100
    detections of a class, tied scores on one image and across images, image ids out of the
    list's order, duplicate ground truth, a category with detections but only a crowd region for
    ground truth) and COCOeval's figures of each: {"cases":
    [{"num_classes", "images": [{"id", "gt": [[x1, y1, x2, y2, class, crowd, area]], "dt": [[x1,
    y1, x2, y2, class, score]]}], "stats": {...as score...}, "ap50": [...], "ap50_95": [...]}]}
    (per category, area all, maxDets 100; -1 for a category without non-crowd ground truth).
    Category ids are the classes; image ids the images' indices, or (two cases) a permutation of
    them, so that COCOeval's image order differs from the list's; boxes and scores are exact in
    float32, so the C++ side reads the same numbers.
pycocotools' progress messages go to stderr; stdout carries only the JSON of `score`.
"""
import contextlib
import json
import sys

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

STATS = ["map50_95", "map50", "map75", "map_small", "map_medium", "map_large",
         "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large"]


def coco_eval(dataset, results):
    """COCOeval(bbox) of a results list against an instances dict: (stats dict, [(ap50, ap50_95)]
    per category in category id order, area all, maxDets 100)."""
    with contextlib.redirect_stdout(sys.stderr):
        gt = COCO()
        gt.dataset = dataset
        gt.createIndex()
        if results:
            dt = gt.loadRes(results)
        else:  # loadRes cannot take an empty list: an empty results set with the same images
            dt = COCO()
            dt.dataset = {"images": dataset["images"], "categories": dataset["categories"], "annotations": []}
            dt.createIndex()
        e = COCOeval(gt, dt, "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    stats = {name: float(v) for name, v in zip(STATS, e.stats)}
    per_class = []
    for k in range(len(e.params.catIds)):
        p = e.eval["precision"][:, :, k, 0, -1]  # [T, R] at area all, maxDets 100
        per_class.append((-1.0, -1.0) if (p > -1).sum() == 0 else (float(np.mean(p[0])), float(np.mean(p))))
    return stats, per_class


def random_case(rng, num_images, num_classes, crowd_only_class=False, shuffled_ids=False):
    """crowd_only_class: the last class has false positives and one crowd region (image 1) with a
    detection on it, and no other ground truth: COCOeval gives it no AP. shuffled_ids: the images'
    ids are not in their order (as in COCO's val2017 'images' list); COCOeval takes the images in id
    order, which decides between equal scores on different images."""
    ids = [int(i) for i in (1000 + rng.permutation(num_images) * 7 if shuffled_ids else range(num_images))]
    gt_classes = num_classes - 1 if crowd_only_class else num_classes
    q = lambda x: float(np.round(x * 4) / 4)  # quarter pixels: exact in float32
    images, gts, dts = [], [], []
    for img in range(num_images):
        gt_rows, dt_rows = [], []
        for _ in range(rng.integers(0, 9)):
            side = float(rng.choice([rng.uniform(4, 30), rng.uniform(33, 95), rng.uniform(97, 300)]))
            w, h = q(side * rng.uniform(0.6, 1.4)), q(side * rng.uniform(0.6, 1.4))
            x, y = q(rng.uniform(0, 640 - w)), q(rng.uniform(0, 640 - h))
            c = int(rng.integers(0, gt_classes))
            crowd = int(rng.random() < 0.1)
            area = q(w * h * rng.uniform(0.5, 0.95)) if rng.random() < 0.5 else w * h  # a "segmentation" area
            gt_rows.append([x, y, x + w, y + h, c, crowd, area])
            if rng.random() < 0.15:  # a duplicate: equal IoU with two ground truths
                gt_rows.append([x, y, x + w, y + h, c, 0, w * h])
            for _ in range(rng.integers(0, 3)):  # detections near it
                dx, dy = q(rng.normal(0, 0.1 * w)), q(rng.normal(0, 0.1 * h))
                dw, dh = q(max(1.0, w * rng.uniform(0.7, 1.3))), q(max(1.0, h * rng.uniform(0.7, 1.3)))
                cc = c if rng.random() < 0.85 else int(rng.integers(0, num_classes))
                dt_rows.append([x + dx, y + dy, x + dx + dw, y + dy + dh, cc, int(rng.integers(1, 64)) / 64])
        for _ in range(rng.integers(0, 4)):  # false positives
            w, h = q(rng.uniform(4, 200)), q(rng.uniform(4, 200))
            x, y = q(rng.uniform(0, 640 - w)), q(rng.uniform(0, 640 - h))
            dt_rows.append([x, y, x + w, y + h, int(rng.integers(0, num_classes)), int(rng.integers(1, 64)) / 64])
        if img == 0:  # more than maxDets detections of one class on one image
            for _ in range(130):
                w, h = q(rng.uniform(8, 120)), q(rng.uniform(8, 120))
                x, y = q(rng.uniform(0, 640 - w)), q(rng.uniform(0, 640 - h))
                dt_rows.append([x, y, x + w, y + h, 0, int(rng.integers(1, 256)) / 256])
            gt_rows.append([100.0, 100.0, 160.0, 150.0, 0, 0, 3000.0])
            dt_rows.append([101.0, 100.0, 160.0, 150.0, 0, 1 / 512])  # a hit ranked past 100: cut
        if img == 1 and crowd_only_class:
            gt_rows.append([200.0, 300.0, 400.0, 420.0, num_classes - 1, 1, 24000.0])
            dt_rows.append([210.0, 310.0, 300.0, 400.0, num_classes - 1, 0.75])
        images.append({"id": ids[img], "gt": gt_rows, "dt": dt_rows})
        for r in gt_rows:
            gts.append({"id": len(gts) + 1, "image_id": ids[img], "category_id": r[4], "iscrowd": r[5],
                        "bbox": [r[0], r[1], r[2] - r[0], r[3] - r[1]], "area": r[6]})
        for r in dt_rows:
            w, h = r[2] - r[0], r[3] - r[1]
            dts.append({"image_id": ids[img], "category_id": r[4], "score": r[5], "bbox": [r[0], r[1], w, h]})
    dataset = {"images": [{"id": i, "width": 640, "height": 640} for i in ids], "annotations": gts,
               "categories": [{"id": c, "name": f"class{c}"} for c in range(num_classes)]}
    stats, per_class = coco_eval(dataset, dts)
    return {"num_classes": num_classes, "images": images, "stats": stats,
            "ap50": [p[0] for p in per_class], "ap50_95": [p[1] for p in per_class]}


def write_bmp(path, rgb):
    h, w, _ = rgb.shape
    row = (w * 3 + 3) // 4 * 4
    data = bytearray()
    for y in range(h - 1, -1, -1):  # bottom-up rows of BGR, padded to 4 bytes
        line = rgb[y, :, ::-1].astype(np.uint8).tobytes()
        data += line + b"\0" * (row - len(line))
    header = b"BM" + (54 + len(data)).to_bytes(4, "little") + b"\0\0\0\0" + (54).to_bytes(4, "little")
    info = (40).to_bytes(4, "little") + w.to_bytes(4, "little") + h.to_bytes(4, "little") + (1).to_bytes(2, "little")
    info += (24).to_bytes(2, "little") + b"\0" * 4 + len(data).to_bytes(4, "little") + b"\0" * 16
    with open(path, "wb") as f:
        f.write(header + info + bytes(data))


def make_images(d, annotations):
    import os
    rng = np.random.default_rng(0)
    os.makedirs(d, exist_ok=True)
    images, anns = [], []
    for i in range(12):
        w, h = [(96, 64), (64, 96), (80, 48), (128, 72)][i % 4]
        rgb = np.full((h, w, 3), 90, np.uint8)
        for _ in range(2):
            bw, bh = int(rng.integers(10, w // 2)), int(rng.integers(10, h // 2))
            x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            cat = int(rng.choice([3, 9]))
            rgb[y:y + bh, x:x + bw] = (230, 40, 40) if cat == 3 else (40, 40, 230)
            area = bw * bh if i % 3 else round(bw * bh * 0.8, 2)  # a "segmentation" area on every third image
            anns.append({"id": len(anns) + 1, "image_id": 101 + i, "category_id": cat, "iscrowd": 0,
                         "bbox": [x, y, bw, bh], "area": area})
        if i % 4 == 1:  # a crowd region: detections on it are neither right nor wrong
            cx, cy = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
            anns.append({"id": len(anns) + 1, "image_id": 101 + i, "category_id": 3, "iscrowd": 1,
                         "bbox": [cx, cy, w // 2, h // 2], "area": w * h // 4})
            rgb[cy:cy + h // 2, cx:cx + w // 2] = (230, 40, 40)
        write_bmp(f"{d}/img{i:02d}.bmp", rgb)
        images.append({"id": 101 + i, "file_name": f"img{i:02d}.bmp", "width": w, "height": h})
    with open(annotations, "w") as f:
        json.dump({"images": images, "annotations": anns,
                   "categories": [{"id": 3, "name": "red"}, {"id": 9, "name": "blue"}]}, f)


def score(annotations, results):
    with open(annotations) as f:
        dataset = json.load(f)
    with open(results) as f:
        dts = json.load(f)
    print(json.dumps(coco_eval(dataset, dts)[0]))


def main(argv):
    if len(argv) == 3 and argv[0] == "images":
        return make_images(argv[1], argv[2]) or 0
    if len(argv) == 3 and argv[0] == "score":
        return score(argv[1], argv[2]) or 0
    if len(argv) != 2 or argv[0] != "cases":
        print(__doc__)
        return 2
    cases = [random_case(np.random.default_rng(seed), n, k, crowd_only, shuffled) for seed, n, k, crowd_only, shuffled in
             [(1, 30, 3, False, False), (2, 12, 1, False, False), (3, 40, 5, False, True), (4, 20, 2, False, False),
              (5, 25, 4, True, True)]]
    with open(argv[1], "w") as f:
        json.dump({"cases": cases}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
