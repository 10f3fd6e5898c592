"""Walk learning curves against wall-clock time: the training tracking errors of each run (smoothed)
and the nominal `unilab eval` of its checkpoints, with the targets. Needs matplotlib (extra `plot`).

    python benchmarks/walk_curve.py RUN_DIR [RUN_DIR ...] --start EPOCH_S --out walk_curve.png

--start is the wall-clock time the command was started (seconds since the epoch; the default is
each run's first metrics row), so the x axis includes the start-up and kernel compilation.
Checkpoint evaluations are read from RUN_DIR/eval_iter_*.json (`unilab eval RUN --checkpoint F
--out RUN/eval_iter_N.json`); a checkpoint's time is when it was written (`checkpoint_time`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from unilab.bench.curves import curve, window_for
from unilab.rundir.metrics import read_metrics

TARGETS = {"lin": 0.10, "yaw": 0.15}  # nominal eval targets, m/s and rad/s


def training_curve(run: Path, start: float, key: str, window: int = 100) -> tuple[list[float], list[float]]:
    """KEY smoothed as `unilab plot` smooths it, in minutes from `start` (not from the first row)."""
    rows = [r for r in read_metrics(run, latest_per_iteration=True, torn_tail_ok=True) if r.get(key) is not None]
    if not rows:
        return [], []
    xs, ys = curve(rows, key, "wall_clock", window_for(len(rows), window))
    offset = (rows[0]["time"] - start) / 60.0
    return [x + offset for x in xs], ys


def eval_points(run: Path, start: float) -> list[tuple[float, float, float]]:
    points = []
    for f in sorted(run.glob("eval_iter_*.json")):
        report = json.loads(f.read_text())
        o = report["suites"]["nominal"]["overall"]
        t = report.get("checkpoint_time") or os.path.getmtime(report["checkpoint"])
        points.append(((t - start) / 60.0, o["lin_error"], o["yaw_error"]))
    return sorted(points)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--start", type=float, help="wall-clock start of the command, seconds since the epoch")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for run in args.runs:
        start = args.start or read_metrics(run, torn_tail_ok=True)[0]["time"]
        for ax, key, short in ((axes[0], "metrics/lin_vel_error", "lin"), (axes[1], "metrics/yaw_rate_error", "yaw")):
            xs, ys = training_curve(run, start, key)
            line, = ax.plot(xs, ys, alpha=0.6, label=f"{run.name}: training envs")
            pts = eval_points(run, start)
            if pts:
                col = 1 if short == "lin" else 2
                ax.plot([p[0] for p in pts], [p[col] for p in pts], "o-", color=line.get_color(),
                        label=f"{run.name}: eval nominal")
    for ax, short, unit in ((axes[0], "lin", "m/s"), (axes[1], "yaw", "rad/s")):
        ax.axhline(TARGETS[short], color="k", ls="--", lw=1, label=f"target {TARGETS[short]} {unit}")
        ax.set_xlabel("wall-clock minutes from the command's start")
        ax.set_ylabel(f"{short} velocity error ({unit})")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
