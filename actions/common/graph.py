"""A small ONNX graph builder with deterministic weight initialisation.

The DNN actions describe their networks with this builder (conv, batch norm, relu, pooling, gemm,
resize, ...). Weights come from a seeded numpy generator, so the same model name always gives the
same weights, in every process and on every machine: pretrained weights cannot be shipped, but
compute shape and data flow are those of the real architectures.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # supported by onnxruntime >= 1.14


def seed_for(name: str) -> int:
    """A stable 32-bit seed derived from a model name (unlike hash(), not salted per process)."""
    return zlib.crc32(name.encode("utf-8"))


class GraphBuilder:
    """Accumulates ONNX nodes and initialisers; every op returns the name of its output tensor."""

    def __init__(self, name: str, seed: int | None = None):
        self.name = name
        self.rng = np.random.default_rng(seed_for(name) if seed is None else seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    # -- plumbing ---------------------------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, array: np.ndarray, prefix: str = "const") -> str:
        name = self._fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], prefix: str | None = None, **attrs) -> str:
        out = self._fresh(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    # -- layers -----------------------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int | tuple[int, int] = 3, stride: int = 1,
             dilation: int = 1, groups: int = 1, bias: bool = False, gain: float = 1.0) -> str:
        """He-initialised convolution, 'same' padding; `gain` scales the weights (residual branches)."""
        kh, kw = (k, k) if isinstance(k, int) else k
        fan_in = cin // groups * kh * kw
        w = gain * self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(cout, cin // groups, kh, kw))
        inputs = [x, self.const(w.astype(np.float32), "w")]
        if bias:
            inputs.append(self.const(np.zeros(cout, np.float32), "b"))
        pad_h, pad_w = dilation * (kh - 1) // 2, dilation * (kw - 1) // 2
        return self.op("Conv", inputs, "conv", kernel_shape=[kh, kw], strides=[stride, stride],
                       pads=[pad_h, pad_w, pad_h, pad_w], dilations=[dilation, dilation], group=groups)

    def bn(self, x: str, c: int, gain: float = 1.0) -> str:
        """Inference-mode batch norm; `gain` scales gamma (small on the last BN of a residual branch,
        the usual trick that keeps a deep residual net's activations from growing block by block)."""
        scale = (gain * self.rng.uniform(0.8, 1.2, c)).astype(np.float32)
        shift = self.rng.normal(0.0, 0.05, c).astype(np.float32)
        mean = np.zeros(c, np.float32)
        var = np.ones(c, np.float32)
        return self.op("BatchNormalization", [x, self.const(scale, "gamma"), self.const(shift, "beta"),
                                              self.const(mean, "mean"), self.const(var, "var")],
                       "bn", epsilon=1e-5)

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def conv_bn_relu(self, x: str, cin: int, cout: int, k: int | tuple[int, int] = 3, stride: int = 1,
                     dilation: int = 1, relu: bool = True, gain: float = 1.0) -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, dilation), cout, gain)
        return self.relu(y) if relu else y

    def add(self, a: str, b: str) -> str:
        return self.op("Add", [a, b])

    def concat(self, xs: list[str]) -> str:
        return self.op("Concat", xs, "concat", axis=1)

    def maxpool(self, x: str, k: int = 3, stride: int = 2) -> str:
        p = (k - 1) // 2
        return self.op("MaxPool", [x], "maxpool", kernel_shape=[k, k], strides=[stride, stride],
                       pads=[p, p, p, p])

    def avgpool(self, x: str, k: int = 2, stride: int = 2, pad: int = 0) -> str:
        return self.op("AveragePool", [x], "avgpool", kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, count_include_pad=0)

    def global_avgpool(self, x: str) -> str:
        return self.op("GlobalAveragePool", [x], "gap")

    def classifier(self, x: str, cin: int, classes: int) -> str:
        """GlobalAveragePool -> Flatten -> Gemm -> Softmax: class probabilities of shape (N, classes)."""
        flat = self.op("Flatten", [self.global_avgpool(x)], "flatten", axis=1)
        w = self.rng.normal(0.0, np.sqrt(1.0 / cin), size=(classes, cin)).astype(np.float32)
        b = self.rng.normal(0.0, 0.01, size=classes).astype(np.float32)
        logits = self.op("Gemm", [flat, self.const(w, "fc_w"), self.const(b, "fc_b")], "gemm", transB=1)
        return self.op("Softmax", [logits], "softmax", axis=1)

    def spatial_shape(self, ref: str) -> str:
        """The (H, W) of a 4-D tensor, as a 1-D int64 tensor computed at run time."""
        return self.op("Slice", [self.op("Shape", [ref]), self.const(np.array([2], np.int64)),
                                 self.const(np.array([4], np.int64))], "hw")

    def resize_like(self, x: str, ref: str, mode: str = "linear") -> str:
        """Resize x (N, C, h, w) to the spatial size of ref (., ., H, W): works for any input size."""
        nc = self.op("Slice", [self.op("Shape", [x]), self.const(np.array([0], np.int64)),
                               self.const(np.array([2], np.int64))], "nc")
        sizes = self.op("Concat", [nc, self.spatial_shape(ref)], "sizes", axis=0)
        return self.op("Resize", [x, "", "", sizes], "resize", mode=mode)

    def broadcast_like(self, x: str, ref: str) -> str:
        """Expand x (N, C, 1, 1) over the spatial size of ref (image-pooling branches)."""
        shape = self.op("Concat", [self.const(np.array([1, 1], np.int64)), self.spatial_shape(ref)],
                        "shape", axis=0)
        return self.op("Expand", [x, shape], "expand")

    # -- finish -----------------------------------------------------------------------------------
    def build(self, input_name: str, output: str, out_shape: list,
              output_name: str = "output") -> onnx.ModelProto:
        """A model with a dynamic batch (and spatial) input `input_name` (N, 3, H, W); `out_shape`
        names the output's dims, e.g. ``["N", 1000]`` or ``["N", 21, "H", "W"]``."""
        self.nodes.append(helper.make_node("Identity", [output], [output_name]))
        inp = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 3, "H", "W"])
        out = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, out_shape)
        graph = helper.make_graph(self.nodes, self.name, [inp], [out], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="esg-openwhisk")
        model.ir_version = 8  # readable by onnxruntime >= 1.14
        onnx.checker.check_model(model)
        return calibrate(model, seed_for(self.name) + 1)


def calibrate(model: onnx.ModelProto, seed: int, size: int = 128, logit_std: float = 2.0) -> onnx.ModelProto:
    """Set batch-norm statistics from data, as training would have, so activations stay unit-scale.

    Runs a copy of the model in training-mode batch norm (each BatchNormalization replaced by
    ops that normalise with the batch's own mean and variance) on a small deterministic batch of
    synthetic pictures, and stores each layer's batch mean and variance as its running statistics:
    the model then computes on that batch exactly what the training-mode copy did. A Gemm that
    feeds a Softmax gets its weights scaled so the logits have standard deviation `logit_std`
    (random features would otherwise give near-uniform or one-hot probabilities).
    Changes `model` in place and returns it.
    """
    import onnxruntime as ort

    from actions.common.vision import normalize, synthetic_image

    inits = {t.name: t for t in model.graph.initializer}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    nodes, extra, stats = [], [], []
    for n in probe.graph.node:
        if n.op_type != "BatchNormalization":
            nodes.append(n)
            continue
        x, scale, bias, mean_name, var_name = n.input
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        c = numpy_helper.to_array(inits[scale]).shape[0]
        m, d, v = f"{n.output[0]}/mean", f"{n.output[0]}/centered", f"{n.output[0]}/var"
        for name, value in [(scale, inits[scale]), (bias, inits[bias])]:
            extra.append(numpy_helper.from_array(numpy_helper.to_array(value).reshape(c, 1, 1), f"{name}/r"))
        extra.append(numpy_helper.from_array(np.array(eps, np.float32), f"{n.output[0]}/eps"))
        nodes += [
            helper.make_node("ReduceMean", [x], [m], axes=[0, 2, 3], keepdims=1),
            helper.make_node("Sub", [x, m], [d]),
            helper.make_node("Mul", [d, d], [f"{d}/sq"]),
            helper.make_node("ReduceMean", [f"{d}/sq"], [v], axes=[0, 2, 3], keepdims=1),
            helper.make_node("Add", [v, f"{n.output[0]}/eps"], [f"{v}/eps"]),
            helper.make_node("Sqrt", [f"{v}/eps"], [f"{v}/sd"]),
            helper.make_node("Div", [d, f"{v}/sd"], [f"{d}/norm"]),
            helper.make_node("Mul", [f"{d}/norm", f"{scale}/r"], [f"{d}/scaled"]),
            helper.make_node("Add", [f"{d}/scaled", f"{bias}/r"], [n.output[0]]),
        ]
        stats.append((m, v, mean_name, var_name))
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"
             and any(s.op_type == "Softmax" and s.input[0] == n.output[0] for s in model.graph.node)]
    del probe.graph.node[:]
    probe.graph.node.extend(nodes)
    probe.graph.initializer.extend(extra)
    outputs = [m for m, *_ in stats] + [v for _, v, *_ in stats] + [n.output[0] for n in gemms]
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in outputs)
    x = np.stack([normalize(synthetic_image(seed + i, size, size)) for i in range(4)])
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the replaced BN's statistics are unused initialisers: no warnings
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    seen = dict(zip(outputs, sess.run(None, {model.graph.input[0].name: x}), strict=True))
    for m, v, mean_name, var_name in stats:
        inits[mean_name].CopyFrom(numpy_helper.from_array(seen[m].reshape(-1).astype(np.float32), mean_name))
        inits[var_name].CopyFrom(numpy_helper.from_array(seen[v].reshape(-1).astype(np.float32), var_name))
    for n in gemms:
        std = float(seen[n.output[0]].std())
        if std > 0:
            w = numpy_helper.to_array(inits[n.input[1]]) * (logit_std / std)
            inits[n.input[1]].CopyFrom(numpy_helper.from_array(w.astype(np.float32), n.input[1]))
    return model
