"""Regenerate the shipped A100-40GB profile tables from public measurement data.

Run from the repository root: ``python profiles/build_a100_tables.py [--data ../shared/data]``.
It reads ParvaGPU's per-MIG-slice latency tables (A100-80GB) and MISO's A100-40GB per-slice ratios,
derives every function's table as documented in ``profiles/tables/a100/SOURCES.md`` and writes
``profiles/tables/a100/<function>.json``. The generated JSON files are committed: the project never
needs the data directory at run time; this script documents and reproduces the derivation.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

SLICES = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}
"""A100-40GB MIG profile -> ParvaGPU's `Mig instance` (GPCs). Same SM count per g on 40GB and 80GB."""
GPU_BATCHES = (1, 2, 4, 8, 16, 32)
GPU_VCPUS = (1, 2, 4)
CPU_BATCHES = (1, 2, 4, 8, 16, 32)
CPU_VCPUS = (1, 2, 4, 8, 16)

A100_80_TO_40 = 1.0
"""Latency factor from an A100-80GB slice to the A100-40GB slice with the same g: same GA100 die, same
14 SMs per g and the same 1410 MHz boost clock; only HBM bandwidth differs (1555 vs 2039 GB/s). ParvaGPU
batches ≤ 32 on these CNNs are compute/launch bound, so the factor is 1.0 (see SOURCES.md)."""

# Multiply-accumulates per image (torchvision's model tables, "GFLOPS" column, which counts MACs).
GMACS = {"resnet50": 4.09, "resnet152": 11.51, "densenet121": 2.83, "inceptionv3": 5.71}
DERIVED_GPU = {
    # function: (reference ParvaGPU model, GMACs per image, what it is)
    "deeplabv3": ("resnet50", 178.72 * (224 / 520) ** 2,
                  "torchvision deeplabv3_resnet50 (178.72 GMACs at 520x520), run at 224x224"),
    "midas": ("resnet152", 16.41 * (384 / 224) ** 2,
              "MiDaS v2.1 (ResNeXt-101 32x8d encoder, 16.41 GMACs at 224x224) run at 384x384; "
              "encoder only, so a lower bound"),
}
MEASURED_GPU = ("resnet50", "densenet121", "inceptionv3")

CPU_GFLOPS_PER_VCPU = 50.0
"""Effective fp32 GFLOP/s of one vCPU on conv nets (oneDNN, AVX-512 Xeon); 2 FLOPs per MAC."""
AMDAHL_SERIAL = 0.1
"""Serial fraction of intra-op parallel DNN inference on CPU: speedup(v) = v / (1 + s (v - 1))."""
HOST_MS_PER_IMAGE = 0.25
"""Host-side time per image of a GPU batch on one vCPU (collate, launch) beside the ParvaGPU latency."""

CPU_STAGES = {
    # function: (fixed ms per batch, ms per image on one vCPU, serial fraction, output bytes/request,
    #            cold start ms, what it does)
    "preprocess": (1.0, 6.0, 0.05, 3 * 224 * 224 * 4, 600,
                   "decode a ~100 KB JPEG, resize to 224x224, normalise to a float32 tensor"),
    "depth-post": (1.0, 8.0, 0.05, 120_000, 500, "normalise a 384x384 depth map, colour-map, PNG-encode"),
    "composite": (1.0, 7.0, 0.05, 150_000, 500, "apply the mask as alpha and PNG-encode the cut-out"),
    "vote": (0.5, 0.2, 0.5, 200, 300, "majority vote over three top-5 label lists"),
}
DNN_EXTRA = {
    # function: (output bytes per request, cold start ms: container + weights to the slice)
    "resnet50": (4_000, 2500), "densenet121": (4_000, 2500), "inceptionv3": (4_000, 2800),
    "deeplabv3": (224 * 224, 3000), "midas": (384 * 384 * 4, 3500),
}


def read_parvagpu(data: Path, model: str) -> dict[int, dict[int, float]]:
    """{g: {batch: ms}} for one exclusive process per slice (Workload Number 1); 0 rows are skipped."""
    out: dict[int, dict[int, float]] = {}
    with open(data / "parvagpu" / "prof_data" / f"{model}.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if int(row["Workload Number"]) != 1 or float(row["Latency"]) <= 0:
                continue
            out.setdefault(int(row["Mig instance"]), {})[int(row["Batch size"])] = float(row["Latency"]) * 1e3
    return out


def at_batch(table: dict[int, float], x: float) -> float:
    """Latency at a (fractional) batch: linear between measured batches, per-image constant beyond."""
    bs = sorted(table)
    if x <= bs[0]:
        return table[bs[0]]
    for lo, hi in zip(bs, bs[1:]):
        if x <= hi:
            return table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo)
    return table[bs[-1]] * x / bs[-1]


def speedup(v: int, serial: float) -> float:
    return v / (1 + serial * (v - 1))


def gpu_configs(ref: dict[int, dict[int, float]], ratio: float) -> list[dict]:
    rows = []
    for prof, g in SLICES.items():
        for b in GPU_BATCHES:
            gpu_ms = at_batch(ref[g], b * ratio) * A100_80_TO_40
            for v in GPU_VCPUS:
                host = HOST_MS_PER_IMAGE * b / speedup(min(v, b), 0.05)
                rows.append({"batch": b, "vcpus": v, "gpu": prof, "latency_ms": round(gpu_ms + host, 3)})
    return rows


def cpu_dnn_configs(gmacs: float) -> list[dict]:
    per_image = 2 * gmacs / CPU_GFLOPS_PER_VCPU * 1e3
    rows = []
    for b in CPU_BATCHES:
        eff = 0.85 + 0.15 / b  # larger batches use the vector units a little better
        for v in CPU_VCPUS:
            rows.append({"batch": b, "vcpus": v, "gpu": None,
                         "latency_ms": round(per_image * b * eff / speedup(v, AMDAHL_SERIAL), 3)})
    return rows


def cpu_stage_configs(fixed: float, per_image: float, serial: float) -> list[dict]:
    return [{"batch": b, "vcpus": v, "gpu": None,
             "latency_ms": round(fixed + per_image * b / speedup(min(v, b), serial), 3)}
            for b in CPU_BATCHES for v in CPU_VCPUS]


def build(data: Path) -> dict[str, dict]:
    tables: dict[str, dict] = {}
    refs = {m: read_parvagpu(data, m) for m in ("resnet50", "resnet152", "densenet121", "inceptionv3")}
    for f in MEASURED_GPU:
        out_b, cold = DNN_EXTRA[f]
        tables[f] = _table(f, gpu_configs(refs[f], 1.0) + cpu_dnn_configs(GMACS[f]), cold, out_b, {
            "gpu": f"measured: ParvaGPU prof_data/{f}.csv (A100-80GB, Workload Number 1), x{A100_80_TO_40} "
                   f"to A100-40GB, + host {HOST_MS_PER_IMAGE} ms/image/vCPU (derived)",
            "cpu": f"derived: {GMACS[f]} GMACs x 2 / {CPU_GFLOPS_PER_VCPU} GFLOP/s per vCPU, "
                   f"Amdahl serial fraction {AMDAHL_SERIAL}"})
    for f, (ref, gmacs, what) in DERIVED_GPU.items():
        ratio = gmacs / GMACS[ref]
        out_b, cold = DNN_EXTRA[f]
        tables[f] = _table(f, gpu_configs(refs[ref], ratio) + cpu_dnn_configs(gmacs), cold, out_b, {
            "model": what,
            "gpu": f"derived: ParvaGPU prof_data/{ref}.csv at equivalent batch b x {ratio:.3f} "
                   f"(GMACs ratio {gmacs:.2f}/{GMACS[ref]}), + host time",
            "cpu": f"derived: {gmacs:.2f} GMACs x 2 / {CPU_GFLOPS_PER_VCPU} GFLOP/s per vCPU"})
    for f, (fixed, per_image, serial, out_b, cold, what) in CPU_STAGES.items():
        tables[f] = _table(f, cpu_stage_configs(fixed, per_image, serial), cold, out_b, {
            "model": what,
            "cpu": f"derived: {fixed} ms + {per_image} ms/image / speedup(min(vcpus, batch)), "
                   f"serial fraction {serial}"})
    return tables


def _table(f: str, configs: list[dict], cold: float, out_bytes: int, source: dict) -> dict:
    return {"function": f, "gpu_model": "A100-40GB", "configs": configs, "cold_start_ms": cold,
            "output_bytes": out_bytes, "source": {"status": "derived" if "derived" in str(source) else
                                                  "measured", **source, "see": "SOURCES.md"}}


def miso_crosscheck(data: Path) -> dict[str, float]:
    """MISO's A100-40GB ResNet50 training step time per slice, relative to 7g (largest batch)."""
    rows = list(csv.DictReader(open(data / "miso" / "miso_a100_40gb_mig_train_iter_time_summary.csv")))
    rows = [r for r in rows if r["model"] == "resnet"]
    top = max(int(r["train_batch_size"]) for r in rows)
    t = {r["mig_slice"]: float(r["median_iter_s"]) for r in rows if int(r["train_batch_size"]) == top}
    return {k: round(v / t["7g.40gb"], 2) for k, v in t.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None,
                    help="the public measurement data directory (default: ../shared/data or ../../shared/data)")
    ap.add_argument("--out", default="profiles/tables/a100")
    args = ap.parse_args()
    data = Path(args.data) if args.data else next(
        (p for p in (Path("../shared/data"), Path("../../shared/data")) if p.is_dir()), Path("../shared/data"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for f, table in build(data).items():
        (out / f"{f}.json").write_text(json.dumps(table, indent=1) + "\n")
    r50 = read_parvagpu(data, "resnet50")
    parva = {p: round(r50[g][32] / r50[7][32], 2) for p, g in SLICES.items()}
    print("resnet50 batch-32 latency relative to 7g: ParvaGPU", parva, "MISO (training)", miso_crosscheck(data))
    assert all(math.isfinite(c["latency_ms"]) for t in build(data).values() for c in t["configs"])


if __name__ == "__main__":
    main()
