#!/usr/bin/env python3
"""A second implementation of Ultralytics' YOLO detection models (YOLOv8, YOLO11, YOLO12), written
with torch.nn from Ultralytics' module semantics (ultralytics/nn/modules/{conv,block,head}.py and
parse_model in ultralytics/nn/tasks.py), not from meridian's C++. It reads the same model YAML
(jobs/configs/ultralytics/*.yaml) and builds modules whose state_dict names are Ultralytics'
(model.0.conv.weight, model.22.cv2.0.0.bn.running_mean, ...).

Usage (torch and yaml, as in meridian's Python environment; no Ultralytics needed):
  ultralytics_yolo.py count YAML SCALE [--nc N]
      prints the parameter count (Ultralytics' model.info() figure: parameters, not buffers)
  ultralytics_yolo.py make DIR --yaml YAML --scale S --nc N --seed K --size PX [--batch B]
      a random model with random BatchNorm statistics: DIR/model.safetensors (an Ultralytics
      state_dict, float32, with num_batches_tracked), and DIR/io.safetensors: "input" [B, 3, PX, PX]
      and "out.<l>" the raw head outputs of each level in eval mode ([B, 64 + nc, PX/s, PX/s],
      Detect's cat(cv2, cv3) before decoding); "out64.<l>" the same computed in float64 (a float32
      forward of a deep model differs from another float32 forward by its summation order alone)
  ultralytics_yolo.py same EXPORT CHECKPOINT
      meridian's export directory as Ultralytics would take it: builds the model from the exported
      YAML alone (its nc, its one scale), loads model.safetensors into it strictly (every name and
      shape), and checks that every tensor equals the checkpoint's (its EMA weights when it has them)
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_siglip import read_safetensors, write_safetensors  # noqa: E402 (safetensors by hand)


# ---- modules (Ultralytics' semantics and attribute names).
def autopad(k, p=None, d=1):
    if d > 1:
        k = d * (k - 1) + 1
    return k // 2 if p is None else p


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, d=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), groups=g, dilation=d, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)  # initialize_weights' eps and momentum
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DWConv(Conv):
    def __init__(self, c1, c2, k=1, s=1, d=1, act=True):
        super().__init__(c1, c2, k, s, g=math.gcd(c1, c2), d=d, act=act)


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, g=1, k=(3, 3), e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, k[0], 1)
        self.cv2 = Conv(c_, c2, k[1], 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=False, g=1, e=0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, k=(3, 3), e=1.0) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, k=(1, 3), e=1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C3k(C3):
    def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5, k=3):
        super().__init__(c1, c2, n, shortcut, g, e)
        c_ = int(c2 * e)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, k=(k, k), e=1.0) for _ in range(n)))


class C3k2(C2f):
    def __init__(self, c1, c2, n=1, c3k=False, e=0.5, g=1, shortcut=True):
        super().__init__(c1, c2, n, shortcut, g, e)
        self.m = nn.ModuleList(
            C3k(self.c, self.c, 2, shortcut, g) if c3k else Bottleneck(self.c, self.c, shortcut, g) for _ in range(n))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, attn_ratio=0.5):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim**-0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, 1, g=dim, act=False)

    def forward(self, x):
        B, C, H, W = x.shape
        N = H * W
        q, k, v = self.qkv(x).view(B, self.num_heads, self.key_dim * 2 + self.head_dim, N).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).view(B, C, H, W) + self.pe(v.reshape(B, C, H, W))
        return self.proj(x)


class PSABlock(nn.Module):
    def __init__(self, c, attn_ratio=0.5, num_heads=4, shortcut=True):
        super().__init__()
        self.attn = Attention(c, attn_ratio=attn_ratio, num_heads=num_heads)
        self.ffn = nn.Sequential(Conv(c, c * 2, 1), Conv(c * 2, c, 1, act=False))
        self.add = shortcut

    def forward(self, x):
        x = x + self.attn(x) if self.add else self.attn(x)
        return x + self.ffn(x) if self.add else self.ffn(x)


class C2PSA(nn.Module):
    def __init__(self, c1, c2, n=1, e=0.5):
        super().__init__()
        assert c1 == c2
        self.c = int(c1 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv(2 * self.c, c1, 1)
        self.m = nn.Sequential(*(PSABlock(self.c, attn_ratio=0.5, num_heads=self.c // 64) for _ in range(n)))

    def forward(self, x):
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


class AAttn(nn.Module):
    def __init__(self, dim, num_heads, area=1):
        super().__init__()
        self.area = area
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        all_head_dim = self.head_dim * num_heads
        self.qkv = Conv(dim, all_head_dim * 3, 1, act=False)
        self.proj = Conv(all_head_dim, dim, 1, act=False)
        self.pe = Conv(all_head_dim, dim, 7, 1, 3, g=dim, act=False)

    def forward(self, x):
        B, C, H, W = x.shape
        N = H * W
        qkv = self.qkv(x).flatten(2).transpose(1, 2)
        if self.area > 1:
            qkv = qkv.reshape(B * self.area, N // self.area, C * 3)
            B, N, _ = qkv.shape
        q, k, v = (qkv.view(B, N, self.num_heads, self.head_dim * 3).permute(0, 2, 3, 1).split(
            [self.head_dim, self.head_dim, self.head_dim], dim=2))
        attn = ((q.transpose(-2, -1) @ k) * (self.head_dim**-0.5)).softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).permute(0, 3, 1, 2)
        v = v.permute(0, 3, 1, 2)
        if self.area > 1:
            x = x.reshape(B // self.area, N * self.area, C)
            v = v.reshape(B // self.area, N * self.area, C)
            B, N, _ = x.shape
        x = x.reshape(B, H, W, C).permute(0, 3, 1, 2)
        v = v.reshape(B, H, W, C).permute(0, 3, 1, 2)
        return self.proj(x + self.pe(v))


class ABlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=1.2, area=1):
        super().__init__()
        self.attn = AAttn(dim, num_heads=num_heads, area=area)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(Conv(dim, hidden, 1), Conv(hidden, dim, 1, act=False))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class A2C2f(nn.Module):
    def __init__(self, c1, c2, n=1, a2=True, area=1, residual=False, mlp_ratio=2.0, e=0.5, g=1, shortcut=True):
        super().__init__()
        c_ = int(c2 * e)
        assert c_ % 32 == 0, "Dimension of ABlock be a multiple of 32."
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv((1 + n) * c_, c2, 1)
        self.gamma = nn.Parameter(0.01 * torch.ones(c2)) if a2 and residual else None
        self.m = nn.ModuleList(
            nn.Sequential(*(ABlock(c_, c_ // 32, mlp_ratio, area) for _ in range(2))) if a2 else C3k(c_, c_, 2, shortcut, g)
            for _ in range(n))

    def forward(self, x):
        y = [self.cv1(x)]
        for m in self.m:
            y.append(m(y[-1]))
        y = self.cv2(torch.cat(y, 1))
        return x + self.gamma.view(-1, self.gamma.shape[0], 1, 1) * y if self.gamma is not None else y


class Concat(nn.Module):
    def __init__(self, d=1):
        super().__init__()
        self.d = d

    def forward(self, x):
        return torch.cat(x, self.d)


class DFL(nn.Module):
    def __init__(self, c1=16):
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1)


class Detect(nn.Module):
    def __init__(self, nc, ch, legacy):
        super().__init__()
        self.nc, self.reg_max = nc, 16
        c2, c3 = max((16, ch[0] // 4, self.reg_max * 4)), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1)) for x in ch)
        self.cv3 = (nn.ModuleList(
            nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch) if legacy else
                    nn.ModuleList(
                        nn.Sequential(nn.Sequential(DWConv(x, x, 3), Conv(x, c3, 1)),
                                      nn.Sequential(DWConv(c3, c3, 3), Conv(c3, c3, 1)), nn.Conv2d(c3, nc, 1))
                        for x in ch))
        self.dfl = DFL(self.reg_max)

    def forward(self, xs):
        return [torch.cat((a(x), b(x)), 1) for x, a, b in zip(xs, self.cv2, self.cv3)]


# ---- parse_model: the YAML's [from, repeats, module, args] rows.
def make_divisible(x, d):
    return math.ceil(x / d) * d


class Model(nn.Module):
    def __init__(self, cfg, scale, nc):
        super().__init__()
        depth, width, max_channels = cfg["scales"][scale]
        ch, layers, self.froms, legacy = [3], [], [], True
        for f, n, m, args in cfg["backbone"] + cfg["head"]:
            args = [nc if a == "nc" else a for a in args]
            n = max(round(n * depth), 1) if n > 1 else n
            if m in ("Conv", "C2f", "C3k2", "SPPF", "C2PSA", "A2C2f"):
                c1, c2 = ch[f], args[0]
                if c2 != nc:
                    c2 = make_divisible(min(c2, max_channels) * width, 8)
                args = [c1, c2, *args[1:]]
                if m in ("C2f", "C3k2", "C2PSA", "A2C2f"):
                    args.insert(2, n)
                    n = 1
                if m == "C3k2":
                    legacy = False
                    if scale in "mlx":
                        args[3] = True
                if m == "A2C2f":
                    legacy = False
                    if scale in "lx":
                        args.extend((True, 1.2))
                module = globals()[m]
            elif m == "Concat":
                c2, module = sum(ch[x] for x in f), Concat
            elif m == "Detect":
                args, module = [args[0], [ch[x] for x in f], legacy], Detect
            elif m == "nn.Upsample":
                c2, module, args = ch[f], nn.Upsample, [None, args[1], args[2]]
            else:
                raise ValueError(f"module {m}")
            layer = nn.Sequential(*(module(*args) for _ in range(n))) if n > 1 else module(*args)
            layers.append(layer)
            self.froms.append(f)
            ch = ch if len(layers) > 1 else []
            ch.append(c2)
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        y = []
        for f, m in zip(self.froms, self.model):
            if f != -1:
                x = y[f] if isinstance(f, int) else [x if j == -1 else y[j] for j in f]
            x = m(x)
            y.append(x)
        return x


def build(yaml_path, scale, nc):
    with open(yaml_path) as f:
        return Model(yaml.safe_load(f), scale, nc)


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
                fan_in = t[0].numel()
                t.copy_(torch.randn(t.shape, generator=g) * (1.0 / fan_in) ** 0.5)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.num_batches_tracked.fill_(7)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["count", "make", "same"])
    p.add_argument("args", nargs="*")
    p.add_argument("--yaml")
    p.add_argument("--scale")
    p.add_argument("--nc", type=int, default=80)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    a = p.parse_args(argv)
    if a.command == "count":
        model = build(a.args[0], a.args[1], a.nc)
        print(sum(t.numel() for t in model.parameters()))
        return 0
    if a.command == "same":
        return same(*a.args)
    model = build(a.yaml, a.scale, a.nc).eval()
    out = a.args[0]
    torch.manual_seed(a.seed)
    randomize(model, a.seed)
    os.makedirs(out, exist_ok=True)
    write_safetensors(f"{out}/model.safetensors", list(model.state_dict().items()))
    x = torch.rand(a.batch, 3, a.size, a.size, generator=torch.Generator().manual_seed(a.seed + 1))
    with torch.no_grad():
        levels = model(x)
        levels64 = model.double()(x.double())
    write_safetensors(f"{out}/io.safetensors", [("input", x)] + [(f"out.{i}", l.contiguous()) for i, l in enumerate(levels)]
                      + [(f"out64.{i}", l.contiguous()) for i, l in enumerate(levels64)])
    return 0


def same(d, checkpoint):
    import h5py

    yamls = [f for f in os.listdir(d) if f.endswith(".yaml")]
    assert len(yamls) == 1, f"expected one model YAML in {d}: {yamls}"
    with open(f"{d}/{yamls[0]}") as f:
        cfg = yaml.safe_load(f)
    scales = list(cfg["scales"])
    assert len(scales) == 1, f"the export keeps one scale: {scales}"
    model = Model(cfg, scales[0], cfg["nc"])
    weights = read_safetensors(f"{d}/model.safetensors")
    model.load_state_dict(weights, strict=True)  # raises on a missing, unexpected or misshapen tensor
    with h5py.File(checkpoint, "r") as f:
        group = f["ema"] if "ema" in f else f["model"]
        theirs = {k: torch.from_numpy(group[k][...]) for k in group.keys()}
    missing = [k for k in weights if k not in theirs and not k.endswith("num_batches_tracked")]
    bad = [k for k in weights if k in theirs and not torch.equal(weights[k].double(), theirs[k].double())]
    print(f"{len(weights)} tensors ({cfg['nc']} classes, scale {scales[0]}, names {cfg.get('names')}); "
          f"not in the checkpoint: {missing[:5]}; differ: {bad[:5]}")
    return 1 if missing or bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
