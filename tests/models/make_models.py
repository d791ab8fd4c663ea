#!/usr/bin/env python3
"""Face networks defined in PyTorch and exported with PyTorch's own ONNX exporter, with PyTorch's reference outputs.

Every model is built with deterministic weights (numpy RandomState, so the weights do not depend on the torch
version; BatchNorm running statistics randomised so no BN is an identity), put in eval mode and exported with the
TorchScript exporter (``torch.onnx.export``, ``dynamo=False`` where the torch version knows that argument) with a
dynamic batch axis. For batch 1 and batch 4 it writes a deterministic random input and the model's outputs, computed
by PyTorch in float64 from the same weights and rounded to float32, as raw little-endian float32 files, plus a
``manifest.json`` naming the files, their shapes and the sha256 of the model. tests/models/README.md describes the
layout; the C++ side is tests/models/exported_models.h.

    python3 tests/models/make_models.py                      # the committed (small) models into tests/models/
    python3 tests/models/make_models.py --only iresnet100 --out DIR   # one full-size model on demand
    python3 tests/models/make_models.py --arch r50 --out DIR          # the same as --only iresnet50
    python3 tests/models/make_models.py --list

Needs torch (1.13 .. 2.x) and numpy; onnx (the Python package) is optional and only checks the exported file.
"""
import argparse
import copy
import hashlib
import inspect
import io
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17  # the TorchScript exporter's default in torch 2.x; torch 1.13 knows it too
# Also exported at opset 11, the opset of insightface's torch2onnx.py and of many published RetinaFace / SCRFD / YuNet
# exports (Resize with an roi input, Squeeze/Unsqueeze with axes attributes, Split with a split attribute).
EXTRA_OPSETS = {"iresnet18_w8": (11,), "retinaface_mnet025": (11,), "scrfd_small": (11,), "yunet_style": (11,)}
MAX_COMMITTED_BYTES = 2 * 1024 * 1024


# ----------------------------------------------------------------------------------------------------------------
# IResNet (insightface arcface_torch/backbones/iresnet.py): BN-conv-BN-PReLU-conv-BN basic blocks, residual adds,
# BN2d -> Flatten -> Dropout -> Linear -> BatchNorm1d.

def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class IBasicBlock(nn.Module):
    def __init__(self, cin, cout, stride, downsample):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, eps=1e-5)
        self.conv1 = conv3x3(cin, cout)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-5)
        self.prelu = nn.PReLU(cout)
        self.conv2 = conv3x3(cout, cout, stride)
        self.bn3 = nn.BatchNorm2d(cout, eps=1e-5)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.bn1(x)
        out = self.conv1(out)
        out = self.bn2(out)
        out = self.prelu(out)
        out = self.conv2(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        return out + identity


class IResNet(nn.Module):
    LAYERS = {"r18": [2, 2, 2, 2], "r34": [3, 4, 6, 3], "r50": [3, 4, 14, 3], "r100": [3, 13, 30, 3]}

    def __init__(self, arch="r100", width_div=1, embedding=512, size=112):
        super().__init__()
        widths = [64 // width_div, 128 // width_div, 256 // width_div, 512 // width_div]
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0], eps=1e-5)
        self.prelu = nn.PReLU(widths[0])
        cin = widths[0]
        stages = []
        for n, w in zip(self.LAYERS[arch], widths):
            ds = nn.Sequential(nn.Conv2d(cin, w, 1, stride=2, bias=False), nn.BatchNorm2d(w, eps=1e-5))
            blocks = [IBasicBlock(cin, w, 2, ds)] + [IBasicBlock(w, w, 1, None) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.bn2 = nn.BatchNorm2d(cin, eps=1e-5)
        self.dropout = nn.Dropout(p=0.2)
        side = size // 16
        self.fc = nn.Linear(cin * side * side, embedding)
        self.features = nn.BatchNorm1d(embedding, eps=1e-5)

    def forward(self, x):
        x = self.prelu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.bn2(x)
        x = torch.flatten(x, 1)
        x = self.dropout(x)
        x = self.fc(x)
        return self.features(x)


# ----------------------------------------------------------------------------------------------------------------
# RetinaFace with a MobileNet-0.25 backbone (biubug6/Pytorch_Retinaface models/net.py, models/retinaface.py).

def conv_bn(cin, cout, stride=1, leaky=0.0):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(negative_slope=leaky, inplace=True))


def conv_bn_no_relu(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout))


def conv_bn1x1(cin, cout, stride=1, leaky=0.0):
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(negative_slope=leaky, inplace=True))


def conv_dw(cin, cout, stride, leaky=0.1):
    return nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                         nn.LeakyReLU(negative_slope=leaky, inplace=True),
                         nn.Conv2d(cin, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(negative_slope=leaky, inplace=True))


class MobileNetV1(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(conv_bn(3, 8, 2, leaky=0.1), conv_dw(8, 16, 1), conv_dw(16, 32, 2),
                                    conv_dw(32, 32, 1), conv_dw(32, 64, 2), conv_dw(64, 64, 1))
        self.stage2 = nn.Sequential(conv_dw(64, 128, 2), *[conv_dw(128, 128, 1) for _ in range(5)])
        self.stage3 = nn.Sequential(conv_dw(128, 256, 2), conv_dw(256, 256, 1))

    def forward(self, x):
        c1 = self.stage1(x)
        c2 = self.stage2(c1)
        return c1, c2, self.stage3(c2)


class SSH(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        leaky = 0.1 if cout <= 64 else 0.0
        self.conv3X3 = conv_bn_no_relu(cin, cout // 2)
        self.conv5X5_1 = conv_bn(cin, cout // 4, leaky=leaky)
        self.conv5X5_2 = conv_bn_no_relu(cout // 4, cout // 4)
        self.conv7X7_2 = conv_bn(cout // 4, cout // 4, leaky=leaky)
        self.conv7x7_3 = conv_bn_no_relu(cout // 4, cout // 4)

    def forward(self, x):
        c3 = self.conv3X3(x)
        c5_1 = self.conv5X5_1(x)
        c5 = self.conv5X5_2(c5_1)
        c7 = self.conv7x7_3(self.conv7X7_2(c5_1))
        return F.relu(torch.cat([c3, c5, c7], dim=1))


class FPN(nn.Module):
    def __init__(self, in_channels, cout):
        super().__init__()
        leaky = 0.1 if cout <= 64 else 0.0
        self.output1 = conv_bn1x1(in_channels[0], cout, leaky=leaky)
        self.output2 = conv_bn1x1(in_channels[1], cout, leaky=leaky)
        self.output3 = conv_bn1x1(in_channels[2], cout, leaky=leaky)
        self.merge1 = conv_bn(cout, cout, leaky=leaky)
        self.merge2 = conv_bn(cout, cout, leaky=leaky)

    def forward(self, inputs):
        o1, o2, o3 = self.output1(inputs[0]), self.output2(inputs[1]), self.output3(inputs[2])
        up3 = F.interpolate(o3, size=[o2.size(2), o2.size(3)], mode="nearest")
        o2 = self.merge2(o2 + up3)
        up2 = F.interpolate(o2, size=[o1.size(2), o1.size(3)], mode="nearest")
        o1 = self.merge1(o1 + up2)
        return [o1, o2, o3]


class Head(nn.Module):
    def __init__(self, cin, anchors, k):
        super().__init__()
        self.k = k
        self.conv1x1 = nn.Conv2d(cin, anchors * k, 1, 1, 0)

    def forward(self, x):
        out = self.conv1x1(x).permute(0, 2, 3, 1).contiguous()
        return out.view(out.shape[0], -1, self.k)


class RetinaFace(nn.Module):
    def __init__(self, anchors=2, cout=64):
        super().__init__()
        self.body = MobileNetV1()
        self.fpn = FPN([64, 128, 256], cout)
        self.ssh = nn.ModuleList([SSH(cout, cout) for _ in range(3)])
        self.class_head = nn.ModuleList([Head(cout, anchors, 2) for _ in range(3)])
        self.bbox_head = nn.ModuleList([Head(cout, anchors, 4) for _ in range(3)])
        self.ldm_head = nn.ModuleList([Head(cout, anchors, 10) for _ in range(3)])

    def forward(self, x):
        feats = [ssh(f) for ssh, f in zip(self.ssh, self.fpn(self.body(x)))]
        bbox = torch.cat([h(f) for h, f in zip(self.bbox_head, feats)], dim=1)
        cls = torch.cat([h(f) for h, f in zip(self.class_head, feats)], dim=1)
        ldm = torch.cat([h(f) for h, f in zip(self.ldm_head, feats)], dim=1)
        return bbox, F.softmax(cls, dim=-1), ldm


# ----------------------------------------------------------------------------------------------------------------
# SCRFD-style detector (insightface detection/scrfd: a ResNet-ish backbone of stride-2 convs with BN + ReLU, a
# PAFPN neck with nearest up-sampling + add and stride-2 down-sampling + add, shared heads without GroupNorm,
# sigmoid scores, a learnable per-level box scale, outputs reshaped with x.shape[0]).

def cbr(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = cbr(c, c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(self.conv1(x))) + x)


class SCRFD(nn.Module):
    def __init__(self, widths=(8, 16, 32, 48, 64), neck=32, anchors=2):
        super().__init__()
        self.stem = nn.Sequential(cbr(3, widths[0], s=2), cbr(widths[0], widths[0]))
        self.stages = nn.ModuleList()
        for cin, cout in zip(widths[:-1], widths[1:]):
            self.stages.append(nn.Sequential(cbr(cin, cout, s=2), BasicBlock(cout)))
        self.lateral = nn.ModuleList([nn.Conv2d(c, neck, 1) for c in widths[2:]])
        self.fpn_convs = nn.ModuleList([cbr(neck, neck) for _ in range(3)])
        self.down = nn.ModuleList([cbr(neck, neck, s=2) for _ in range(2)])
        self.pafpn_convs = nn.ModuleList([cbr(neck, neck) for _ in range(2)])
        self.head = nn.Sequential(cbr(neck, neck), cbr(neck, neck))
        self.cls = nn.Conv2d(neck, anchors, 3, 1, 1)
        self.reg = nn.Conv2d(neck, anchors * 4, 3, 1, 1)
        self.kps = nn.Conv2d(neck, anchors * 10, 3, 1, 1)
        self.scales = nn.Parameter(torch.ones(3))

    def forward(self, x):
        x = self.stem(x)
        feats = []
        for i, st in enumerate(self.stages):
            x = st(x)
            if i >= 1:
                feats.append(x)  # strides 8, 16, 32
        lat = [l(f) for l, f in zip(self.lateral, feats)]
        for i in (2, 1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], scale_factor=2.0, mode="nearest")
        outs = [c(l) for c, l in zip(self.fpn_convs, lat)]
        for i in range(2):
            outs[i + 1] = outs[i + 1] + self.down[i](outs[i])
        outs = [outs[0]] + [c(o) for c, o in zip(self.pafpn_convs, outs[1:])]
        scores, boxes, kpss = [], [], []
        for lvl, o in enumerate(outs):
            h = self.head(o)
            s = torch.sigmoid(self.cls(h)).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 1)
            b = (self.reg(h) * self.scales[lvl]).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 4)
            k = self.kps(h).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 10)
            scores.append(s)
            boxes.append(b)
            kpss.append(k)
        return tuple(scores + boxes + kpss)


# ----------------------------------------------------------------------------------------------------------------
# MobileFaceNet (Chen et al. 2018; the insightface / foamliu PyTorch layout): conv-BN-PReLU, depthwise-separable
# bottlenecks with residuals, a 7x7 global depthwise conv (GDC), Linear + BatchNorm1d.

class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k=1, s=1, p=0, groups=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.PReLU(cout) if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DepthWise(nn.Module):
    def __init__(self, cin, cout, s, groups, residual):
        super().__init__()
        self.expand = ConvBlock(cin, groups)
        self.dw = ConvBlock(groups, groups, 3, s, 1, groups=groups)
        self.project = ConvBlock(groups, cout, act=False)
        self.residual = residual

    def forward(self, x):
        y = self.project(self.dw(self.expand(x)))
        return x + y if self.residual else y


class MobileFaceNet(nn.Module):
    def __init__(self, width=1.0, embedding=128):
        super().__init__()
        c = lambda n: max(8, int(n * width))
        self.conv1 = ConvBlock(3, c(64), 3, 2, 1)
        self.conv2_dw = ConvBlock(c(64), c(64), 3, 1, 1, groups=c(64))
        layers = [DepthWise(c(64), c(64), 2, c(128), False)]
        layers += [DepthWise(c(64), c(64), 1, c(128), True) for _ in range(4)]
        layers += [DepthWise(c(64), c(128), 2, c(256), False)]
        layers += [DepthWise(c(128), c(128), 1, c(256), True) for _ in range(6)]
        layers += [DepthWise(c(128), c(128), 2, c(512), False)]
        layers += [DepthWise(c(128), c(128), 1, c(256), True) for _ in range(2)]
        self.blocks = nn.Sequential(*layers)
        self.conv_sep = ConvBlock(c(128), c(512))
        self.gdc = ConvBlock(c(512), c(512), 7, 1, 0, groups=c(512), act=False)
        self.linear = nn.Linear(c(512), embedding, bias=False)
        self.bn = nn.BatchNorm1d(embedding)

    def forward(self, x):
        x = self.gdc(self.conv_sep(self.blocks(self.conv2_dw(self.conv1(x)))))
        return self.bn(self.linear(torch.flatten(x, 1)))


# ----------------------------------------------------------------------------------------------------------------
# YuNet-style detector (libfacedetection.train yunet: 1x1 conv + 3x3 depthwise "DP units" with BN + ReLU, 2x2
# max pools, a tiny top-down FPN with nearest x2 up-sampling + add, per-stride cls/obj/bbox/kps heads, sigmoid on
# cls and obj, outputs permuted to NHWC and reshaped with x.shape[0]; the output names of the real YuNet).

class DPUnit(nn.Module):
    def __init__(self, cin, cout, bn_relu=True):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 1, 1, 0)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, groups=cout)
        self.bn_relu = bn_relu
        if bn_relu:
            self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = self.conv2(self.conv1(x))
        return F.relu(self.bn(x)) if self.bn_relu else x


class YuNetStyle(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), DPUnit(16, 16))
        self.stage1 = nn.Sequential(DPUnit(16, 16), DPUnit(16, c))
        self.stage2 = nn.Sequential(DPUnit(c, c), DPUnit(c, c))
        self.stage3 = nn.Sequential(DPUnit(c, c), DPUnit(c, c))
        self.stage4 = nn.Sequential(DPUnit(c, c), DPUnit(c, c))
        self.fpn = nn.ModuleList([DPUnit(c, c) for _ in range(3)])
        self.cls = nn.ModuleList([DPUnit(c, 1, False) for _ in range(3)])
        self.obj = nn.ModuleList([DPUnit(c, 1, False) for _ in range(3)])
        self.bbox = nn.ModuleList([DPUnit(c, 4, False) for _ in range(3)])
        self.kps = nn.ModuleList([DPUnit(c, 10, False) for _ in range(3)])

    def forward(self, x):
        x = self.stage1(F.max_pool2d(self.head(x), 2))   # stride 4
        s8 = self.stage2(F.max_pool2d(x, 2))
        s16 = self.stage3(F.max_pool2d(s8, 2))
        s32 = self.fpn[2](self.stage4(F.max_pool2d(s16, 2)))
        s16 = self.fpn[1](s16 + F.interpolate(s32, scale_factor=2.0, mode="nearest"))
        s8 = self.fpn[0](s8 + F.interpolate(s16, scale_factor=2.0, mode="nearest"))
        feats = [s8, s16, s32]
        nhwc = lambda t, k: t.permute(0, 2, 3, 1).reshape(x.shape[0], -1, k)
        cls = [nhwc(torch.sigmoid(h(f)), 1) for h, f in zip(self.cls, feats)]
        obj = [nhwc(torch.sigmoid(h(f)), 1) for h, f in zip(self.obj, feats)]
        bbox = [nhwc(h(f), 4) for h, f in zip(self.bbox, feats)]
        kps = [nhwc(h(f), 10) for h, f in zip(self.kps, feats)]
        return tuple(cls + obj + bbox + kps)


# ----------------------------------------------------------------------------------------------------------------

STRIDES = (8, 16, 32)
MODELS = {
    # name: (builder, input shape CHW, output names, committed)
    "iresnet18_w8": (lambda: IResNet("r18", width_div=8, embedding=64), (3, 112, 112), ["embedding"], True),
    "iresnet50_w16": (lambda: IResNet("r50", width_div=16, embedding=128), (3, 112, 112), ["embedding"], True),
    "iresnet18": (lambda: IResNet("r18"), (3, 112, 112), ["embedding"], False),
    "iresnet50": (lambda: IResNet("r50"), (3, 112, 112), ["embedding"], False),
    "iresnet100": (lambda: IResNet("r100"), (3, 112, 112), ["embedding"], False),
    # 150 x 200: the FPN's interpolate(size=...) up-samples 10 -> 19 and 13 -> 25 (not whole multiples)
    "retinaface_mnet025": (lambda: RetinaFace(), (3, 150, 200), ["bbox", "scores", "landmarks"], True),
    "scrfd_small": (lambda: SCRFD(), (3, 128, 160),
                    [f"{k}_{s}" for k in ("score", "bbox", "kps") for s in STRIDES], True),
    "mobilefacenet_w05": (lambda: MobileFaceNet(width=0.5, embedding=128), (3, 112, 112), ["embedding"], True),
    "mobilefacenet": (lambda: MobileFaceNet(width=1.0, embedding=128), (3, 112, 112), ["embedding"], False),
    "yunet_style": (lambda: YuNetStyle(), (3, 160, 160),
                    [f"{k}_{s}" for k in ("cls", "obj", "bbox", "kps") for s in STRIDES], True),
}
BATCHES = (1, 4)


def seed_of(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def init_weights(model, seed):
    """Deterministic, torch-version-independent weights; BN statistics random so no BN is an identity."""
    rng = np.random.RandomState(seed)
    with torch.no_grad():
        for mod_name, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                w = rng.standard_normal(m.weight.shape) * np.sqrt(2.0 / fan_in)
                m.weight.copy_(torch.from_numpy(w))
                if m.bias is not None:
                    m.bias.copy_(torch.from_numpy(rng.standard_normal(m.bias.shape) * 0.1))
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                n = m.num_features
                # the last BN of an IResNet branch is kept small so 49 residual adds do not blow up (r100)
                lo, hi = (0.2, 0.5) if mod_name.endswith(".bn3") else (0.5, 1.5)
                m.weight.copy_(torch.from_numpy(rng.uniform(lo, hi, n)))
                m.bias.copy_(torch.from_numpy(rng.standard_normal(n) * 0.1))
                m.running_mean.copy_(torch.from_numpy(rng.standard_normal(n) * 0.1))
                m.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, n)))
            elif isinstance(m, nn.PReLU):
                m.weight.copy_(torch.from_numpy(rng.uniform(0.05, 0.4, m.weight.shape)))
        for p_name, p in model.named_parameters(recurse=False):
            p.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, p.shape)))  # e.g. SCRFD's box scales


def export_onnx(model, example, input_name, output_names, exporter, opset=OPSET):
    """The bytes of the exported model."""
    kwargs = dict(input_names=[input_name], output_names=output_names, opset_version=opset,
                  dynamic_axes={n: {0: "batch"} for n in [input_name] + output_names})
    knows_dynamo = "dynamo" in inspect.signature(torch.onnx.export).parameters
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        if exporter == "torchscript":
            if knows_dynamo:
                kwargs["dynamo"] = False  # the TorchScript exporter, the one torch 1.13 has
            try:
                torch.onnx.export(model, (example,), path, do_constant_folding=True, **kwargs)
            except Exception as e:
                raise SystemExit(f"torch {torch.__version__}: the TorchScript exporter failed ({e}); "
                                 "try --exporter dynamo") from e
        else:
            if not knows_dynamo:
                raise SystemExit(f"torch {torch.__version__} has no dynamo exporter")
            try:
                torch.onnx.export(model, (example,), path, dynamo=True, external_data=False, **kwargs)
            except TypeError:  # a torch before the external_data argument
                torch.onnx.export(model, (example,), path, dynamo=True, **kwargs)
        with open(path, "rb") as f:
            return f.read()


def onnx_summary(data):
    try:
        import onnx
    except ImportError:
        return None
    m = onnx.load_from_string(data)
    onnx.checker.check_model(m)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return dict(sorted(ops.items()))


def write_f32(path, array):
    np.ascontiguousarray(array, dtype="<f4").tofile(path)


def make(name, out_root, check_size, exporter, extra_opsets=()):
    builder, chw, output_names, committed = MODELS[name]
    torch.manual_seed(0)
    model = builder().eval()
    init_weights(model, seed_of(name))
    input_name = "input"
    rng = np.random.RandomState(seed_of(name) ^ 0x5EED)
    data = export_onnx(model, torch.zeros((1,) + chw), input_name, output_names, exporter)
    if check_size and committed and len(data) > MAX_COMMITTED_BYTES:
        raise SystemExit(f"{name}: {len(data)} bytes, over the {MAX_COMMITTED_BYTES} B limit for committed models")
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(data)
    also = []
    for opset in sorted(set(EXTRA_OPSETS.get(name, ())) | set(extra_opsets)):
        if opset == OPSET:
            continue
        d = export_onnx(model, torch.zeros((1,) + chw), input_name, output_names, exporter, opset)
        if check_size and committed and len(d) > MAX_COMMITTED_BYTES:
            raise SystemExit(f"{name} opset {opset}: {len(d)} bytes, over the limit for committed models")
        fname = f"model_opset{opset}.onnx"
        with open(os.path.join(out, fname), "wb") as f:
            f.write(d)
        also.append({"opset": opset, "model": fname, "bytes": len(d), "sha256": hashlib.sha256(d).hexdigest(),
                     "ops": onnx_summary(d)})
        print(f"{name} opset {opset}: {len(d)} B, ops {also[-1]['ops']}")
    ref = copy.deepcopy(model).double().eval()
    manifest = {
        "name": name,
        "model": "model.onnx",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "torch": torch.__version__,
        "exporter": exporter,
        "opset": OPSET,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "ops": onnx_summary(data),
        "also": also,  # the same model exported at other opsets; same inputs and references
        "input": {"name": input_name, "shape": ["batch"] + list(chw)},
        "reference": "PyTorch in float64 from the float32 weights, rounded to float32",
        "cases": [],
    }
    for b in BATCHES:
        x = rng.uniform(-1.0, 1.0, (b,) + chw).astype(np.float32)
        with torch.no_grad():
            y64 = ref(torch.from_numpy(x).double())
            y32 = model(torch.from_numpy(x))
        y64 = [y64] if isinstance(y64, torch.Tensor) else list(y64)
        y32 = [y32] if isinstance(y32, torch.Tensor) else list(y32)
        in_file = f"input_b{b}.bin"
        write_f32(os.path.join(out, in_file), x)
        case = {"batch": b, "input": in_file, "input_shape": list(x.shape), "outputs": []}
        for oname, t64, t32 in zip(output_names, y64, y32):
            a = t64.numpy().astype(np.float32)
            f = f"output_b{b}_{oname}.bin"
            write_f32(os.path.join(out, f), a)
            scale = float(np.abs(a).max())
            err32 = float(np.abs(t32.numpy() - a).max())
            case["outputs"].append({"name": oname, "shape": list(a.shape), "file": f, "max_abs": scale,
                                    "torch_fp32_max_err": err32})
            print(f"  {name} B={b} {oname} {list(a.shape)} max|ref| {scale:.4g} torch fp32 err {err32:.3g}")
        manifest["cases"].append(case)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{name}: {len(data)} B, {manifest['parameters']} parameters, ops {manifest['ops']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="model name (repeatable, or comma-separated)")
    ap.add_argument("--arch", choices=["r18", "r50", "r100"], help="a full-size IResNet (same as --only iresnetNN)")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)), help="output folder")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                    help="torch.onnx.export with dynamo=False (default; the exporter the committed models come from) "
                         "or dynamo=True (torch >= 2.5, needs onnxscript), for a torch that has dropped the former")
    ap.add_argument("--opset", type=int, action="append", default=[],
                    help=f"also export at this opset (repeatable; {OPSET} is always written)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.list:
        for n, (_, chw, outs, committed) in MODELS.items():
            print(f"{n:22s} input {list(chw)} outputs {len(outs)} {'committed' if committed else 'on demand'}")
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    names = [n for o in args.only for n in o.split(",") if n]
    if args.arch:
        names.append("iresnet" + args.arch[1:])
    if not names:
        names = [n for n, v in MODELS.items() if v[3]]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; --list shows them")
    print(f"torch {torch.__version__}, opset {OPSET}")
    for n in names:
        make(n, args.out, check_size=not args.only and not args.arch, exporter=args.exporter, extra_opsets=args.opset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
