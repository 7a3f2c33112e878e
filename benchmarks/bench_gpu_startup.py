"""Start-up costs of a DNN function on a real GPU node: what a cold start is made of, and warm latency.

    PYTHONPATH=. python benchmarks/bench_gpu_startup.py [--repeats 2] [--json FILE]

Each measurement runs in a fresh process, so nothing is cached in memory between them:

* **torch** (needs PyTorch + torchvision with CUDA): for full-size ResNet-50, DenseNet-121, Inception-v3
  and DeepLabV3-ResNet50 (random weights, nothing downloaded) -- framework import, CUDA context,
  model build and copy to the GPU, first inference (kernel selection), the same for a second copy of the
  model in the same process (a warm runtime loading a new model), and warm fp32 latency at batch 1..32;
* **actions**: the project's own ONNX Runtime actions (`actions/`), cold in a fresh process --
  library import, action import, first call (model build, session, first inference) -- and warm
  latency at batch 1 and 8, on whatever execution provider ONNX Runtime offers;
* **nvml**: the agent's pynvml backend read-only (GPUs, MIG mode, the GPU-instance profiles NVML
  reports, compared with `esg/mig.py`'s geometry). Nothing here changes MIG mode or creates or destroys
  an instance, so MIG reconfiguration time is not measured.

The figures it printed on an H100 are in `docs/startup-costs.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TORCH_CHILD = r'''
import json, statistics, sys, time
t_start = time.time()
import torch, torchvision
t_import = time.time()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t_context = time.time()
models = torchvision.models
builders = {
    "resnet50": lambda: (models.resnet50(weights=None), 224),
    "densenet121": lambda: (models.densenet121(weights=None), 224),
    "inceptionv3": lambda: (models.inception_v3(weights=None, aux_logits=False, init_weights=False), 299),
    "deeplabv3": lambda: (models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None), 224),
}
loads = []
for _ in range(2):
    a = time.time()
    net, size = builders[sys.argv[1]]()
    net = net.cuda().eval(); torch.cuda.synchronize()
    b = time.time()
    with torch.no_grad():
        net(torch.randn(1, 3, size, size, device="cuda")); torch.cuda.synchronize()
    loads.append(((b - a) * 1000, (time.time() - b) * 1000))
warm = {}
with torch.no_grad():
    for batch in (1, 4, 8, 16, 32):
        x = torch.randn(batch, 3, size, size, device="cuda")
        for _ in range(3): net(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            a = time.time(); net(x); torch.cuda.synchronize(); times.append((time.time() - a) * 1000)
        warm[batch] = statistics.median(times)
print(json.dumps({"t_start": t_start, "import_ms": (t_import - t_start) * 1000,
                  "cuda_context_ms": (t_context - t_import) * 1000, "load_ms": loads[0][0],
                  "first_inference_ms": loads[0][1], "second_load_ms": loads[1][0],
                  "second_first_inference_ms": loads[1][1], "warm_ms": warm}))
'''

ACTION_CHILD = r'''
import json, statistics, sys, time
t_start = time.time()
import numpy, onnxruntime
t_import = time.time()
from actions import function_module, preprocess
action = function_module(sys.argv[1])
t_action = time.time()
x = preprocess.main({"seed": 1})
a = time.time()
action.main(x)
first = (time.time() - a) * 1000
def median_ms(call, n):
    times = []
    for _ in range(n):
        a = time.time(); call(); times.append((time.time() - a) * 1000)
    return statistics.median(times)
b1 = median_ms(lambda: action.main(x), 10)
action.main_batch([x] * 8)
b8 = median_ms(lambda: action.main_batch([x] * 8), 5)
print(json.dumps({"t_start": t_start, "import_ms": (t_import - t_start) * 1000,
                  "action_import_ms": (t_action - t_import) * 1000, "first_call_ms": first,
                  "warm_ms": {"1": b1, "8": b8}, "providers": onnxruntime.get_available_providers()}))
'''


def fresh_process(code: str, arg: str) -> dict:
    """Run ``code`` in a new interpreter; its JSON line, with the spawn and total times added."""
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    total = (time.time() - t0) * 1000
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]}
    out = json.loads(lines[-1])
    out["interpreter_ms"] = (out.pop("t_start") - t0) * 1000
    out["process_ms"] = total
    return out


def nvml_report() -> dict:
    sys.path.insert(0, str(ROOT))
    from esg import mig
    from invoker_agent.nvml_backend import NvmlBackend

    backend = NvmlBackend()
    try:
        report: dict = {"gpus": [repr(g) for g in backend.gpus()]}
        model = backend.gpus()[0].model
        seen = {n: (p.gi_profile_id, p.compute_slices, p.instance_count)
                for n, p in backend._gi_profiles(0).items()}
        ours = {n: (p.gi_profile_id, p.compute_slices, p.max_count)
                for n, p in mig.geometry(model).profiles.items()} if model else {}
        report["gi_profiles"] = seen
        report["matches_esg_geometry"] = seen == ours
        report["gpu_instances"] = repr(backend.gpu_instances(0))
        return report
    finally:
        backend.close()


def summarise(name: str, runs: list[dict], keys: list[str]) -> str:
    cells = []
    for k in keys:
        values = [r[k] for r in runs if k in r]
        cells.append(" / ".join(f"{v:.0f}" for v in values) if values else "-")
    return f"{name:12s} " + "  ".join(f"{k}={c}" for k, c in zip(keys, cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes per model (default 2)")
    ap.add_argument("--only", choices=["torch", "actions", "nvml"], action="append",
                    help="run only these parts (repeatable; default all)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write every figure to FILE")
    a = ap.parse_args()
    if a.repeats < 1:
        print("bench_gpu_startup: --repeats must be at least 1", file=sys.stderr)
        return 2
    parts = a.only or ["nvml", "torch", "actions"]
    out: dict = {}
    if "nvml" in parts:
        try:
            out["nvml"] = nvml_report()
        except Exception as exc:  # no driver here: say so and go on with the other parts
            out["nvml"] = {"error": f"{type(exc).__name__}: {exc}"}
        print("nvml", json.dumps(out["nvml"]), flush=True)
    if "torch" in parts:
        out["torch"] = {}
        for model in ("resnet50", "densenet121", "inceptionv3", "deeplabv3"):
            runs = out["torch"][model] = [fresh_process(TORCH_CHILD, model) for _ in range(a.repeats)]
            print(summarise(model, runs, ["import_ms", "cuda_context_ms", "load_ms", "first_inference_ms",
                                          "second_load_ms", "second_first_inference_ms"]), flush=True)
    if "actions" in parts:
        out["actions"] = {}
        for fn in ("resnet50", "densenet121", "inceptionv3", "deeplabv3", "midas"):
            runs = out["actions"][fn] = [fresh_process(ACTION_CHILD, fn) for _ in range(a.repeats)]
            print(summarise(fn, runs, ["process_ms", "import_ms", "action_import_ms", "first_call_ms"]),
                  flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
