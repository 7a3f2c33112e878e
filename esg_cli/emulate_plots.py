"""Plots of an ``esg emulate`` run (matplotlib, Agg): the paper's hit-rate/cost figure and latency CDFs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from esg_cli.units import COST_UNIT  # noqa: E402


def plot_summary(rows: list[dict], path: Path) -> None:
    """Bars = SLO hit rate per policy for each (SLO, load) setting; markers = cost normalised to ESG."""
    settings = list(dict.fromkeys((r["slo"], r["load"]) for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by = {(r["policy"], r["slo"], r["load"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(settings)), 4))
    ax2 = ax.twinx()
    width = 0.8 / len(policies)
    x = np.arange(len(settings))
    for i, p in enumerate(policies):
        hits = [by[(p, s, ld)]["slo_hit_rate"] if (p, s, ld) in by else np.nan for s, ld in settings]
        cost = [by[(p, s, ld)]["cost_norm_esg"] if (p, s, ld) in by else np.nan for s, ld in settings]
        bars = ax.bar(x + (i - (len(policies) - 1) / 2) * width, hits, width, label=p)
        ax2.plot(x + (i - (len(policies) - 1) / 2) * width, cost, "o", color=bars.patches[0].get_facecolor(),
                 markeredgecolor="black")
    ax.set_xticks(x, [f"{s}\n{ld}" for s, ld in settings])
    ax.set_ylabel("SLO hit rate (bars)")
    ax.set_ylim(0, 1)
    ax2.set_ylabel("cost normalised to ESG (markers)")
    ax.legend(ncol=len(policies), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 1.15))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


SPLIT = (("cost_exec", "execution"), ("cost_idle", "idle warm workers"), ("cost_cold", "cold starts"),
         ("cost_mig", "MIG reconfiguration"))


def plot_cost_split(rows: list[dict], path: Path) -> None:
    """Stacked bars per cell: cost per request split into execution, idle warm workers, cold starts and
    MIG reconfiguration, one panel per (SLO, load) setting."""
    settings = list(dict.fromkeys((r["slo"], r["load"]) for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by = {(r["policy"], r["slo"], r["load"]): r for r in rows}
    cols = min(3, len(settings))
    nrows = -(-len(settings) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, (slo, load) in zip(axes.flat, settings):
        x = np.arange(len(policies))
        bottom = np.zeros(len(policies))
        for key, label in SPLIT:
            v = np.array([by[(p, slo, load)][key] if (p, slo, load) in by else 0.0 for p in policies])
            ax.bar(x, v, 0.7, bottom=bottom, label=label)
            bottom += v
        ax.set_xticks(x, policies, fontsize=7, rotation=30)
        ax.set_title(f"{slo} / {load}", fontsize=9)
        ax.set_ylabel(f"cost ({COST_UNIT})", fontsize=8)
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cdf(cells, path: Path) -> None:
    """End-to-end latency CDF per app (one line per policy, moderate SLO and normal load when run)."""
    pick = [c for c in cells if c["cell"][1:] == ("moderate", "normal")] or list(cells)
    apps = sorted({a for c in pick for a in c["latencies"]})
    if not apps:  # no request was measured in any cell: nothing to draw
        return
    fig, axes = plt.subplots(1, len(apps), figsize=(4 * len(apps), 3.2), squeeze=False)
    for ax, app in zip(axes[0], apps):
        for c in pick:
            lat = np.sort(c["latencies"].get(app, np.empty(0)))
            if lat.size:
                ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, label="/".join(c["cell"]))
        slo = pick[0]["slo"].get(app)
        if slo:
            ax.axvline(slo, color="gray", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_title(app, fontsize=9)
        ax.set_xlabel("end-to-end latency (ms)")
    axes[0][0].set_ylabel("CDF")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
