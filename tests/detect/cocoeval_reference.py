#!/usr/bin/env python3
"""A second implementation of pycocotools' COCOeval for boxes (iouType "bbox"), written with numpy from
pycocotools' published algorithm (COCOeval.computeIoU / evaluateImg / accumulate / summarize and
maskUtils.iou), not from meridian's C++ (pycocotools itself is not in Debian). It works on COCO-style
dicts: annotations with id, image_id, category_id, bbox [x, y, w, h], area, iscrowd; results with
image_id, category_id, bbox, score.

Usage: cocoeval_reference.py cases OUT.json | images DIR ANNOTATIONS.json | score ANNOTATIONS.json RESULTS.json
  images: 12 BMP images of several non-square sizes with coloured rectangles, and their COCO
    instances file (image ids from 101, category ids 3 and 9; three crowd regions of category 3,
    drawn over the rectangles; every third image's areas 0.8 x its boxes', as segmentations give)
  score: prints the summarize() figures of a COCO results file against the instances file as JSON
  cases:
    writes random cases (crowd regions, all three area ranges, an image with more than 100
    detections of a class, tied scores, duplicate ground truth) and the metrics of each:
    {"cases": [{"num_classes", "images": [{"gt": [[x1, y1, x2, y2, class, crowd, area]], "dt":
    [[x1, y1, x2, y2, class, score]]}], "stats": {...}, "ap50": [...], "ap50_95": [...]}]}
    (boxes and scores are exact in float32, so the C++ side reads the same numbers)
"""
import json
import sys

import numpy as np

IOU_THRS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
REC_THRS = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
AREA_RNG = [[0 ** 2, 1e5 ** 2], [0 ** 2, 32 ** 2], [32 ** 2, 96 ** 2], [96 ** 2, 1e5 ** 2]]
MAX_DETS = 100


def box_iou(d, g, iscrowd):
    """maskUtils.iou for [x, y, w, h] boxes: a crowd ground truth divides by the detection's area."""
    out = np.zeros((len(d), len(g)))
    for i, a in enumerate(d):
        for j, b in enumerate(g):
            iw = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
            ih = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
            if iw <= 0 or ih <= 0:
                continue
            inter = iw * ih
            union = a[2] * a[3] if iscrowd[j] else a[2] * a[3] + b[2] * b[3] - inter
            out[i, j] = inter / union if union > 0 else 0
    return out


class CocoEval:
    def __init__(self, gts, dts, img_ids, cat_ids):
        self.img_ids, self.cat_ids = img_ids, cat_ids
        self._gts, self._dts = {}, {}
        for g in gts:
            g["ignore"] = int(g.get("iscrowd", 0))
            self._gts.setdefault((g["image_id"], g["category_id"]), []).append(g)
        for d in dts:
            self._dts.setdefault((d["image_id"], d["category_id"]), []).append(d)

    def compute_iou(self, img, cat):
        gt, dt = self._gts.get((img, cat), []), self._dts.get((img, cat), [])
        if len(gt) == 0 and len(dt) == 0:
            return []
        inds = np.argsort([-d["score"] for d in dt], kind="mergesort")
        dt = [dt[i] for i in inds][:MAX_DETS]
        return box_iou([d["bbox"] for d in dt], [g["bbox"] for g in gt], [int(o["iscrowd"]) for o in gt])

    def evaluate_img(self, img, cat, a_rng):
        gt, dt = self._gts.get((img, cat), []), self._dts.get((img, cat), [])
        if len(gt) == 0 and len(dt) == 0:
            return None
        for g in gt:
            g["_ignore"] = 1 if g["ignore"] or g["area"] < a_rng[0] or g["area"] > a_rng[1] else 0
        gtind = np.argsort([g["_ignore"] for g in gt], kind="mergesort")
        gt = [gt[i] for i in gtind]
        dtind = np.argsort([-d["score"] for d in dt], kind="mergesort")
        dt = [dt[i] for i in dtind[0:MAX_DETS]]
        iscrowd = [int(o["iscrowd"]) for o in gt]
        ious = self.ious[img, cat][:, gtind] if len(self.ious[img, cat]) > 0 else self.ious[img, cat]
        T, G, D = len(IOU_THRS), len(gt), len(dt)
        gtm, dtm = np.zeros((T, G)), np.zeros((T, D))
        gt_ig = np.array([g["_ignore"] for g in gt])
        dt_ig = np.zeros((T, D))
        if len(ious) != 0:
            for tind, t in enumerate(IOU_THRS):
                for dind, d in enumerate(dt):
                    iou = min([t, 1 - 1e-10])
                    m = -1
                    for gind, g in enumerate(gt):
                        if gtm[tind, gind] > 0 and not iscrowd[gind]:
                            continue
                        if m > -1 and gt_ig[m] == 0 and gt_ig[gind] == 1:
                            break
                        if ious[dind, gind] < iou:
                            continue
                        iou = ious[dind, gind]
                        m = gind
                    if m == -1:
                        continue
                    dt_ig[tind, dind] = gt_ig[m]
                    dtm[tind, dind] = gt[m]["id"]
                    gtm[tind, m] = d["id"]
        a = np.array([d["area"] < a_rng[0] or d["area"] > a_rng[1] for d in dt]).reshape((1, len(dt)))
        dt_ig = np.logical_or(dt_ig, np.logical_and(dtm == 0, np.repeat(a, T, 0)))
        return {"dtMatches": dtm, "dtScores": [d["score"] for d in dt], "gtIgnore": gt_ig, "dtIgnore": dt_ig}

    def evaluate(self):
        self.ious = {(i, c): self.compute_iou(i, c) for i in self.img_ids for c in self.cat_ids}
        self.eval_imgs = [self.evaluate_img(i, c, a) for c in self.cat_ids for a in AREA_RNG for i in self.img_ids]

    def accumulate(self):
        T, R, K, A = len(IOU_THRS), len(REC_THRS), len(self.cat_ids), len(AREA_RNG)
        precision = -np.ones((T, R, K, A))
        I0, A0 = len(self.img_ids), len(AREA_RNG) * len(self.img_ids)
        for k in range(K):
            for a in range(A):
                E = [self.eval_imgs[k * A0 + a * I0 + i] for i in range(I0)]
                E = [e for e in E if e is not None]
                if len(E) == 0:
                    continue
                dt_scores = np.concatenate([e["dtScores"][0:MAX_DETS] for e in E])
                inds = np.argsort(-dt_scores, kind="mergesort")
                dtm = np.concatenate([e["dtMatches"][:, 0:MAX_DETS] for e in E], axis=1)[:, inds]
                dt_ig = np.concatenate([e["dtIgnore"][:, 0:MAX_DETS] for e in E], axis=1)[:, inds]
                gt_ig = np.concatenate([e["gtIgnore"] for e in E])
                npig = np.count_nonzero(gt_ig == 0)
                if npig == 0:
                    continue
                tps = np.logical_and(dtm, np.logical_not(dt_ig))
                fps = np.logical_and(np.logical_not(dtm), np.logical_not(dt_ig))
                tp_sum = np.cumsum(tps, axis=1).astype(dtype=float)
                fp_sum = np.cumsum(fps, axis=1).astype(dtype=float)
                for t, (tp, fp) in enumerate(zip(tp_sum, fp_sum)):
                    tp, fp = np.array(tp), np.array(fp)
                    nd = len(tp)
                    rc = tp / npig
                    pr = (tp / (fp + tp + np.spacing(1))).tolist()
                    q = np.zeros((R,))
                    for i in range(nd - 1, 0, -1):
                        if pr[i] > pr[i - 1]:
                            pr[i - 1] = pr[i]
                    inds_r = np.searchsorted(rc, REC_THRS, side="left")
                    try:
                        for ri, pi in enumerate(inds_r):
                            q[ri] = pr[pi]
                    except IndexError:
                        pass
                    precision[t, :, k, a] = np.array(q)
        self.precision = precision

    def summarize(self):
        def ap(iou=None, area=0):
            s = self.precision
            if iou is not None:
                s = s[np.where(np.abs(iou - IOU_THRS) < 1e-12)[0]]
            s = s[:, :, :, area]
            return -1 if len(s[s > -1]) == 0 else float(np.mean(s[s > -1]))

        stats = {"map50_95": ap(), "map50": ap(.5), "map75": ap(.75), "map_small": ap(area=1),
                 "map_medium": ap(area=2), "map_large": ap(area=3)}
        per_class = []
        for k in range(len(self.cat_ids)):
            p = self.precision[:, :, k, 0]
            per_class.append((-1, -1) if (p > -1).sum() == 0 else (float(np.mean(p[0])), float(np.mean(p))))
        return stats, per_class


def random_case(rng, num_images, num_classes):
    q = lambda x: float(np.round(x * 4) / 4)  # quarter pixels: exact in float32
    images, gts, dts = [], [], []
    for img in range(num_images):
        gt_rows, dt_rows = [], []
        for _ in range(rng.integers(0, 9)):
            side = float(rng.choice([rng.uniform(4, 30), rng.uniform(33, 95), rng.uniform(97, 300)]))
            w, h = q(side * rng.uniform(0.6, 1.4)), q(side * rng.uniform(0.6, 1.4))
            x, y = q(rng.uniform(0, 640 - w)), q(rng.uniform(0, 640 - h))
            c = int(rng.integers(0, num_classes))
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
        images.append({"gt": gt_rows, "dt": dt_rows})
        for r in gt_rows:
            gts.append({"id": len(gts) + 1, "image_id": img, "category_id": r[4], "iscrowd": r[5],
                        "bbox": [r[0], r[1], r[2] - r[0], r[3] - r[1]], "area": r[6]})
        for r in dt_rows:
            w, h = r[2] - r[0], r[3] - r[1]
            dts.append({"id": len(dts) + 1, "image_id": img, "category_id": r[4], "score": r[5],
                        "bbox": [r[0], r[1], w, h], "area": w * h})
    e = CocoEval(gts, dts, list(range(num_images)), list(range(num_classes)))
    e.evaluate()
    e.accumulate()
    stats, per_class = e.summarize()
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
        a = json.load(f)
    with open(results) as f:
        dts = json.load(f)
    for i, d in enumerate(dts):  # loadRes: ids and box areas
        d["id"], d["area"] = i + 1, d["bbox"][2] * d["bbox"][3]
    e = CocoEval(a["annotations"], dts, [im["id"] for im in a["images"]], [c["id"] for c in a["categories"]])
    e.evaluate()
    e.accumulate()
    print(json.dumps(e.summarize()[0]))


def main(argv):
    if len(argv) == 3 and argv[0] == "images":
        return make_images(argv[1], argv[2]) or 0
    if len(argv) == 3 and argv[0] == "score":
        return score(argv[1], argv[2]) or 0
    if len(argv) != 2 or argv[0] != "cases":
        print(__doc__)
        return 2
    cases = [random_case(np.random.default_rng(seed), n, k) for seed, n, k in
             [(1, 30, 3), (2, 12, 1), (3, 40, 5), (4, 20, 2), (5, 25, 4)]]
    with open(argv[1], "w") as f:
        json.dump({"cases": cases}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
