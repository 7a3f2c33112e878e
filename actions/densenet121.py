"""densenet121: a scaled-down DenseNet-121 (dense blocks) classifier on ONNX Runtime.

Structure: conv7x7/2 + BN + ReLU + maxpool; 4 dense blocks of [4, 6, 8, 4] layers (DenseNet-121:
[6, 12, 24, 16]), each layer BN-ReLU-conv1x1 (4 x growth) then BN-ReLU-conv3x3 (growth 16;
DenseNet-121: 32) concatenated onto its input; transitions BN-ReLU-conv1x1 (compression 0.5) +
avgpool 2x2; final BN + ReLU; global average pool; fc 1000; softmax.
Weights are random but deterministic (seeded): the outputs are not meaningful predictions.
"""

from __future__ import annotations

from actions.common.classify import CLASSES, classify_batch
from actions.common.graph import GraphBuilder
from actions.common.runtime import guarded, run_single

NAME = "densenet121"
BLOCKS = [4, 6, 8, 4]
GROWTH = 16
STEM = 32


def bn_relu_conv(g: GraphBuilder, x: str, cin: int, cout: int, k: int) -> str:
    return g.conv(g.relu(g.bn(x, cin)), cin, cout, k)


def dense_block(g: GraphBuilder, x: str, c: int, layers: int) -> tuple[str, int]:
    for _ in range(layers):
        y = bn_relu_conv(g, x, c, 4 * GROWTH, 1)
        y = bn_relu_conv(g, y, 4 * GROWTH, GROWTH, 3)
        x, c = g.concat([x, y]), c + GROWTH
    return x, c


def build():
    g = GraphBuilder(NAME)
    x = g.maxpool(g.conv_bn_relu("input", 3, STEM, 7, 2))
    c = STEM
    for i, layers in enumerate(BLOCKS):
        x, c = dense_block(g, x, c, layers)
        if i < len(BLOCKS) - 1:
            x = g.avgpool(bn_relu_conv(g, x, c, c // 2, 1))
            c //= 2
    x = g.relu(g.bn(x, c))
    return g.build("input", g.classifier(x, c, CLASSES), ["N", CLASSES])


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Classify a batch of preprocess results with one inference."""
    return classify_batch(NAME, build, batch)


def main(args: dict) -> dict:
    return run_single(main_batch, args)
