"""``esg mig layouts --gpu MODEL``: every valid whole-GPU MIG layout, derived from placement rules."""

from __future__ import annotations

import argparse
import json

from esg import mig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mig", help="MIG geometry of supported GPU models")
    msub = p.add_subparsers(dest="mig_command", required=True, metavar="MIG_COMMAND")
    lp = msub.add_parser("layouts", help="list every valid whole-GPU MIG layout of a GPU model")
    lp.add_argument("--gpu", required=True, help=f"GPU model ({', '.join(mig.GEOMETRIES)})")
    lp.add_argument("--all", action="store_true",
                    help="list every placeable combination, not only the maximal (whole-GPU) ones")
    lp.add_argument("--json", action="store_true", help="print JSON")
    lp.set_defaults(func=run_layouts)


def run_layouts(args: argparse.Namespace) -> int:
    geo = mig.geometry(args.gpu)
    layouts = mig.valid_layouts(geo.model, maximal_only=not args.all)
    if args.json:
        print(json.dumps({"gpu": geo.model, "layouts": [
            {"profiles": dict(lc), "placements": [list(x) for x in mig.place(geo.model, _expand(lc))]}
            for lc in layouts]}, indent=1))
        return 0
    print(f"{geo.model}: {len(layouts)} {'placeable' if args.all else 'whole-GPU'} layouts "
          f"({geo.compute_slices} compute / {geo.memory_slices} memory slices)")
    for lc in layouts:
        placed = mig.place(geo.model, _expand(lc))
        names = " + ".join(f"{n}x{p}" if n > 1 else p for p, n in lc)
        where = ", ".join(f"{p}@{s}" for p, s in placed)
        used = geo.compute_slices - mig.free_compute_slices(geo.model, placed)
        print(f"  {names:<44} compute {used}/{geo.compute_slices}   [{where}]")
    return 0


def _expand(lc):
    return [p for p, n in lc for _ in range(n)]
