"""One line per learning run of a batch (`gpu_session.sh evals`), and each run's learning curve small enough
to copy off the GPU machine.

    python3 benchmarks/batch_summary.py SESSION_DIR LEARN_DIR NAME...

Per run: iterations and env steps (its last metrics row), each eval suite's completion, body position error
and falls (tracking) or velocity errors and falls (walk) from SESSION_DIR/eval_NAME.json, and, when other runs
of the batch stopped before it, the metrics rows it wrote after the last of those stops: runs under one MPS
daemon must keep training while neighbours stop.
A run's stop is the time of its last metrics row. Logs holding a CUDA fault or a missing release are named.
Writes SESSION_DIR/curves/NAME/metrics.jsonl (at most CURVE_ROWS rows, evenly spread, first and last kept)
and SESSION_DIR/batch_summary.txt (the printed lines).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from unilab.rundir.metrics import read_metrics

CURVE_ROWS = 500
FAULTS = ("illegal memory access", "did not release")


def thinned(rows: list[dict], k: int = CURVE_ROWS) -> list[dict]:
    k = min(k, len(rows))
    keep = sorted({round(i * (len(rows) - 1) / max(k - 1, 1)) for i in range(k)})
    return [rows[i] for i in keep]


def _num(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def eval_part(report: Path) -> str:
    if not report.exists():
        return f" | no eval report (see {report.with_suffix('.log').name})"
    out = ""
    for suite, result in json.loads(report.read_text())["suites"].items():
        o = result["overall"]
        if "completion" not in o:  # a walk report: velocity errors per command, no clips
            out += (f" | {suite}: lin {_num(o.get('lin_error'))} m/s, yaw {_num(o.get('yaw_error'))} rad/s, "
                    f"falls {100 * (o.get('fall_fraction') or 0):.2f} %")
            continue
        body = o.get("body_pos_error_mm")
        out += (f" | {suite}: completion {100 * o['completion']:.1f} %, body "
                f"{'-' if body is None else f'{body:.0f}'} mm, falls {100 * o['fall_fraction']:.0f} %")
    return out


def faults(session: Path, run: Path, name: str) -> list[str]:
    logs = [*session.glob(f"learn_{name}_*.log"), *run.glob("*.log")]
    return [str(p) for p in logs if any(f in p.read_text(errors="replace") for f in FAULTS)]


def summarise(session: Path, learn_dir: Path, names: list[str]) -> list[str]:
    rows = {n: read_metrics(learn_dir / n, torn_tail_ok=True) for n in names}  # a stopped run may leave half a line
    stops = {n: r[-1]["time"] for n, r in rows.items() if r}
    lines = []
    for n in names:
        r = rows[n]
        line = f"{n}: {r[-1]['iteration'] if r else 0} iterations, {r[-1]['env_steps'] if r else 0} env steps"
        line += eval_part(session / f"eval_{n}.json")
        earlier = [t for m, t in stops.items() if m != n and n in stops and t < stops[n] - 1]
        if earlier:
            line += f" | {sum(1 for row in r if row['time'] > max(earlier) + 1)} rows after the last earlier stop"
        for path in faults(session, learn_dir / n, n):
            line += f" | fault in {path}"
        if r:
            curve = session / "curves" / n / "metrics.jsonl"
            curve.parent.mkdir(parents=True, exist_ok=True)
            curve.write_text("".join(json.dumps(row) + "\n" for row in thinned(r)))
        lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    session, learn_dir, names = Path(argv[0]), Path(argv[1]), argv[2:]
    lines = summarise(session, learn_dir, names)
    (session / "batch_summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
