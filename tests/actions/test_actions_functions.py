"""Each function's main and main_batch on small real inputs."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from actions import MODULES, function_module
from actions.common.codec import decode_array, encode_array
from actions.preprocess import main as preprocess

SIZE = 64  # small images keep the suite fast; the default is 224


@pytest.fixture(scope="module")
def pre():
    return [preprocess({"seed": s, "size": SIZE}) for s in (1, 2)]


def png_b64(rgb: np.ndarray, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode()


def assert_same(a, b, rtol=1e-3, atol=1e-3):
    """Results equal up to float tolerance (encoded arrays compared numerically)."""
    if isinstance(a, dict) and {"dtype", "shape", "data"} <= a.keys():
        x, y = decode_array(a).astype(np.float64), decode_array(b).astype(np.float64)
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k], rtol, atol)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y, rtol, atol)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=rtol, abs=atol)
    else:
        assert a == b


def test_preprocess_decodes_png_and_jpeg_and_normalises():
    rgb = np.zeros((40, 80, 3), np.uint8)
    rgb[..., 0] = 255  # pure red
    for fmt in ("PNG", "JPEG"):
        out = preprocess({"image": png_b64(rgb, fmt), "size": 32})
        x = decode_array(out["tensor"]).astype(np.float32)
        assert out["tensor"]["dtype"] == "float16" and x.shape == (3, 32, 32)
        assert out["source"] == {"format": fmt, "width": 80, "height": 40}
        np.testing.assert_allclose(x[0], (1 - 0.485) / 0.229, atol=0.05)  # red channel, ImageNet norm
        np.testing.assert_allclose(x[1], (0 - 0.456) / 0.224, atol=0.05)


def test_preprocess_default_size_fits_a_kafka_message():
    out = preprocess({"seed": 0})
    assert out["tensor"]["shape"] == [3, 224, 224]
    assert len(out["tensor"]["data"]) < 1_000_000 * 0.45
    assert preprocess({"seed": 0}) == out  # deterministic test image


@pytest.mark.parametrize("args, words", [
    ({}, "image"), ({"image": "not base64!"}, "base64"), ({"image": base64.b64encode(b"xyz").decode()}, "decoded"),
    ({"seed": -1}, "seed"), ({"seed": 1, "size": 100}, "size"),
])
def test_preprocess_rejects_bad_input_with_a_message(args, words):
    out = preprocess(args)
    assert set(out) == {"error"} and words in out["error"]


@pytest.mark.parametrize("name", ["resnet50", "densenet121", "inceptionv3"])
def test_classifier_gives_a_distribution_and_batches_like_singles(name, pre):
    mod = function_module(name)
    singles = [mod.main(p) for p in pre]
    batch = mod.main_batch(pre)
    for s, b in zip(singles, batch, strict=True):
        probs = decode_array(s["probs"]).astype(np.float64)
        assert probs.shape == (1000,) and abs(probs.sum() - 1) < 0.01 and (probs >= 0).all()
        assert s["top5"][0]["class"] == int(np.argmax(probs))
        assert [t["prob"] for t in s["top5"]] == sorted((t["prob"] for t in s["top5"]), reverse=True)
        assert_same(s["probs"], b["probs"])
        assert [t["class"] for t in s["top5"][:1]] == [t["class"] for t in b["top5"][:1]]
    # different images, different outputs: the network really looks at its input
    assert not np.allclose(decode_array(singles[0]["probs"]), decode_array(singles[1]["probs"]))


def test_models_are_deterministic_across_builds():
    from actions import resnet50

    a, b = resnet50.build(), resnet50.build()
    assert a.SerializeToString() == b.SerializeToString()


def test_midas_depth_map_and_batch(pre):
    from actions import midas

    singles = [midas.main(p) for p in pre]
    for s, b in zip(singles, midas.main_batch(pre), strict=True):
        d = decode_array(s["depth"]).astype(np.float32)
        assert d.shape == (SIZE, SIZE) and (d >= 0).all() and d.std() > 0
        assert_same(s, b, rtol=1e-2, atol=1e-2)


def test_deeplabv3_mask_and_batch(pre):
    from actions import deeplabv3

    singles = [deeplabv3.main(p) for p in pre]
    for p, s, b in zip(pre, singles, deeplabv3.main_batch(pre), strict=True):
        mask = decode_array(s["mask"])
        assert mask.shape == (SIZE, SIZE) and mask.max() < 21
        assert sum(s["class_fractions"].values()) == pytest.approx(1.0, abs=1e-4)
        assert s["tensor"] == p["tensor"]  # passed on for composite
        assert (decode_array(b["mask"]) != mask).mean() < 0.01
        assert b["class_fractions"].keys() == s["class_fractions"].keys()


def test_depth_post_normalises_colours_and_summarises():
    depth = np.tile(np.linspace(0, 10, 16, dtype=np.float32), (8, 1))  # far left, near right
    single = function_module("depth-post").main({"depth": encode_array(depth, "float16")})
    assert single["stats"]["min"] == 0 and single["stats"]["max"] == 10
    assert single["stats"]["median"] == pytest.approx(5, abs=0.1)
    assert single["near_fraction"] == 0.5
    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(single["preview"]["png"]))))
    assert img.shape == (8, 16, 3)
    assert img[0, -1].sum() > img[0, 0].sum()  # near is bright
    other = {"depth": encode_array(depth[::-1] * 2, "float16")}
    batch = function_module("depth-post").main_batch([{"depth": encode_array(depth, "float16")}, other])
    assert batch[0] == single and batch[1] == function_module("depth-post").main(other)


def test_composite_removes_the_background():
    rgb = np.full((32, 32, 3), 200, np.uint8)
    x = (rgb.astype(np.float32) / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    mask = np.zeros((32, 32), np.uint8)
    mask[8:16, 4:20] = 15  # a "person" box
    args = {"mask": encode_array(mask, "uint8"), "tensor": encode_array(x.transpose(2, 0, 1), "float16")}
    out = function_module("composite").main(args)
    assert out["foreground_fraction"] == pytest.approx(8 * 16 / 32 / 32)
    assert out["bbox"] == [4, 8, 20, 16]
    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(out["image"]["png"]))))
    assert img.shape == (32, 32, 4)
    assert img[0, 0, 3] == 0 and img[10, 10, 3] == 255  # background transparent, person opaque
    assert abs(int(img[10, 10, 0]) - 200) <= 2
    empty = dict(args, mask=encode_array(np.zeros((32, 32), np.uint8), "uint8"))
    batch = function_module("composite").main_batch([args, empty])
    assert batch[0] == out and batch[1]["bbox"] is None and batch[1]["foreground_fraction"] == 0


def _cls(probs):
    p = np.asarray(probs, np.float32)
    return {"probs": encode_array(p, "float16"), "top5": []}


def test_vote_majority_and_mean_probability():
    a = _cls([0.7, 0.2, 0.1])
    b = _cls([0.6, 0.3, 0.1])
    c = _cls([0.0, 0.1, 0.9])
    out = function_module("vote").main({"resnet50": a, "densenet121": b, "inceptionv3": c})
    assert out["majority"] == {"class": 0, "label": "class-000", "votes": 2}
    assert [t["class"] for t in out["top5"]] == [0, 2, 1]
    assert out["top5"][0]["prob"] == pytest.approx((0.7 + 0.6) / 3, abs=1e-3)
    assert out["agreement"] == pytest.approx(2 / 3, abs=1e-6)
    assert out["models"]["inceptionv3"]["class"] == 2
    tie = function_module("vote").main({"x": _cls([0.5, 0.4, 0.1]), "y": _cls([0.0, 0.9, 0.1])})
    assert tie["majority"]["class"] == 1  # one vote each: higher mean probability wins
    batch = function_module("vote").main_batch([{"a": a, "b": b, "c": c}, {"x": c}])
    assert batch[0]["majority"] == out["majority"] and batch[1]["majority"]["class"] == 2


def test_bad_element_in_a_batch_fails_alone(pre):
    out = function_module("resnet50").main_batch([pre[0], {"tensor": "junk"}, 7])
    assert "top5" in out[0] and "error" in out[1] and "error" in out[2]
    assert "missing 'tensor'" in function_module("resnet50").main({"seed": 1})["error"]
    assert "with 'probs'" in function_module("vote").main({"resnet50": {"nope": 1}})["error"]


def test_runtime_protocol_batch_envelope(pre):
    mod = function_module("densenet121")
    out = mod.main({"__esg_batch__": pre})
    assert len(out["__esg_batch__"]) == 2 and out["__esg_batch__"][1]["top5"] == mod.main(pre[1])["top5"]


def test_every_function_has_main_and_main_batch():
    for name in MODULES:
        mod = function_module(name)
        assert callable(mod.main) and callable(mod.main_batch)
    with pytest.raises(KeyError, match="known"):
        function_module("nope")
