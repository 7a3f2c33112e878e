"""The checks ``scripts/device-check`` runs in Python, each read-only on the GPU (``python -m esg_cli.device_check``).

    gpu [--fake-gpu MODEL]   which GPU the check measures: NVML's first GPU, its driver, its MIG mode.
                             Prints shell assignments (DC_MODEL, DC_KIND, DC_TABLES, DC_GPU, DC_DRIVER);
                             exit 3 without a GPU, 4 when its MIG mode is on or pending (the check measures
                             the whole GPU and never changes MIG mode: an operator turns it off).
    cuda                     onnxruntime's CUDA provider runs a tiny model on the GPU here (exit 5 with one
                             line naming what is missing otherwise), and the versions of what ran it.

NVML is opened read-only (:class:`invoker_agent.nvml_backend.ReadOnlyNvml`): every call that could change
the GPU is refused before the driver sees it.
"""

from __future__ import annotations

import argparse
import shlex
import sys

NO_GPU, MIG_ON, NO_CUDA = 3, 4, 5


def gpu_step(fake_gpu: str | None) -> int:
    from esg import mig
    from invoker_agent.mig_backend import MigOperationError
    from invoker_agent.nvml_backend import NvmlBackend, ReadOnlyNvml, open_backend
    from invoker_agent.whole_gpu import model_for
    from profiles.host import driver_version

    try:
        if fake_gpu:
            backend = open_backend(fake_gpu, fake_mig=False)
        else:
            import pynvml
            backend = NvmlBackend(ReadOnlyNvml(pynvml))
        gpus = backend.gpus()
    except (MigOperationError, ImportError) as exc:
        print(f"device-check: no usable NVIDIA GPU here: {exc}", file=sys.stderr)
        return NO_GPU
    if not gpus:
        print("device-check: NVML reports no GPU", file=sys.stderr)
        return NO_GPU
    g = gpus[0]
    if g.mig_enabled or g.mig_pending:
        state = "on" if g.mig_enabled else "pending (on after the next GPU reset)"
        print(f"device-check: GPU {g.index} ({g.name}) has MIG mode {state}. This check measures the whole "
              f"GPU and never changes MIG mode, never creates or destroys MIG instances, never resets the "
              f"GPU: turn MIG off yourself when the GPU is idle (nvidia-smi -i {g.index} -mig 0, then a GPU "
              f"reset), or run the check on a GPU without MIG", file=sys.stderr)
        return MIG_ON
    model = model_for(g.name)
    kind = mig.whole_kind(model)
    values = {"DC_GPU": f"{g.index}: {g.name} ({g.uuid})", "DC_MODEL": model, "DC_KIND": kind,
              "DC_TABLES": f"profiles/tables/{model.lower()}-whole", "DC_DRIVER": driver_version(backend) or "unknown"}
    for key, value in values.items():
        print(f"{key}={shlex.quote(value)}")
    return 0


def cuda_step() -> int:
    from invoker_agent.cuda_check import missing_cuda_package
    from profiles.host import library_versions

    problem = missing_cuda_package()
    if problem is not None:
        print(f"device-check: {problem}", file=sys.stderr)
        return NO_CUDA
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        preload()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    active = session.get_providers()
    out = session.run(None, {"x": np.arange(4, dtype=np.float32)})[0]
    if active[:1] != ["CUDAExecutionProvider"] or out.tolist() != [0.0, 2.0, 4.0, 6.0]:
        print(f"device-check: onnxruntime offers the CUDA provider but a session ran on {active}: the CUDA "
              f"or cuDNN libraries did not load (see onnxruntime's warnings above)", file=sys.stderr)
        return NO_CUDA
    print("CUDA execution provider: a session ran on the GPU")
    for name, version in library_versions().items():
        print(f"  {name}: {version}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m esg_cli.device_check", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    g = sub.add_parser("gpu")
    g.add_argument("--fake-gpu", metavar="MODEL", help="the fake NVML with MIG off (a rehearsal without a GPU)")
    sub.add_parser("cuda")
    args = p.parse_args(argv)
    return gpu_step(args.fake_gpu) if args.step == "gpu" else cuda_step()


if __name__ == "__main__":
    sys.exit(main())
