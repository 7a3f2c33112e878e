"""Whole-GPU profile tables derived from a MIG model's tables, for GPUs run without MIG.

``python -m profiles.whole_tables profiles/tables/a100 profiles/tables/a100-whole`` writes, for each
table of the source directory, a table for the kind ``<MODEL>:whole`` (``esg.mig.whole_kind``): the CPU
configurations as they are, and each configuration on the model's full-GPU MIG instance (``7g.40gb`` on
an A100-40GB: every compute slice) as the same configuration on the whole GPU, with the same latency.
Every other GPU configuration is dropped.

Why that latency: a whole GPU runs what its full MIG instance runs, with a few more SMs (an A100 has
108, its 7g instance 98) and no MIG partitioning, so the 7g latency is an upper bound of the whole GPU's,
close to it for the batch sizes the tables hold. A kept row keeps its ``gpu_memory_mb`` (a worker's GPU
memory on the full instance, at the row's batch) and the table's figure is the largest kept row's: the
CUDA context grows with the SMs, so the whole GPU's is a little larger (about 40 MiB on an A100, under
2 % of a worker's figure), which the figures do not add. The derived tables say so in their ``source`` field;
a table measured on the whole GPU (``esg profile --gpu-model <MODEL>:whole``, ``scripts/device-check``)
replaces them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from esg import mig
from esg.profiles import GPU_MEMORY_FIELD
from esg_files import load_profile


def full_instance(model: str) -> str:
    """The MIG profile of ``model`` that spans the whole GPU (every compute and memory slice)."""
    geo = mig.geometry(model)
    for p in geo.profiles.values():
        if p.compute_slices == geo.compute_slices and p.memory_slices == geo.memory_slices \
                and not p.media_extensions:
            return p.name
    raise ValueError(f"{model} has no MIG profile spanning the whole GPU")


def whole_table(table: dict[str, Any]) -> dict[str, Any]:
    """The whole-GPU table derived from one MIG table (its JSON object)."""
    model = mig.geometry(table["gpu_model"]).model
    full, kind = full_instance(model), mig.whole_kind(model)
    configs = []
    for c in table["configs"]:
        if c.get("gpu") is None:
            configs.append(c)
        elif c["gpu"] == full:
            configs.append({**c, "gpu": kind})
    out = {**table, "gpu_model": kind, "configs": configs}
    rows_mb = [c[GPU_MEMORY_FIELD] for c in configs if c.get("gpu") is not None and GPU_MEMORY_FIELD in c]
    if rows_mb:
        out[GPU_MEMORY_FIELD] = max(rows_mb)
    source: dict[str, Any] = {
        "status": "derived",
        "whole_gpu": f"the {full} configurations of the {model} table, as the whole GPU "
                     f"(its full MIG instance; an upper bound of the whole GPU's latency)"}
    if GPU_MEMORY_FIELD in out:
        source["gpu_memory"] = (f"the {full} configurations' figures, the table's the largest of them: a worker "
                                f"on the full MIG instance; the whole GPU's few more SMs add a little CUDA "
                                f"context (about 40 MiB on an A100), not added")
    out["source"] = {**source, "from": table.get("source"), "see": "profiles/whole_tables.py"}
    return out


def derive(source: Path, out: Path) -> list[Path]:
    """Write the whole-GPU table of every ``*.json`` table in ``source`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(source.glob("*.json")):
        load_profile(path)                      # a malformed source table stops here, by name
        table = whole_table(json.loads(path.read_text()))
        target = out / path.name
        target.write_text(json.dumps(table, indent=1) + "\n")
        load_profile(target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m profiles.whole_tables SOURCE_DIR OUT_DIR", file=sys.stderr)
        return 2
    for path in derive(Path(args[0]), Path(args[1])):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
