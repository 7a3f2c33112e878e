"""resnet50: a scaled-down ResNet-50 (bottleneck residual blocks) classifier on ONNX Runtime.

Structure: conv7x7/2 + BN + ReLU + maxpool; 4 stages of bottleneck blocks (1x1 reduce, 3x3, 1x1
expand x4, identity or projection shortcut) with [1, 2, 2, 1] blocks (ResNet-50: [3, 4, 6, 3]) and
widths [32, 64, 128, 256] (ResNet-50: [64, 128, 256, 512]); global average pool; fc 1000; softmax.
Weights are random but deterministic (seeded): the outputs are not meaningful predictions.
"""

from __future__ import annotations

from actions.common.classify import CLASSES, classify_batch
from actions.common.graph import GraphBuilder
from actions.common.runtime import guarded, run_single

NAME = "resnet50"
STAGES = [(32, 1, 1), (64, 2, 2), (128, 2, 2), (256, 1, 2)]  # (width, blocks, stride of first block)
EXPANSION = 4


def bottleneck(g: GraphBuilder, x: str, cin: int, width: int, stride: int) -> tuple[str, int]:
    cout = width * EXPANSION
    y = g.conv_bn_relu(x, cin, width, 1)
    y = g.conv_bn_relu(y, width, width, 3, stride)
    y = g.conv_bn_relu(y, width, cout, 1, relu=False, gain=0.3)
    shortcut = x if (cin == cout and stride == 1) else g.conv_bn_relu(x, cin, cout, 1, stride, relu=False)
    return g.relu(g.add(y, shortcut)), cout


def build():
    g = GraphBuilder(NAME)
    x = g.maxpool(g.conv_bn_relu("input", 3, 16, 7, 2))
    c = 16
    for width, blocks, stride in STAGES:
        for b in range(blocks):
            x, c = bottleneck(g, x, c, width, stride if b == 0 else 1)
    return g.build("input", g.classifier(x, c, CLASSES), ["N", CLASSES])


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Classify a batch of preprocess results with one inference."""
    return classify_batch(NAME, build, batch)


def main(args: dict) -> dict:
    return run_single(main_batch, args)
