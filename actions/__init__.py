"""The four ESG evaluation apps' functions as OpenWhisk Python actions.

Every function ``NAME`` (a profile name and an action name; see ``apps/*.json``) is the module
``actions.<MODULES[NAME]>`` with ``main(args) -> dict`` and ``main_batch(list) -> list``.
Importing this package is cheap: the modules (numpy, onnx, onnxruntime, pillow) load on demand.
"""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = {
    "preprocess": "preprocess",
    "resnet50": "resnet50",
    "densenet121": "densenet121",
    "inceptionv3": "inceptionv3",
    "midas": "midas",
    "deeplabv3": "deeplabv3",
    "depth-post": "depth_post",
    "composite": "composite",
    "vote": "vote",
}

# Functions that do no DNN work: deployed with the annotation esg-gpu: false
CPU_ONLY = frozenset({"preprocess", "depth-post", "composite", "vote"})


def function_module(name: str) -> ModuleType:
    """The action module of function `name` (KeyError naming the known functions if unknown)."""
    if name not in MODULES:
        raise KeyError(f"unknown function {name!r}; known: {', '.join(sorted(MODULES))}")
    return importlib.import_module(f"actions.{MODULES[name]}")
