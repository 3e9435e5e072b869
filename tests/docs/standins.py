#!/usr/bin/env python3
"""Small stand-ins, in their published layouts, for what docs/running.md's walkthroughs download, so
that tests/docs/running_docs_test.sh can run its marked blocks as written (the models themselves come
from tests/models/*.py). Writes into DIR:
  ucm/images/*.png, ucm/captions.jsonl   160 images of 48 px (136 train, 24 test), 5 captions each
  AID/<CamelCaseClass>/*.png              4 class folders of 4 images, as AID ships them
  queries.txt                             3 text queries
  alpaca_data.json                        400 Alpaca records (a JSON array, no split)
  datasets/mydata/                        Ultralytics' YOLO layout: images/ and labels/ of train (16) and
                                          val (4) and data.yaml with 2 class names
PNG files are written by hand (zlib): no imaging library is installed here.
"""
import json
import os
import struct
import sys
import zlib

import numpy as np


def write_png(path, rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def scene(rng, cls, size):
    """A class-coloured background with a few bright rectangles: different classes look different."""
    base = np.array([[40, 120, 40], [150, 130, 90], [200, 190, 140], [90, 90, 100]][cls % 4], dtype=np.int32)
    img = np.clip(base + rng.integers(-25, 26, size=(size, size, 3)), 0, 255).astype(np.uint8)
    boxes = []
    for _ in range(2):
        w, h = rng.integers(size // 6, size // 3, size=2)
        x, y = rng.integers(0, size - w), rng.integers(0, size - h)
        img[y:y + h, x:x + w] = [250, 250, 250] if cls % 2 else [20, 20, 200]
        boxes.append((cls % 2, (x + w / 2) / size, (y + h / 2) / size, w / size, h / size))
    return img, boxes


def main(d):
    rng = np.random.default_rng(0)
    words = ["farmland", "forest", "beach", "residential"]
    os.makedirs(f"{d}/ucm/images", exist_ok=True)
    with open(f"{d}/ucm/captions.jsonl", "w") as f:
        for i in range(160):
            c = i % 4
            name = f"{words[c]}_{i:03d}.png"
            write_png(f"{d}/ucm/images/{name}", scene(rng, c, 48)[0])
            caps = [f"an aerial image of {words[c]} number {k}" for k in range(5)]
            f.write(json.dumps({"image": name, "captions": caps, "class": words[c],
                                "split": "train" if i < 136 else "test"}) + "\n")
    for c, cls in enumerate(["Airport", "BareLand", "Beach", "DenseResidential"]):
        os.makedirs(f"{d}/AID/{cls}", exist_ok=True)
        for i in range(4):
            write_png(f"{d}/AID/{cls}/{cls.lower()}_{i}.png", scene(rng, c, 48)[0])
    with open(f"{d}/queries.txt", "w") as f:
        f.write("a beach next to the sea\nmany buildings\ngreen farmland\n")
    records = [{"instruction": f"Describe scene {i} in detail.", "input": "" if i % 3 else f"tile {i}",
                "output": " ".join(rng.choice(words + ["with", "a", "river", "and", "roads"], size=40))}
               for i in range(400)]
    json.dump(records, open(f"{d}/alpaca_data.json", "w"))
    y = f"{d}/datasets/mydata"
    for split, n in (("train", 16), ("val", 4)):
        os.makedirs(f"{y}/images/{split}", exist_ok=True)
        os.makedirs(f"{y}/labels/{split}", exist_ok=True)
        for i in range(n):
            img, boxes = scene(rng, i, 64)
            write_png(f"{y}/images/{split}/img_{i}.png", img)
            with open(f"{y}/labels/{split}/img_{i}.txt", "w") as f:
                f.writelines(f"{c} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}\n" for c, cx, cy, w, h in boxes)
    with open(f"{y}/data.yaml", "w") as f:
        f.write(f"path: {y}\ntrain: images/train\nval: images/val\nnames:\n  0: plane\n  1: ship\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
