"""`--plot out.png`: throughput per arm (mean ± std over repeats, each repeat as a dot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .compare import THROUGHPUT_KEY


class PlotUnavailable(RuntimeError):
    pass


def require_matplotlib(what: str = "--plot"):
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailable(f"{what} needs the 'matplotlib' package: pip install matplotlib  "
                              "(or pip install 'unilab[plot]')") from exc
    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    return plt


def plot(report: dict[str, Any], runs: list[dict], path: str | Path) -> Path:
    plt = require_matplotlib()
    per_run = {r["run"]: r["metrics"][THROUGHPUT_KEY]["mean"] for r in runs}
    groups = report["groups"]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 4), squeeze=False)
    for ax, g in zip(axes[0], groups):
        arms = [g["baseline"], g["candidate"]]
        labels = [str(a["mode"] or "null") for a in arms]
        means = [a["metrics"][THROUGHPUT_KEY]["mean"] or 0.0 for a in arms]
        stds = [a["metrics"][THROUGHPUT_KEY]["std"] or 0.0 for a in arms]
        ax.bar(labels, means, yerr=stds, capsize=6, color=["#8c8c8c", "#3b75af"])
        for x, arm in enumerate(arms):
            dots = [per_run[r] for r in arm["runs"] if per_run.get(r) is not None]
            ax.plot([x] * len(dots), dots, "o", color="black", markersize=4)
        change = "n/a" if g["improvement_pct"] is None else f"{g['improvement_pct']:+.1f}%"
        ax.set_title(f"{g['algo']} / {g['task']}\n{change} (gates {'PASS' if g['passed'] else 'FAIL'})", fontsize=10)
        ax.set_ylabel("env steps / s")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
