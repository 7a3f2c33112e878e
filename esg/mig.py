"""MIG geometry: the GPU instance profiles of each supported GPU model and the placement rules.

Facts come from NVIDIA's MIG user guide (``nvidia-smi mig -lgip`` / ``-lgipp`` tables). A placement is a
(start, size) range of *memory slices*; a set of instances is valid when every instance can be given one
of its profile's placements with no two ranges overlapping, no profile above its maximum count, and at
most one media-extension (+me) instance per GPU. Valid layouts are derived from these rules, never listed
by hand.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Final

from esg.errors import MigError


@dataclass(frozen=True)
class MigProfile:
    """A GPU instance profile: its name, NVML profile id, size and where it may start."""

    name: str
    gi_profile_id: int
    compute_slices: int
    memory_slices: int
    max_count: int
    starts: tuple[int, ...]
    memory_mb: int
    media_extensions: bool = False

    def placements(self) -> tuple[tuple[int, int], ...]:
        return tuple((s, self.memory_slices) for s in self.starts)


@dataclass(frozen=True)
class GpuGeometry:
    model: str
    memory_slices: int
    compute_slices: int
    profiles: Mapping[str, MigProfile]
    slice_price: float | None = None
    """The price of one compute slice per millisecond, in the cost model's units (a vCPU costs 1.0;
    :mod:`esg.cost`); None: no public list price to derive it from (:func:`slice_price` says what then)."""

    def profile(self, name: str) -> MigProfile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(self.profiles)
            raise MigError(f"MIG profile {name!r} is unknown to {self.model} (known: {known})") from None


def _geometry(model: str, mem: int, compute: int, rows: Iterable[tuple],
              slice_price: float | None = None) -> GpuGeometry:
    profiles = {}
    for name, gid, c, m, mx, starts, mb in rows:
        profiles[name] = MigProfile(name, gid, c, m, mx, tuple(starts), mb, name.endswith("+me"))
    return GpuGeometry(model, mem, compute, profiles, slice_price)


def _ampere_hopper(model: str, names: tuple[str, ...], gb: tuple[int, ...],
                   slice_price: float | None = None) -> GpuGeometry:
    """A100/H100/H200 share ids, sizes, maxima and placements; only names, memory and price differ."""
    one, one_me, one_double, two, three, four, seven = names
    g1, g1d, g2, g3, g4, g7 = gb
    return _geometry(model, 8, 7, [
        (one, 19, 1, 1, 7, range(7), g1 * 1024),
        (one_me, 20, 1, 1, 1, range(7), g1 * 1024),
        (one_double, 15, 1, 2, 4, (0, 2, 4, 6), g1d * 1024),
        (two, 14, 2, 2, 3, (0, 2, 4), g2 * 1024),
        (three, 9, 3, 4, 2, (0, 4), g3 * 1024),
        (four, 5, 4, 4, 1, (0,), g4 * 1024),
        (seven, 0, 7, 8, 1, (0,), g7 * 1024),
    ], slice_price)


# Slice prices, in vCPUs (the cost model's unit: a vCPU costs 1.0).
#
# Source: Amazon EC2 On-Demand Pricing, Linux, US East (N. Virginia), the hourly prices as listed in 2024,
# when these figures were taken. They have not been checked against the list since (list prices change:
# re-derive them from the current list before reading cost differences between GPU models as today's).
#
# Derivation, per 8-GPU instance: its price less its vCPUs at a CPU-only instance's price per vCPU
# (c6i.24xlarge: 96 vCPUs for $4.08/h, $0.0425 per vCPU-hour), divided by 8 GPUs and by 7 compute slices
# per GPU, then by $0.0425 to express it in vCPUs. Assumptions: a GPU instance's vCPUs cost what a CPU-only
# instance's do; everything else it includes (GPU memory, host memory, NVLink, network, local disk) is
# counted with the GPUs; a GPU's price is shared evenly by its compute slices (a MIG profile costs its
# compute slices, whatever its memory).
#   A100-40GB  p4d.24xlarge  (96 vCPUs)  $32.77/h: ($32.77 - $4.08) / 8 / 7 = $0.512/h = 12.1 vCPUs
#   A100-80GB  p4de.24xlarge (96 vCPUs)  $40.97/h: ($40.97 - $4.08) / 8 / 7 = $0.659/h = 15.5 vCPUs
#   H100-80GB  p5.48xlarge   (192 vCPUs) $98.32/h: ($98.32 - $8.16) / 8 / 7 = $1.610/h = 37.9 vCPUs
# H200 and A30 had no on-demand list price there in 2024: they carry none (:func:`slice_price`).
GEOMETRIES: Final[dict[str, GpuGeometry]] = {
    "A100-40GB": _ampere_hopper(
        "A100-40GB",
        ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        (5, 10, 10, 20, 20, 40), slice_price=12.1),
    "A100-80GB": _ampere_hopper(
        "A100-80GB",
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        (10, 20, 20, 40, 40, 80), slice_price=15.5),
    "H100-80GB": _ampere_hopper(
        "H100-80GB",
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        (10, 20, 20, 40, 40, 80), slice_price=37.9),
    "H200": _ampere_hopper(
        "H200",
        ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
        (18, 35, 35, 71, 71, 141)),
    "A30": _geometry("A30", 4, 4, [
        ("1g.6gb", 14, 1, 1, 4, range(4), 6 * 1024),
        ("1g.6gb+me", 21, 1, 1, 1, range(4), 6 * 1024),
        ("2g.12gb", 5, 2, 2, 2, (0, 2), 12 * 1024),
        ("2g.12gb+me", 6, 2, 2, 1, (0, 2), 12 * 1024),
        ("4g.24gb", 0, 4, 4, 1, (0,), 24 * 1024),
    ]),
}

#: The GPU model assumed wherever none is given: the ESG paper's testbed GPU and the model of the shipped
#: profile tables (``profiles/tables/a100``).
DEFAULT_GPU_MODEL: Final = "A100-40GB"

ALIASES: Final = {"A100": "A100-40GB", "H100": "H100-80GB", "H200-141GB": "H200", "A30-24GB": "A30"}


_KNOWN: Final[dict[str, GpuGeometry]] = {}
"""The geometries looked up so far, by the name asked (a module dict, not ``functools.cache``: compiled,
a call through the cache's wrapper goes through the interpreter's generic call, and the emulator asks at
every change of a node)."""


def geometry(model: str) -> GpuGeometry:
    """The geometry of ``model`` (case-insensitive, common aliases accepted): a MIG model of
    :data:`GEOMETRIES`, or a whole GPU (``<MODEL>:whole``, :func:`whole_model`)."""
    found = _KNOWN.get(model)
    if found is not None:
        return found
    if WHOLE in model:
        geo = _whole_geometry(model)
        _KNOWN[model] = geo
        return geo
    key = ALIASES.get(model, model)
    for name, geo in GEOMETRIES.items():
        if name.lower() == key.lower():
            _KNOWN[model] = geo
            return geo
    raise MigError(f"unknown GPU model {model!r} (known: {', '.join(GEOMETRIES)}; a GPU without MIG is "
                   f"'<MODEL>:whole', e.g. 'L4:whole')")


# --- GPUs without MIG ---------------------------------------------------------------------------------
#
# A GPU whose MIG mode is off, or a model without MIG (L4, T4, A10, ...), is offered whole: one slice
# kind named ``<MODEL>:whole`` (``H100-80GB:whole``). Its geometry is a one-slice layout, so the cluster
# model, the planner, the emulator and the agents treat it as they treat a MIG slice: a batch takes it
# and no other batch runs there until it is done. An operator may let several batches share it at
# once (time-sliced by the driver, without isolation: ``--gpu-share N``): the node's model is then
# ``<MODEL>:whole*N``, a layout of N slots of the same kind (starts 0..N-1), which always exist -- none
# is ever created or destroyed. Profile tables name the kind without the share (``gpu_model`` and each
# GPU configuration's ``gpu`` are ``<MODEL>:whole``): a batch's latency is measured alone on the GPU.
#
# Its cost: each slot is priced as the whole GPU (one "compute slice" at the price of all of the
# model's MIG compute slices), shared or not -- a batch on a shared GPU may use all of it. A model
# without a MIG geometry here has no list price: it is priced as one compute slice of
# :data:`DEFAULT_GPU_MODEL` (``--price-gpu-slice`` scales every GPU price).

WHOLE: Final = ":whole"
"""What a whole GPU's kind and model names carry after the GPU model."""
MAX_GPU_SHARE: Final = 64
"""The most batches one whole GPU may run at once (``--gpu-share``)."""
_BASE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def whole_kind(model: str) -> str:
    """The slice kind of a whole ``model`` GPU: ``<MODEL>:whole``, a known model in its canonical spelling
    (``whole_kind("h100") == "H100-80GB:whole"``)."""
    return _canonical_base(base_model(model)) + WHOLE


def whole_model(model: str, share: int = 1) -> str:
    """The model name of a node offering a whole ``model`` GPU to ``share`` batches at once."""
    if not 1 <= share <= MAX_GPU_SHARE:
        raise MigError(f"a whole GPU is shared by 1 to {MAX_GPU_SHARE} batches, not {share}")
    kind = whole_kind(model)
    return kind if share == 1 else f"{kind}*{share}"


def is_whole(model: str | None) -> bool:
    """Whether ``model`` names a whole GPU (its kind, or a node's model with or without a share)."""
    return model is not None and WHOLE in model


def base_model(model: str) -> str:
    """The GPU model of a whole GPU's name (``"H100-80GB:whole*2"`` -> ``"H100-80GB"``), else ``model``."""
    return model.split(WHOLE, 1)[0]


def gpu_share(model: str) -> int:
    """How many batches a node of ``model`` runs at once on its whole GPU (1 for a MIG model)."""
    return geometry(model).memory_slices if is_whole(model) else 1


def unshared(model: str) -> str:
    """``model`` without a share (``"A100-40GB:whole*4"`` -> ``"A100-40GB:whole"``): the model its
    profile tables name."""
    return model.split("*", 1)[0] if is_whole(model) else model


def _canonical_base(base: str) -> str:
    if not _BASE_NAME.fullmatch(base):
        raise MigError(f"{base!r} is not a GPU model name (letters, digits and . _ + - only)")
    try:
        return geometry(base).model
    except MigError:
        return base                       # a model without MIG: kept as spelled


def _whole_geometry(name: str) -> GpuGeometry:
    base, rest = name.split(WHOLE, 1)
    share = 1
    if rest:
        digits = rest[1:]
        if not rest.startswith("*") or not digits.isdigit():
            raise MigError(f"{name!r}: a whole GPU's model is '<MODEL>:whole' or '<MODEL>:whole*N' "
                           f"(N batches at once)")
        share = int(digits)
    model = whole_model(base, share)
    kind = whole_kind(base)
    known = GEOMETRIES.get(_canonical_base(base))
    price: float | None = None
    memory_mb = 0
    if known is not None:
        per_slice = known.slice_price
        if per_slice is None:
            per_slice = GEOMETRIES[DEFAULT_GPU_MODEL].slice_price
        assert per_slice is not None
        price = per_slice * known.compute_slices
        memory_mb = max(p.memory_mb for p in known.profiles.values())
    slot = MigProfile(kind, -1, 1, 1, share, tuple(range(share)), memory_mb)
    return GpuGeometry(model, share, share, {kind: slot}, price)


def slice_price(model: str) -> float:
    """The price of one compute slice of ``model`` per millisecond (a vCPU costs 1.0); a model without
    a list price is priced as :data:`DEFAULT_GPU_MODEL`."""
    price = geometry(model).slice_price
    if price is None:
        price = geometry(DEFAULT_GPU_MODEL).slice_price
    assert price is not None
    return price


def compute_slices(model: str, profile: str | None) -> int:
    """Compute slices of ``profile`` on ``model`` (0 for CPU only)."""
    return 0 if profile is None else geometry(model).profile(profile).compute_slices


Layout = tuple[tuple[str, int], ...]
"""A layout as sorted (profile, start) pairs: which instances sit where."""


def place(model: str, profiles: Iterable[str],
          occupied: Iterable[tuple[str, int]] = ()) -> Layout | None:
    """Explicit placements for ``profiles`` next to the instances already ``occupied``, or None.

    Larger instances are placed first and each tries its starts in order, so the search is
    deterministic; it is exhaustive (backtracking), so None means no placement exists. None also when
    ``occupied`` itself is not a valid layout (a start its profile does not allow, two instances
    overlapping, a profile above its maximum count).
    """
    geo = geometry(model)
    wanted = sorted((geo.profile(p) for p in profiles), key=lambda p: (-p.memory_slices, p.name))
    fixed = [(geo.profile(p), s) for p, s in occupied]
    used = 0
    for prof, start in fixed:
        m = _mask(prof, start)
        if start not in prof.starts or used & m:
            return None
        used |= m
    counts = Counter([p.name for p, _ in fixed])
    me = sum(p.media_extensions for p, _ in fixed)
    if any(counts[n] > geo.profiles[n].max_count for n in counts) or me > 1:
        return None
    result = _backtrack(geo, wanted, 0, used, counts, me, [])
    if result is None:
        return None
    return tuple(sorted([(p.name, s) for p, s in fixed] + result, key=lambda x: (x[1], x[0])))


def _mask(prof: MigProfile, start: int) -> int:
    return ((1 << prof.memory_slices) - 1) << start


def overlaps(model: str, a: tuple[str, int], b: tuple[str, int]) -> bool:
    """Whether instances ``a`` and ``b`` (profile, start) of ``model`` share a memory slice."""
    geo = geometry(model)
    return bool(_mask(geo.profile(a[0]), a[1]) & _mask(geo.profile(b[0]), b[1]))


def _backtrack(geo, wanted, i, used, counts, me, acc):
    if i == len(wanted):
        return list(acc)
    prof = wanted[i]
    if counts[prof.name] >= prof.max_count or (prof.media_extensions and me >= 1):
        return None
    counts[prof.name] += 1
    try:
        for start in prof.starts:
            m = _mask(prof, start)
            if used & m:
                continue
            acc.append((prof.name, start))
            found = _backtrack(geo, wanted, i + 1, used | m, counts, me + prof.media_extensions, acc)
            acc.pop()
            if found is not None:
                return found
        return None
    finally:
        counts[prof.name] -= 1


def is_valid(model: str, profiles: Iterable[str]) -> bool:
    """Whether instances of these profiles can all exist on one GPU of ``model`` at once."""
    return place(model, list(profiles)) is not None


@cache
def all_placements(model: str) -> tuple[Layout, ...]:
    """Every set of non-overlapping (profile, start) instances, by exhaustive enumeration."""
    geo = geometry(model)
    options = sorted(((p, s) for p in geo.profiles.values() for s in p.starts),
                     key=lambda x: (x[1], x[0].name))
    out: list[Layout] = []

    def walk(i: int, used: int, counts: Counter, me: int, acc: list) -> None:
        if i == len(options):
            out.append(tuple(acc))
            return
        walk(i + 1, used, counts, me, acc)
        prof, start = options[i]
        m = _mask(prof, start)
        if used & m or counts[prof.name] >= prof.max_count or (prof.media_extensions and me):
            return
        counts[prof.name] += 1
        acc.append((prof.name, start))
        walk(i + 1, used | m, counts, me + prof.media_extensions, acc)
        acc.pop()
        counts[prof.name] -= 1

    walk(0, 0, Counter(), 0, [])
    return tuple(out)


def layout_counts(layout: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """A layout reduced to sorted (profile, count) pairs: what mig-parted calls a config."""
    return tuple(sorted(Counter([p for p, _ in layout]).items()))


@cache
def valid_layouts(model: str, maximal_only: bool = True) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Every valid whole-GPU layout of ``model`` as profile counts, biggest instances first.

    With ``maximal_only`` a layout is listed only when no further instance of any profile fits beside
    some placement of it: the layouts an operator would carve a whole GPU into.
    """
    geo = geometry(model)
    layouts = {layout_counts(pl) for pl in all_placements(model) if pl}
    if maximal_only:
        layouts = {lc for lc in layouts
                   if not any(is_valid(model, _expand(lc) + [p]) for p in geo.profiles)}
    size = {p.name: p.compute_slices for p in geo.profiles.values()}
    return tuple(sorted(layouts, key=lambda lc: (
        [-size[p] for p in _expand(lc)], lc)))


def _expand(counts: Iterable[tuple[str, int]]) -> list[str]:
    out: list[str] = []
    for p, n in counts:
        out.extend([p] * n)
    return out


def free_compute_slices(model: str, layout: Iterable[tuple[str, int]]) -> int:
    return compute_slices_left(model, [p for p, _ in layout])


def compute_slices_left(model: str, profiles: Iterable[str]) -> int:
    """The compute slices of a ``model`` GPU that instances of ``profiles`` (one name per instance) leave."""
    geo = geometry(model)
    return geo.compute_slices - sum(geo.profile(p).compute_slices for p in profiles)


@cache
def best_start(model: str, profile: str, occupied: tuple[tuple[str, int], ...]) -> int | None:
    """Where to put one new ``profile`` instance beside ``occupied`` so the GPU stays least fragmented.

    Among the starts that are valid, pick the one after which the most compute slices' worth of
    profiles can still be created (so a 1g does not land where it blocks the only 4g or 7g placement);
    ties go to the highest start, as NVIDIA's driver fills small instances from the top.
    """
    geo = geometry(model)
    prof = geo.profile(profile)
    best: tuple[int, int] | None = None
    for start in prof.starts:
        after = occupied + ((profile, start),)
        if place(model, [], after) is None:
            continue
        score = sum(p.compute_slices for p in geo.profiles.values() if place(model, [p.name], after))
        if best is None or (score, start) > best:
            best = (score, start)
    return None if best is None else best[1]
