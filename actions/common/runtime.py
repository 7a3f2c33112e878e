"""ONNX Runtime sessions, built once per process, and the action entry-point helpers.

Threads: ``ESG_ACTION_THREADS`` sets onnxruntime's ``intra_op_num_threads``; without it, the number
of CPUs this process may run on (the invoker agent pins actions to their vCPUs).
Device: the CUDA execution provider is used when onnxruntime-gpu offers it, unless
``ESG_ACTION_DEVICE=cpu``; inside a MIG slice CUDA sees only that slice. Before the first CUDA session
the CUDA and cuDNN libraries of NVIDIA's wheels (``onnxruntime-gpu[cuda,cudnn]``) are loaded with
``onnxruntime.preload_dlls`` (onnxruntime-gpu 1.21 and later), since the provider looks for them on the
library path only.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable

import numpy as np

_sessions: dict[tuple[str, int], object] = {}
_lock = threading.Lock()


def default_threads() -> int:
    env = os.environ.get("ESG_ACTION_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_preloaded: list[bool] = []


def providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    if os.environ.get("ESG_ACTION_DEVICE", "auto") != "cpu" and "CUDAExecutionProvider" in available:
        if not _preloaded:
            _preloaded.append(True)
            preload = getattr(ort, "preload_dlls", None)
            if preload is not None:
                preload()
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def session(name: str, build: Callable[[], object], threads: int | None = None):
    """The cached onnxruntime session of model `name`; `build()` makes its ModelProto on first use."""
    import onnxruntime as ort

    threads = threads or default_threads()
    key = (name, threads)
    with _lock:
        if key not in _sessions:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            model = build()
            _sessions[key] = ort.InferenceSession(model.SerializeToString(), sess_options=opts,
                                                  providers=providers())
    return _sessions[key]


def infer(name: str, build: Callable[[], object], batch: np.ndarray, threads: int | None = None) -> np.ndarray:
    """One inference over a stacked batch (N, 3, H, W) float32."""
    sess = session(name, build, threads)
    return sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(batch, np.float32)})[0]


class ActionError(ValueError):
    """Bad input to an action: answered as an application error ``{"error": ...}``."""


def run_single(main_batch: Callable[[list], list], args: dict) -> dict:
    """`main(args)` for an action: one-element batch; errors become ``{"error": ...}`` results.

    ``{"__esg_batch__": [args, ...]}`` runs a whole batch through the runtime protocol, which only
    carries one JSON object per /run; the reply is ``{"__esg_batch__": [result, ...]}``.
    """
    if isinstance(args, dict) and isinstance(args.get("__esg_batch__"), list):
        return {"__esg_batch__": main_batch(args["__esg_batch__"])}
    return main_batch([args])[0]


def guarded(fn: Callable[[list], list]) -> Callable[[list], list]:
    """Wrap a batch function: a bad element gets an error result, the others still run."""

    def main_batch(batch: list) -> list:
        if not isinstance(batch, list):
            return [{"error": "main_batch expects a list of parameter objects"}]
        ok = [i for i, a in enumerate(batch) if isinstance(a, dict)]
        results: list = [{"error": "parameters must be a JSON object"}] * len(batch)
        try:
            out = fn([batch[i] for i in ok])
            for i, r in zip(ok, out, strict=True):
                results[i] = r
        except ActionError as e:
            if len(ok) == 1:
                results[ok[0]] = {"error": str(e)}
            else:  # find the culprits one by one, run the rest
                for i in ok:
                    results[i] = main_batch([batch[i]])[0]
        except Exception as e:  # noqa: BLE001 - an action must answer, never crash the runtime
            for i in ok:
                results[i] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=3)}
        return results

    main_batch.__doc__ = fn.__doc__
    main_batch.__wrapped__ = fn  # type: ignore[attr-defined]
    return main_batch
