"""MIG layouts: every listed layout is placeable and no placeable layout is missing.

The reference here is independent of ``esg.mig``'s backtracking: every multiset of profiles that could
fit by memory slices is tried against every combination of starts (``itertools.product`` over the
profiles, ``itertools.combinations`` of starts among instances of one profile, which are
interchangeable), checking overlap of memory slices, maximum counts and at most one +me instance.
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest

from esg import mig
from esg_cli.main import main

MODELS = sorted(mig.GEOMETRIES)


def _placeable(geo: mig.GpuGeometry, counts: dict[str, int]) -> bool:
    profs = geo.profiles
    if any(n > profs[p].max_count for p, n in counts.items()):
        return False
    if sum(n for p, n in counts.items() if p.endswith("+me")) > 1:
        return False
    names = [p for p in counts if counts[p]]
    choices = [itertools.combinations(profs[p].starts, counts[p]) for p in names]
    for assignment in itertools.product(*choices):
        slices: list[int] = []
        for p, starts in zip(names, assignment):
            for s in starts:
                slices.extend(range(s, s + profs[p].memory_slices))
        if len(slices) == len(set(slices)) and max(slices) < geo.memory_slices:
            return True
    return False


@cache
def _reference(model: str) -> tuple[frozenset, frozenset]:
    """(all placeable non-empty layouts, the maximal ones) as sets of sorted (profile, count) tuples."""
    geo = mig.GEOMETRIES[model]
    names = sorted(geo.profiles)
    placeable = set()
    bounds = [range(geo.memory_slices // geo.profiles[p].memory_slices + 1) for p in names]
    for ns in itertools.product(*bounds):
        if not any(ns):
            continue
        if sum(n * geo.profiles[p].memory_slices for p, n in zip(names, ns)) > geo.memory_slices:
            continue
        counts = {p: n for p, n in zip(names, ns) if n}
        if _placeable(geo, counts):
            placeable.add(tuple(sorted(counts.items())))
    maximal = set()
    for lc in placeable:
        grown = [tuple(sorted({**dict(lc), p: dict(lc).get(p, 0) + 1}.items())) for p in names]
        if not any(g in placeable for g in grown):
            maximal.add(lc)
    return frozenset(placeable), frozenset(maximal)


@pytest.mark.parametrize("model", MODELS)
def test_no_placeable_layout_is_missing(model):
    placeable, maximal = _reference(model)
    listed_all = mig.valid_layouts(model, maximal_only=False)
    listed_max = mig.valid_layouts(model)
    assert len(set(listed_all)) == len(listed_all)
    assert set(listed_all) == placeable
    assert set(listed_max) == maximal
    assert set(listed_max) <= set(listed_all)


@pytest.mark.parametrize("model", MODELS)
def test_every_listed_layout_is_placeable(model):
    geo = mig.GEOMETRIES[model]
    for lc in mig.valid_layouts(model, maximal_only=False):
        assert _placeable(geo, dict(lc)), lc
        names = [p for p, n in lc for _ in range(n)]
        placed = mig.place(model, names)
        assert placed is not None
        # the explicit placement the module returns is itself valid
        assert sorted(p for p, _ in placed) == sorted(names)
        slices = [x for p, s in placed for x in range(s, s + geo.profiles[p].memory_slices)]
        assert len(slices) == len(set(slices)) and max(slices) < geo.memory_slices
        assert all(s in geo.profiles[p].starts for p, s in placed)


@pytest.mark.parametrize("model", MODELS)
def test_all_placements_are_valid_and_complete(model):
    geo = mig.GEOMETRIES[model]
    placements = mig.all_placements(model)
    assert len(set(placements)) == len(placements)
    for pl in placements:
        slices = [x for p, s in pl for x in range(s, s + geo.profiles[p].memory_slices)]
        assert len(slices) == len(set(slices))
        counts = mig.layout_counts(pl)
        assert all(n <= geo.profiles[p].max_count for p, n in counts)
        assert sum(n for p, n in counts if p.endswith("+me")) <= 1
    assert {mig.layout_counts(pl) for pl in placements if pl} == _reference(model)[0]


def test_a100_facts():
    m = "A100-40GB"
    assert not mig.is_valid(m, ["3g.20gb", "3g.20gb", "1g.5gb"])
    assert not mig.is_valid(m, ["3g.20gb", "3g.20gb", "1g.5gb+me"])
    assert mig.is_valid(m, ["4g.20gb", "3g.20gb"])
    assert (("3g.20gb", 2),) in mig.valid_layouts(m)
    assert (("3g.20gb", 1), ("4g.20gb", 1)) in mig.valid_layouts(m)
    seven = mig.place(m, ["1g.5gb"] * 7)
    assert sorted(s for _, s in seven) == list(range(7))  # memory slice 7 is left idle
    assert (("1g.5gb", 7),) in mig.valid_layouts(m)  # and nothing more fits: maximal
    assert not mig.is_valid(m, ["1g.5gb"] * 8)
    assert not mig.is_valid(m, ["1g.5gb+me", "1g.5gb+me"])
    assert not mig.is_valid(m, ["7g.40gb", "1g.5gb"])
    assert mig.valid_layouts(m)[0] == (("7g.40gb", 1),)


def test_a30_facts():
    geo = mig.geometry("A30")
    assert geo.memory_slices == 4 and geo.compute_slices == 4
    assert mig.is_valid("A30", ["2g.12gb", "2g.12gb"])
    assert mig.is_valid("A30", ["1g.6gb"] * 4)
    assert not mig.is_valid("A30", ["1g.6gb+me", "2g.12gb+me"])
    assert mig.valid_layouts("A30")[0] == (("4g.24gb", 1),)


def test_place_respects_occupied_instances():
    m = "A100-40GB"
    assert mig.place(m, ["4g.20gb"], occupied=[("1g.5gb", 0)]) is None
    placed = mig.place(m, ["3g.20gb"], occupied=[("1g.5gb", 0)])
    assert placed == (("1g.5gb", 0), ("3g.20gb", 4))
    assert mig.place(m, [], occupied=[("3g.20gb", 1)]) is None  # not one of its starts
    assert mig.best_start(m, "1g.5gb", ()) == 6  # at the top, so 4g@0 still fits
    with pytest.raises(mig.MigError):
        mig.place(m, ["9g.99gb"])


def test_unknown_model_is_named():
    with pytest.raises(mig.MigError, match="V100"):
        mig.geometry("V100")


def test_cli_lists_each_layout(capsys):
    assert main(["mig", "layouts", "--gpu", "A100-40GB"]) == 0
    out = capsys.readouterr().out
    layouts = mig.valid_layouts("A100-40GB")
    assert f"{len(layouts)} whole-GPU layouts" in out
    lines = out.splitlines()[1:]
    assert len(lines) == len(layouts)
    for lc, line in zip(layouts, lines):
        names = " + ".join(f"{n}x{p}" if n > 1 else p for p, n in lc)
        assert line.strip().startswith(names)
    assert any(line.strip().startswith("7x1g.5gb ") for line in lines)


def test_cli_all_and_json(capsys):
    import json

    assert main(["mig", "layouts", "--gpu", "a30", "--all"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 + len(mig.valid_layouts("A30", maximal_only=False))
    assert main(["mig", "layouts", "--gpu", "A100-40GB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu"] == "A100-40GB"
    assert [tuple(sorted(x["profiles"].items())) for x in data["layouts"]] == \
        [tuple(sorted(lc)) for lc in mig.valid_layouts("A100-40GB")]


def test_cli_unknown_model_exits_2_naming_it(capsys):
    assert main(["mig", "layouts", "--gpu", "V100-16GB"]) == 2
    err = capsys.readouterr().err
    assert "V100-16GB" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model", MODELS)
def test_overlap_rule_is_shared_memory_slices(model):
    """``mig.overlaps`` (the one rule: the scheduler's fit, the agent's slice manager and reconciler)
    against sets of memory slices, for every pair of placements of the model."""
    geo = mig.geometry(model)
    spots = [(p.name, s) for p in geo.profiles.values() for s in p.starts]

    def cells(spot: tuple[str, int]) -> set[int]:
        return set(range(spot[1], spot[1] + geo.profiles[spot[0]].memory_slices))

    for a, b in itertools.product(spots, repeat=2):
        assert mig.overlaps(model, a, b) == bool(cells(a) & cells(b)), (a, b)
