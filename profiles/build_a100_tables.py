"""Regenerate the shipped A100-40GB profile tables from public measurement data.

Run from the repository root: ``python profiles/build_a100_tables.py [--data ../shared/data]``.
It reads ParvaGPU's per-MIG-slice latency tables (A100-80GB), MISO's A100-40GB per-slice ratios and
MIGProfiler's framebuffer measurements (A100-80GB and A100-40GB), derives every function's table as
documented in ``profiles/tables/a100/SOURCES.md`` and writes
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


# --- GPU memory of one warm worker (the tables' gpu_memory_mb) -------------------------------------------
MIB = 1 << 20
REFERENCE = "resnet50"
PROFILE_80 = {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 7: "7g.80gb"}
"""The A100-80GB MIG profile with g compute slices, the one MIGProfiler and ParvaGPU name: an A100-40GB
profile (``SLICES``) maps to the one with the same g, as its latencies do."""
REFERENCE_FOOTPRINT_MIB = {
    "1g.10gb": {1: 1447.77, 2: 1448.016, 4: 1471.443, 8: 1533.426, 16: 1649.426, 32: 1968.0},
    "2g.20gb": {1: 1513.262, 2: 1512.918, 4: 1533.115, 8: 1593.148, 16: 1710.902, 32: 2030.0},
    "3g.40gb": {1: 1576.607, 2: 1572.885, 4: 1597.082, 8: 1659.016, 16: 1773.967, 32: 2092.754},
    "7g.80gb": {1: 1805.852, 2: 1806.918, 4: 1825.246, 8: 1888.295, 16: 2002.246, 32: 2317.656},
}
"""MIGProfiler's ``fb_used_mean`` (MiB) for one PyTorch FP32 resnet50 inference process alone on a MIG
instance of an A100-80GB, per MIG profile and at each of the tables' GPU batches. It grows with the
instance's SMs (the CUDA context), not its memory: 1448 / 1513 / 1577 / 1806 MiB at batch 1 on 1g / 2g /
3g / 7g; its growth with the batch is the same on every profile (512-520 MiB from batch 1 to 32).
``main`` checks these constants against the data."""
INTERPOLATED = {"4g.40gb": ("3g.40gb", "7g.80gb")}
"""A profile MIGProfiler did not measure -> the measured profiles it lies between: its figures are
linear in the compute slices between theirs."""
GROWTH_PROFILE = "7g.80gb"
"""Where the reference's growth per image is taken (batch 1 to 32): the same within 8 MiB on every profile."""
PARAMS = {
    # torchvision's published parameter counts (each weights enum's num_params); MiDaS v2.1 counted from
    # its code: torchvision resnext101_32x8d (88,791,336) less its fc (2,049,000) + its decoder (18,620,609)
    "resnet50": 25_557_032, "densenet121": 7_978_856, "inceptionv3": 27_161_264,
    "deeplabv3": 42_004_074, "midas": 105_362_945,
}
PEAK_ACTIVATIONS = {
    # function: (activation elements per image alive at once at the peak of an eager PyTorch FP32 forward
    #            pass, input included; conv and batch-norm outputs are separate tensors, ReLU in place),
    #            where the peak is
    "resnet50": (150_528 + 832 * 56 * 56,
                 "layer1 block 1 at 56x56: input 64 ch + bn3 out 256 + downsample conv and bn out 2 x 256"),
    "densenet121": (150_528 + 800 * 56 * 56,
                    "dense block 1, layer 6 at 56x56: features 224 ch + concat 224 + norm1 224 + conv1 128"),
    "inceptionv3": (150_528 + 160 * 109 * 109,
                    "Conv2d_2b at 109x109 (224x224 input): input 32 ch + conv out 64 + bn out 64"),
    "deeplabv3": (150_528 + 7168 * 28 * 28,
                  "layer4 block 1 at 28x28 (output stride 8): input 1024 ch + bn3 out 2048 + downsample "
                  "conv and bn out 2 x 2048"),
    "midas": (442_368 + 20_090_880 + 23_592_960,
              "output head at 384x384: forward's locals (encoder layers 1-4, their 256-ch projections, "
              "paths 4-1: 20,090,880) + the 2x upsampling's input 128x192x192 and output 128x384x384"),
}


def compute_slices(profile: str) -> int:
    """The g of a MIG profile name (``3g.20gb`` -> 3)."""
    return int(profile.split("g.", 1)[0])


def profile_80(profile: str) -> str:
    """The A100-80GB profile with the same g as ``profile`` (an A100-40GB or A100-80GB name)."""
    return PROFILE_80[compute_slices(profile)]


def _between(profile: str, at: dict[str, float]) -> float:
    """A figure of an interpolated profile: linear in the compute slices between its two measured ones."""
    lo, hi = INTERPOLATED[profile]
    t = (compute_slices(profile) - compute_slices(lo)) / (compute_slices(hi) - compute_slices(lo))
    return at[lo] + (at[hi] - at[lo]) * t


def reference_mib(profile: str, batch: int) -> float:
    """The reference's measured footprint on ``profile`` (either GPU's name) after batches up to ``batch``
    (one of the tables' GPU batches): the largest measurement at batches <= ``batch`` (the caching
    allocator keeps its peak; at batch 2 two profiles measure 0.3 and 3.7 MiB below batch 1, within the
    measurements' spread); on an interpolated profile, linear between its measured neighbours."""
    p = profile_80(profile)
    if p in INTERPOLATED:
        return _between(p, {q: reference_mib(q, batch) for q in INTERPOLATED[p]})
    return max(mib for b, mib in REFERENCE_FOOTPRINT_MIB[p].items() if b <= batch)


def weights_mib(f: str) -> float:
    return PARAMS[f] * 4 / MIB


def fixed_mib(profile: str) -> float:
    """The fixed part of a worker's footprint on ``profile`` (CUDA context, library workspaces, allocator):
    the reference's batch-1 footprint there less its FP32 weights."""
    return reference_mib(profile, 1) - weights_mib(REFERENCE)


def footprint_mib(f: str, batch: int, profile: str) -> float:
    """One warm worker's GPU memory (MiB) on ``profile`` after batches up to ``batch``: the profile's fixed
    part, ``f``'s FP32 weights, and the reference's growth per image beyond the first scaled by the
    activation ratio."""
    return fixed_mib(profile) + weights_mib(f) + (batch - 1) * per_image_mib() * activation_ratio(f)


def per_image_mib() -> float:
    ref = REFERENCE_FOOTPRINT_MIB[GROWTH_PROFILE]
    return (ref[32] - ref[1]) / (32 - 1)


def activation_ratio(f: str) -> float:
    return PEAK_ACTIVATIONS[f][0] / PEAK_ACTIVATIONS[REFERENCE][0]


def row_gpu_memory_mb(f: str, profile: str, batch: int) -> int:
    """A GPU row's ``gpu_memory_mb``: the worker's footprint on the row's MIG profile when it runs the row's
    batch, rounded up -- for the reference its measurement there (``reference_mib``), else the model."""
    if f == REFERENCE:
        return math.ceil(round(reference_mib(profile, batch), 6))
    return math.ceil(round(footprint_mib(f, batch, profile), 6))


def gpu_memory_mb(f: str) -> int:
    """The table's ``gpu_memory_mb``: the largest row figure (7g.40gb's at the table's largest GPU batch)."""
    return max(row_gpu_memory_mb(f, p, b) for p in SLICES for b in GPU_BATCHES)


def gpu_memory_source(f: str) -> str:
    b = max(GPU_BATCHES)
    top = max(SLICES, key=compute_slices)
    interp = "; ".join(f"{compute_slices(p)}g, which MIGProfiler did not measure, linear in compute slices between "
                       f"{compute_slices(lo)}g and {compute_slices(hi)}g" for p, (lo, hi) in INTERPOLATED.items())
    if f == REFERENCE:
        return (f"measured: MIGProfiler A100-80GB {REFERENCE} fb_used_mean on each row's MIG profile (the "
                f"A100-80GB one with the same g), the largest at batches <= the row's, rounded up ({interp}); "
                f"the table's: {top} at batch {b}, {reference_mib(top, b)} MiB")
    fixed = ", ".join(f"{p} {fixed_mib(p):.1f}" for p in SLICES)
    return (f"derived: {REFERENCE}'s fixed part on the row's MIG profile (its batch-1 fb_used_mean there less "
            f"its FP32 weights; {interp}), MiB: {fixed}; + FP32 weights {weights_mib(f):.1f} MiB "
            f"({PARAMS[f]:,} params) + (b - 1) x {per_image_mib():.2f} MiB/image x activation ratio "
            f"{activation_ratio(f):.3f} at each row's batch b, rounded up; the table's: {top} at b = {b}")


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


def gpu_configs(f: str, ref: dict[int, dict[int, float]], ratio: float) -> list[dict]:
    """``f``'s GPU rows, each with the worker's GPU memory at the row's batch (``row_gpu_memory_mb``)."""
    rows = []
    for prof, g in SLICES.items():
        for b in GPU_BATCHES:
            gpu_ms = at_batch(ref[g], b * ratio) * A100_80_TO_40
            for v in GPU_VCPUS:
                host = HOST_MS_PER_IMAGE * b / speedup(min(v, b), 0.05)
                rows.append({"batch": b, "vcpus": v, "gpu": prof, "latency_ms": round(gpu_ms + host, 3),
                             "gpu_memory_mb": row_gpu_memory_mb(f, prof, b)})
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
        tables[f] = _table(f, gpu_configs(f, refs[f], 1.0) + cpu_dnn_configs(GMACS[f]), cold, out_b, {
            "gpu": f"measured: ParvaGPU prof_data/{f}.csv (A100-80GB, Workload Number 1), x{A100_80_TO_40} "
                   f"to A100-40GB, + host {HOST_MS_PER_IMAGE} ms/image/vCPU (derived)",
            "cpu": f"derived: {GMACS[f]} GMACs x 2 / {CPU_GFLOPS_PER_VCPU} GFLOP/s per vCPU, "
                   f"Amdahl serial fraction {AMDAHL_SERIAL}",
            "gpu_memory": gpu_memory_source(f)}, gpu_memory_mb(f))
    for f, (ref, gmacs, what) in DERIVED_GPU.items():
        ratio = gmacs / GMACS[ref]
        out_b, cold = DNN_EXTRA[f]
        tables[f] = _table(f, gpu_configs(f, refs[ref], ratio) + cpu_dnn_configs(gmacs), cold, out_b, {
            "model": what,
            "gpu": f"derived: ParvaGPU prof_data/{ref}.csv at equivalent batch b x {ratio:.3f} "
                   f"(GMACs ratio {gmacs:.2f}/{GMACS[ref]}), + host time",
            "cpu": f"derived: {gmacs:.2f} GMACs x 2 / {CPU_GFLOPS_PER_VCPU} GFLOP/s per vCPU",
            "gpu_memory": gpu_memory_source(f)}, gpu_memory_mb(f))
    for f, (fixed, per_image, serial, out_b, cold, what) in CPU_STAGES.items():
        tables[f] = _table(f, cpu_stage_configs(fixed, per_image, serial), cold, out_b, {
            "model": what,
            "cpu": f"derived: {fixed} ms + {per_image} ms/image / speedup(min(vcpus, batch)), "
                   f"serial fraction {serial}"})
    return tables


def _table(f: str, configs: list[dict], cold: float, out_bytes: int, source: dict,
           gpu_memory: int | None = None) -> dict:
    """One table; ``gpu_memory`` (MiB) only for a function with GPU configurations."""
    table = {"function": f, "gpu_model": "A100-40GB", "configs": configs, "cold_start_ms": cold,
             "output_bytes": out_bytes}
    if gpu_memory is not None:
        table["gpu_memory_mb"] = gpu_memory
    table["source"] = {"status": "derived" if "derived" in str(source) else "measured", **source,
                       "see": "SOURCES.md"}
    return table


def read_fb_used(data: Path) -> dict[str, dict[int, float]]:
    """MIGProfiler's A100-80GB CV results: {MIG profile: {batch: fb_used_mean MiB}} of the reference."""
    out: dict[str, dict[int, float]] = {}
    with open(data / "migprofiler" / "A100-80g" / "cv_infer_integrated_result.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["model_name"] == REFERENCE:
                out.setdefault(row["mig_profile"], {})[int(row["batch_size"])] = float(row["fb_used_mean"])
    return out


def memory_checks(data: Path) -> list[str]:
    """Check the footprint constants and model against the public data; one line per check, for ``main``."""
    fb = read_fb_used(data)
    for p, measured in REFERENCE_FOOTPRINT_MIB.items():
        assert all(fb[p][b] == mib for b, mib in measured.items()), (p, fb[p])
    assert set(GPU_BATCHES) <= set(REFERENCE_FOOTPRINT_MIB[GROWTH_PROFILE])
    assert set(PROFILE_80.values()) == set(REFERENCE_FOOTPRINT_MIB) | set(INTERPOLATED) and set(fb) == set(
        REFERENCE_FOOTPRINT_MIB)
    order = sorted(PROFILE_80.values(), key=compute_slices)
    lines = [f"{REFERENCE} fb_used at batch 1 per MIG profile (A100-80GB): "
             + ", ".join(f"{p} {fb[p][1]:.0f}" for p in sorted(fb, key=compute_slices)),
             "fixed part per MIG profile (MiB; 4g interpolated): "
             + ", ".join(f"{p} {fixed_mib(p):.1f}" for p in order),
             f"{REFERENCE} growth from batch 1 to 32 per MIG profile (MiB): "
             + ", ".join(f"{p} {fb[p][32] - fb[p][1]:.0f}" for p in sorted(fb, key=compute_slices))]
    assert max(fb[p][32] - fb[p][1] for p in fb) - min(fb[p][32] - fb[p][1] for p in fb) < 10
    err = {p: max(abs(footprint_mib(REFERENCE, b, p) / fb[p][b] - 1) for b in fb[p]) for p in fb}
    lines.append(f"{REFERENCE}, linear model vs measured per profile, largest error at batches 1-256: "
                 + ", ".join(f"{p} {100 * e:.1f} %" for p, e in err.items()))
    assert all(e < 0.03 for e in err.values()), err
    steps = []
    for f in sorted((data / "migprofiler" / "A100-40g" / "infer_bsz").glob("*_bsz.csv")):
        rows = {(r["instance_memory"], r["batch_size"]): float(r["fb_used_mean"]) for r in csv.DictReader(open(f))}
        steps.append(f"{f.name.removesuffix('_bsz.csv')} "
                     + "/".join(f"{rows[(m, '1')] - rows[('5', '1')]:.0f}" for m in ("10", "20", "40")))
    lines.append(f"over 1g at batch 1, 2g/3g/7g: {REFERENCE} (A100-80GB) "
                 + "/".join(f"{fb[p][1] - fb['1g.10gb'][1]:.0f}" for p in ("2g.20gb", "3g.40gb", "7g.80gb"))
                 + "; NLP models (A100-40GB) " + ", ".join(steps))
    lines += parvagpu_checks(data)
    return lines


def parvagpu_checks(data: Path) -> list[str]:
    """ParvaGPU's co-located processes (A100-80GB, 1-5 per MIG instance) against the footprints on their
    instance. Where a count ran, the footprints must say it fits (asserted). Where the next count is
    ``0,0`` (not run, or out of memory), the lines say where the footprints would fit it: ParvaGPU's
    processes run the forward pass with autograd on, so they hold more per image than a worker."""
    mem_80 = {1: 10240, 2: 20480, 3: 40960, 4: 40960, 7: 81920}   # A100-80GB 1g.10gb ... 7g.80gb, MiB
    worst: tuple[float, str] = (0.0, "")
    fits_unrun: list[tuple[int, float, str]] = []
    first_unrun: dict[str, int] = {}
    unrun = 0
    for f in MEASURED_GPU:
        ran: dict[tuple[int, int, int], bool] = {}
        with open(data / "parvagpu" / "prof_data" / f"{f}.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                key = int(row["Mig instance"]), int(row["Batch size"]), int(row["Workload Number"])
                ran[key] = float(row["Latency"]) > 0
        for (g, b, n), ok in sorted(ran.items()):
            p = PROFILE_80[g]
            share = n * footprint_mib(f, b, p) / mem_80[g]
            what = f"{n} x {f} at batch {b} on {p}"
            if ok:
                worst = max(worst, (share, what))
            elif n == 1 or ran[(g, b, n - 1)]:
                first_unrun[p] = min(first_unrun.get(p, 1 << 30), b)
                unrun += 1
                if share <= 1.0:
                    fits_unrun.append((b, share, what))
    assert worst[0] <= 1.0, worst
    assert min(first_unrun.values()) > 8, first_unrun    # batches <= 8: every count ran, on every profile
    small = sorted((t for t in fits_unrun if t[0] <= max(GPU_BATCHES)), key=lambda t: -t[1])
    return [f"ParvaGPU counts that ran: footprints x count, largest share of the instance {worst[0]:.2f} ({worst[1]})",
            "ParvaGPU's first count not run (0,0) at a model, instance and batch, smallest batch per profile: "
            + ", ".join(f"{p} {b}" for p, b in sorted(first_unrun.items(), key=lambda t: compute_slices(t[0])))
            + f"; the footprints fit {len(fits_unrun)} of those {unrun}, at the tables' batches (<= {max(GPU_BATCHES)}) "
            + (", ".join(f"{w} ({s:.2f})" for _, s, w in small) or "none")]


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
    for line in memory_checks(data):
        print(line)
    for p in SLICES:
        print(f"gpu_memory_mb on {p} at batch", GPU_BATCHES, {f: [row_gpu_memory_mb(f, p, b) for b in GPU_BATCHES]
                                                             for f in PARAMS})
    assert all(math.isfinite(c["latency_ms"]) for t in build(data).values() for c in t["configs"])


if __name__ == "__main__":
    main()
