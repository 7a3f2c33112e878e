"""inceptionv3: a scaled-down Inception-v3 (multi-branch inception modules) classifier on ONNX Runtime.

Structure: stem conv3x3/2, conv3x3, conv3x3, maxpool, conv1x1, conv3x3, maxpool (as Inception-v3,
narrower and padded); 2 Inception-A modules (1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1); a
grid-reduction module (3x3/2 | 1x1-3x3-3x3/2 | maxpool); 2 Inception-C-style modules with
factorised 1x7/7x1 convolutions; a second reduction; global average pool; fc 1000; softmax.
Every conv is conv + BN + ReLU. Inception-v3 takes 299x299 inputs; this one takes the shared
preprocess output (224x224 by default; any multiple of 32 works).
Weights are random but deterministic (seeded): the outputs are not meaningful predictions.
"""

from __future__ import annotations

from actions.common.classify import CLASSES, classify_batch
from actions.common.graph import GraphBuilder
from actions.common.runtime import guarded, run_single

NAME = "inceptionv3"
W = 8  # width unit (Inception-v3 uses 4x-12x wider branches)


def inception_a(g: GraphBuilder, x: str, cin: int, pool_c: int) -> tuple[str, int]:
    b1 = g.conv_bn_relu(x, cin, 8 * W, 1)
    b5 = g.conv_bn_relu(g.conv_bn_relu(x, cin, 6 * W, 1), 6 * W, 8 * W, 5)
    b3 = g.conv_bn_relu(x, cin, 8 * W, 1)
    b3 = g.conv_bn_relu(g.conv_bn_relu(b3, 8 * W, 12 * W, 3), 12 * W, 12 * W, 3)
    bp = g.conv_bn_relu(g.avgpool(x, 3, 1, 1), cin, pool_c, 1)
    return g.concat([b1, b5, b3, bp]), 8 * W + 8 * W + 12 * W + pool_c


def reduction(g: GraphBuilder, x: str, cin: int) -> tuple[str, int]:
    b3 = g.conv_bn_relu(x, cin, 16 * W, 3, 2)
    bd = g.conv_bn_relu(g.conv_bn_relu(x, cin, 8 * W, 1), 8 * W, 12 * W, 3)
    bd = g.conv_bn_relu(bd, 12 * W, 12 * W, 3, 2)
    return g.concat([b3, bd, g.maxpool(x, 3, 2)]), 16 * W + 12 * W + cin


def inception_c(g: GraphBuilder, x: str, cin: int) -> tuple[str, int]:
    b1 = g.conv_bn_relu(x, cin, 16 * W, 1)
    b7 = g.conv_bn_relu(x, cin, 10 * W, 1)
    b7 = g.conv_bn_relu(g.conv_bn_relu(b7, 10 * W, 10 * W, (1, 7)), 10 * W, 16 * W, (7, 1))
    bd = g.conv_bn_relu(x, cin, 10 * W, 1)
    for k in [(7, 1), (1, 7), (7, 1)]:
        bd = g.conv_bn_relu(bd, 10 * W, 10 * W, k)
    bd = g.conv_bn_relu(bd, 10 * W, 16 * W, (1, 7))
    bp = g.conv_bn_relu(g.avgpool(x, 3, 1, 1), cin, 16 * W, 1)
    return g.concat([b1, b7, bd, bp]), 64 * W


def build():
    g = GraphBuilder(NAME)
    x = g.conv_bn_relu("input", 3, 4 * W, 3, 2)
    x = g.conv_bn_relu(x, 4 * W, 4 * W, 3)
    x = g.maxpool(g.conv_bn_relu(x, 4 * W, 8 * W, 3))
    x = g.maxpool(g.conv_bn_relu(g.conv_bn_relu(x, 8 * W, 10 * W, 1), 10 * W, 16 * W, 3))
    x, c = inception_a(g, x, 16 * W, 4 * W)
    x, c = inception_a(g, x, c, 8 * W)
    x, c = reduction(g, x, c)
    x, c = inception_c(g, x, c)
    x, c = inception_c(g, x, c)
    x, c = reduction(g, x, c)
    return g.build("input", g.classifier(x, c, CLASSES), ["N", CLASSES])


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Classify a batch of preprocess results with one inference."""
    return classify_batch(NAME, build, batch)


def main(args: dict) -> dict:
    return run_single(main_batch, args)
