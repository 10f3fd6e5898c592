"""`unilab plot RUN...`: learning curves of runs overlaid; runs that differ only by seed are drawn as
their mean and a band (min-max or std). Needs matplotlib (extra `plot`)."""

from __future__ import annotations

import math
from pathlib import Path

from unilab.exit_codes import EXIT_USAGE
from unilab.rundir.layout import METRICS_FILE
from unilab.rundir.metrics import read_metrics
from unilab.rundir.run_config import diff_configs, load_run_config

from .plot import PlotUnavailable, require_matplotlib

WEIGHTED = {"episode_length", "episode_return"}  # means over finished episodes: weighted by their count
SEED_KEYS = ("training.run.seed", "training.run.run_name", "training.run.log_dir")  # what seeds of one config differ in
X_AXES = {"env_steps": "env steps (M)", "wall_clock": "wall clock (min)", "iteration": "iteration"}
DEFAULT_METRICS = ("episode_return", "episode_length")
GRID_POINTS = 200


class PlotError(ValueError):
    pass


def load_run(run: str | Path) -> list[dict]:
    """metrics.jsonl rows by iteration (a row logged again after a resume replaces the older one)."""
    run = Path(run)
    if not (run / METRICS_FILE).is_file():
        raise PlotError(f"{run}: not a run directory (no {METRICS_FILE})")
    rows = read_metrics(run, latest_per_iteration=True, torn_tail_ok=True)
    if not rows:
        raise PlotError(f"{run / METRICS_FILE}: no rows yet")
    return rows


def group_by_seed(runs: list[str | Path]) -> list[list[Path]]:
    """Runs whose run_config.json differ only in SEED_KEYS share a group (in the given order); a run
    without run_config.json is a group of its own."""
    groups: list[tuple[dict | None, list[Path]]] = []
    for run in map(Path, runs):
        try:
            config = load_run_config(run)
        except (FileNotFoundError, ValueError):
            config = None
        for ref, members in groups:
            if config is not None and ref is not None and not [
                    k for k, _, _ in diff_configs(ref, config) if k not in SEED_KEYS]:
                members.append(run)
                break
        else:
            groups.append((config, [run]))
    return [members for _, members in groups]


def window_for(n_rows: int, window: int | None = None) -> int:
    """The smoothing window: given, or 1/20 of the run (1 for a short run), never more than the run."""
    return max(1, min(n_rows, window if window else n_rows // 20))


def _x(row: dict, first: dict, axis: str) -> float:
    if axis == "env_steps":
        return row["env_steps"] / 1e6
    if axis == "wall_clock":
        return (row["time"] - first["time"]) / 60.0
    return float(row["iteration"])


def curve(rows: list[dict], key: str, axis: str, window: int) -> tuple[list[float], list[float]]:
    """(x, y) of KEY smoothed over a trailing window of `window` rows, one point per half window."""
    xs, ys = [], []
    ends = list(range(window - 1, len(rows), max(1, window // 2)))
    if ends and ends[-1] != len(rows) - 1:
        ends.append(len(rows) - 1)
    for end in ends:
        chunk = rows[end - window + 1:end + 1]
        pairs = [((r.get("episodes_finished") or 0) if key in WEIGHTED and "episodes_finished" in r else 1, r.get(key))
                 for r in chunk]
        pairs = [(w, v) for w, v in pairs if isinstance(v, (int, float)) and math.isfinite(v) and w]
        total = sum(w for w, _ in pairs)
        if total:
            xs.append(_x(chunk[-1], rows[0], axis))
            ys.append(sum(w * v for w, v in pairs) / total)
    return xs, ys


def _band(curves: list[tuple[list[float], list[float]]], band: str):
    """Mean and band of several seeds on a shared grid over the x range all of them cover."""
    import numpy as np

    lo, hi = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
    if hi <= lo:
        return None
    grid = np.linspace(lo, hi, GRID_POINTS)
    ys = np.stack([np.interp(grid, c[0], c[1]) for c in curves])
    mean = ys.mean(axis=0)
    if band == "std":
        std = ys.std(axis=0)
        return grid, mean, mean - std, mean + std
    return grid, mean, ys.min(axis=0), ys.max(axis=0)


def plot_runs(runs: list[str | Path], out: str | Path, *, x: str = "env_steps", metrics=DEFAULT_METRICS,
              window: int | None = None, band: str = "minmax", title: str | None = None) -> Path:
    if x not in X_AXES:
        raise PlotError(f"--x {x}: one of {', '.join(X_AXES)}")
    data = {Path(r): load_run(r) for r in runs}
    for key in metrics:
        if not any(row.get(key) is not None for rows in data.values() for row in rows):
            known = sorted({k for rows in data.values() for k in rows[-1] if isinstance(rows[-1][k], (int, float))})
            raise PlotError(f"metric {key!r}: in none of the runs (known: {', '.join(known)})")
    plt = require_matplotlib("unilab plot")
    groups = group_by_seed(list(data))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes[0], metrics):
        for i, members in enumerate(groups):
            color = colors[i % len(colors)]
            curves = [c for c in (curve(data[r], key, x, window_for(len(data[r]), window)) for r in members) if c[0]]
            label = members[0].name if len(members) == 1 else f"{members[0].name} ({len(members)} seeds)"
            shaded = _band(curves, band) if len(curves) > 1 else None
            if shaded is not None:
                grid, mean, low, high = shaded
                ax.plot(grid, mean, color=color, label=label)
                ax.fill_between(grid, low, high, color=color, alpha=0.25, linewidth=0)
            else:
                for j, (xs, ys) in enumerate(curves):
                    ax.plot(xs, ys, color=color, marker="." if len(xs) < 20 else None,
                            label=label if j == 0 else None)
        ax.set_xlabel(X_AXES[x])
        ax.set_title(key)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(args) -> int:
    import sys

    try:
        out = plot_runs(args.runs, args.out, x=args.x, metrics=args.metric or DEFAULT_METRICS,
                        window=args.window, band=args.band, title=args.title)
    except (PlotError, PlotUnavailable) as exc:
        print(f"unilab plot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {out}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="learning curves of runs overlaid; seeds of one config as mean and band")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--x", choices=list(X_AXES), default="env_steps",
                   help="x axis: env steps, minutes since the run's first row, or iteration (default env_steps)")
    p.add_argument("--metric", nargs="+", action="extend", metavar="KEY",
                   help="metrics.jsonl keys (default: episode_return episode_length)")
    p.add_argument("--out", default="curves.png", help="PNG file (default curves.png)")
    p.add_argument("--window", type=int, help="smoothing window in iterations (default: 1/20 of each run)")
    p.add_argument("--band", choices=["minmax", "std"], default="minmax", help="band over seeds (default minmax)")
    p.add_argument("--title")
    p.set_defaults(func=main)
