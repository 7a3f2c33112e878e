"""deeplabv3: a scaled-down DeepLabv3 (atrous ResNet + ASPP) semantic segmentation net on ONNX Runtime.

Structure: conv7x7/2 + BN + ReLU + maxpool; 4 stages of basic residual blocks, widths
[24, 48, 96, 96], the last two atrous (dilation 2 and 4 instead of striding: output stride 8,
as DeepLabv3 on ResNet); ASPP with five 64-channel branches (1x1, 3x3 at rates 6, 12, 18, and
image pooling: global average pool -> 1x1 -> broadcast); concat -> 1x1 + BN + ReLU -> 1x1 to the
21 PASCAL VOC classes -> bilinear upsample to the input size. Class 0 is background.
Weights are random but deterministic (seeded): the masks are not meaningful segmentations.

Result: ``{"model": "deeplabv3", "mask": {"dtype": "uint8", "shape": [H, W], ...},
"class_fractions": {...}, "tensor": <the input tensor, passed on for composite>}``
(about 470 KB of JSON at 224x224).
"""

from __future__ import annotations

import numpy as np

from actions.common.codec import encode_array
from actions.common.graph import GraphBuilder
from actions.common.runtime import guarded, infer, run_single
from actions.common.vision import run_batched

NAME = "deeplabv3"
CLASSES = 21
STAGES = [(24, 1, 1), (48, 2, 1), (96, 1, 2), (96, 1, 4)]  # (width, stride, dilation)
ASPP = 64
RATES = [6, 12, 18]


def basic_block(g: GraphBuilder, x: str, cin: int, cout: int, stride: int, dilation: int) -> str:
    y = g.conv_bn_relu(x, cin, cout, 3, stride, dilation)
    y = g.conv_bn_relu(y, cout, cout, 3, 1, dilation, relu=False, gain=0.3)
    shortcut = x if (cin == cout and stride == 1) else g.conv_bn_relu(x, cin, cout, 1, stride, relu=False)
    return g.relu(g.add(y, shortcut))


def aspp(g: GraphBuilder, x: str, cin: int) -> str:
    branches = [g.conv_bn_relu(x, cin, ASPP, 1)]
    branches += [g.conv_bn_relu(x, cin, ASPP, 3, dilation=r) for r in RATES]
    pooled = g.relu(g.conv(g.global_avgpool(x), cin, ASPP, 1, bias=True))
    branches.append(g.broadcast_like(pooled, x))
    return g.conv_bn_relu(g.concat(branches), ASPP * len(branches), ASPP, 1)


def build():
    g = GraphBuilder(NAME)
    x = g.maxpool(g.conv_bn_relu("input", 3, STAGES[0][0], 7, 2))
    c = STAGES[0][0]
    for w, stride, dilation in STAGES:
        x = basic_block(g, x, c, w, stride, dilation)
        x, c = basic_block(g, x, w, w, 1, dilation), w
    y = g.conv_bn_relu(aspp(g, x, c), ASPP, ASPP, 3)
    logits = g.conv(y, ASPP, CLASSES, 1, bias=True)
    return g.build("input", g.resize_like(logits, "input"), ["N", CLASSES, "H", "W"])


def class_fractions(mask: np.ndarray) -> dict[str, float]:
    counts = np.bincount(mask.ravel(), minlength=CLASSES)
    return {str(k): round(float(v) / mask.size, 6) for k, v in enumerate(counts) if v}


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Segmentation masks for a batch of preprocess results, with one inference."""

    def finish(args: dict, _x: np.ndarray, logits: np.ndarray) -> dict:
        mask = np.argmax(logits, axis=0).astype(np.uint8)
        return {"model": NAME, "mask": encode_array(mask, "uint8"),
                "class_fractions": class_fractions(mask), "tensor": args["tensor"]}

    return run_batched(batch, lambda x: infer(NAME, build, x), finish)


def main(args: dict) -> dict:
    return run_single(main_batch, args)
