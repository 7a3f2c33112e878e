"""midas: a scaled-down MiDaS-style monocular depth network (encoder-decoder) on ONNX Runtime.

Structure: a residual encoder (conv7x7/2 + maxpool, then 4 stages of basic residual blocks,
widths [24, 48, 96, 192] at strides 4, 8, 16, 32); 1x1 "reassemble" projections of the four stages
to 48 channels; a RefineNet-style decoder of 4 fusion blocks (residual conv units, add the upsampled
coarser path, bilinear 2x); a head conv3x3 -> bilinear upsample to the input size -> conv3x3 + ReLU
-> conv1x1 + ReLU, giving a non-negative relative inverse depth map (N, 1, H, W), as MiDaS does.
Weights are random but deterministic (seeded): the outputs are not meaningful depth.

Result: ``{"model": "midas", "depth": {"dtype": "float16", "shape": [H, W], "data": b64}}``
(about 130 KB of JSON at 224x224).
"""

from __future__ import annotations

import numpy as np

from actions.common.codec import encode_array
from actions.common.graph import GraphBuilder
from actions.common.runtime import guarded, infer, run_single
from actions.common.vision import run_batched

NAME = "midas"
WIDTHS = [24, 48, 96, 192]
FEATURES = 48


def basic_block(g: GraphBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    y = g.conv_bn_relu(x, cin, cout, 3, stride)
    y = g.conv_bn_relu(y, cout, cout, 3, relu=False, gain=0.3)
    shortcut = x if (cin == cout and stride == 1) else g.conv_bn_relu(x, cin, cout, 1, stride, relu=False)
    return g.relu(g.add(y, shortcut))


def residual_conv_unit(g: GraphBuilder, x: str, c: int) -> str:
    y = g.conv(g.relu(x), c, c, 3, bias=True)
    y = g.conv(g.relu(y), c, c, 3, bias=True, gain=0.3)
    return g.add(x, y)


def build():
    g = GraphBuilder(NAME)
    x = g.maxpool(g.conv_bn_relu("input", 3, WIDTHS[0], 7, 2))
    c, skips = WIDTHS[0], []
    for i, w in enumerate(WIDTHS):
        x = basic_block(g, x, c, w, 1 if i == 0 else 2)
        x, c = basic_block(g, x, w, w, 1), w
        skips.append(g.conv(x, w, FEATURES, 1))  # reassemble to a common width
    path = None
    for skip in reversed(skips):  # fusion blocks, coarse to fine
        y = residual_conv_unit(g, skip, FEATURES)
        if path is not None:
            y = g.add(g.resize_like(path, y), y)
        path = residual_conv_unit(g, y, FEATURES)
        path = g.conv(path, FEATURES, FEATURES, 1, bias=True)
    head = g.conv(path, FEATURES, FEATURES // 2, 3, bias=True)
    head = g.resize_like(head, "input")
    head = g.relu(g.conv(head, FEATURES // 2, 16, 3, bias=True))
    depth = g.relu(g.conv(head, 16, 1, 1, bias=True))
    return g.build("input", depth, ["N", 1, "H", "W"])


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Depth maps for a batch of preprocess results, with one inference."""

    def finish(_args: dict, _x: np.ndarray, depth: np.ndarray) -> dict:
        return {"model": NAME, "depth": encode_array(depth[0], "float16")}

    return run_batched(batch, lambda x: infer(NAME, build, x), finish)


def main(args: dict) -> dict:
    return run_single(main_batch, args)
