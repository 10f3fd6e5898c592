"""Learning curves of a run: episode length / return (weighted by finished episodes) and any
per-iteration metric, smoothed over a window of iterations. Needs matplotlib (extra `plot`).

    python benchmarks/plot_run.py RUN_DIR --out curves.png --keys episode_length episode_return
"""

from __future__ import annotations

import argparse
from pathlib import Path

from unilab.rundir.layout import METRICS_FILE
from unilab.rundir.metrics import read_metrics

WEIGHTED = {"episode_length", "episode_return"}  # means over finished episodes: weight by their count


def load_rows(run: Path) -> list[dict]:
    """metrics.jsonl rows by iteration; a row logged again after a resume replaces the older one."""
    if not (run / METRICS_FILE).is_file():
        raise FileNotFoundError(f"{run / METRICS_FILE}: no such file")
    return read_metrics(run, latest_per_iteration=True)


def smooth(rows: list[dict], key: str, window: int) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for start in range(0, len(rows) - window + 1, max(1, window // 2)):
        chunk = rows[start:start + window]
        if key in WEIGHTED:
            w = [(r.get("episodes_finished") or 0, r.get(key)) for r in chunk if r.get(key) is not None]
            total = sum(n for n, _ in w)
            if not total:
                continue
            value = sum(n * v for n, v in w) / total
        else:
            vals = [r[key] for r in chunk if r.get(key) is not None]
            if not vals:
                continue
            value = sum(vals) / len(vals)
        xs.append(chunk[-1]["env_steps"] / 1e6)
        ys.append(value)
    return xs, ys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keys", nargs="+", default=["episode_length", "episode_return"])
    ap.add_argument("--window", type=int, default=200)
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit(f"plot_run: needs matplotlib (pip install 'unilab[plot]'): {exc}")
    rows = load_rows(args.run)
    fig, axes = plt.subplots(1, len(args.keys), figsize=(5 * len(args.keys), 3.6), squeeze=False)
    for ax, key in zip(axes[0], args.keys):
        xs, ys = smooth(rows, key, args.window)
        ax.plot(xs, ys)
        ax.set_xlabel("env steps (M)")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    fig.suptitle(args.title or args.run.name)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(rows)} iterations)")


if __name__ == "__main__":
    main()
