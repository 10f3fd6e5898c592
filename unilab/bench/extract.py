"""One run directory -> the numbers a benchmark reports: per-iteration means over a window, evidence, status.

The window matches conf/bench/offpolicy_gate.yaml: the first 50 iterations are warm-up (kernel
compilation, replay fill) and ignored; the last 100 are reported.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from unilab.rundir.layout import MANIFEST_FILE, METRICS_FILE, RUN_CONFIG_FILE, SUMMARY_FILE
from unilab.rundir.run_config import upgrade_config
from unilab.rundir.metrics import METRIC_KEYS, MetricsError, read_metrics

DEFAULT_SKIP_FIRST = 50
DEFAULT_LAST = 100

TIMING_KEYS = METRIC_KEYS[: METRIC_KEYS.index("collector_wait_for_action_ms") + 1]
COUNTER_KEYS = ("ingress_backpressure", "nan_guard_trips")  # cumulative: the run's last value is the count
RUN_FILES = (METRICS_FILE, MANIFEST_FILE, SUMMARY_FILE, RUN_CONFIG_FILE)


class RunError(ValueError):
    """A run directory that cannot be measured (missing files, too few iterations)."""


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: not valid JSON ({exc})") from exc


def _rows(run: Path) -> list[dict]:
    try:  # the run may have been killed mid-write: a torn last line is not an error here
        return read_metrics(run, latest_per_iteration=True, torn_tail_ok=True)
    except MetricsError as exc:
        raise RunError(str(exc)) from None


def _stats(values: list[float]) -> dict[str, Any]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values)}


def extract(run: str | Path, *, last: int = DEFAULT_LAST, skip_first: int = DEFAULT_SKIP_FIRST,
            allow_short: bool = False) -> dict[str, Any]:
    """`allow_short`: measure whatever a too-short run has (used for runs that did not complete)."""
    run = Path(run)
    if not run.is_dir():
        raise RunError(f"{run}: no such run directory")
    missing = [name for name in RUN_FILES if not (run / name).is_file()]
    no_metrics = allow_short and missing == [METRICS_FILE]  # a run that failed before its first iteration
    if missing and not no_metrics:
        hint = " (the run has not finished, or was killed before writing its summary)" if missing == [SUMMARY_FILE] \
            else ""
        raise RunError(f"{run}: not a complete unilab run, missing {', '.join(missing)}{hint}")
    summary = _read_json(run / SUMMARY_FILE)
    manifest = _read_json(run / MANIFEST_FILE)
    config = upgrade_config(_read_json(run / RUN_CONFIG_FILE), str(run / RUN_CONFIG_FILE))
    rows = [] if no_metrics else _rows(run)
    after_warmup = rows[skip_first:]
    if len(after_warmup) < last and not allow_short:
        raise RunError(f"{run}: {len(rows)} iterations in {METRICS_FILE}; {skip_first} skipped + {last} reported "
                       f"need {skip_first + last} (status {summary.get('status')}); lower --skip-first/--last")
    window = after_warmup[-last:] if last > 0 else []
    metrics = {key: _stats([row.get(key) for row in window]) for key in (*TIMING_KEYS, *COUNTER_KEYS)}
    for key in COUNTER_KEYS:
        values = [row.get(key) for row in rows if row.get(key) is not None]
        metrics[key]["last"] = values[-1] if values else None
    sharing = manifest.get("cuda_process_sharing") or {}
    return {
        "run": str(run),
        "name": run.name,
        "status": summary.get("status"),
        "cause": summary.get("cause"),
        "algo": (config.get("algo") or {}).get("name") or manifest.get("algo"),
        "task": (config.get("task") or {}).get("name") or manifest.get("task"),
        "seed": ((config.get("training") or {}).get("run") or {}).get("seed"),
        "config": config,
        "evidence": {
            "configured": sharing.get("configured"),
            "effective": sharing.get("effective"),
            "validated": sharing.get("validated"),
            "clients_verified": sharing.get("clients_verified"),
            "client_pids": sharing.get("client_pids") or {},
            "server_pid": sharing.get("server_pid"),
            "daemon_reachable": sharing.get("daemon_reachable"),
            "ambient_mps_blocked": bool(((config.get("training") or {}).get("mps") or {}).get("block_ambient_mps")),
            "gpu_uuid": sharing.get("gpu_uuid"),
            "gpu_name": sharing.get("gpu_name"),
            "compute_mode": sharing.get("compute_mode"),
            "ranks": [{"rank": r.get("rank"), "effective": r["cuda_process_sharing"].get("effective"),
                       "client_pids": r["cuda_process_sharing"].get("client_pids") or {}}
                      for r in manifest.get("ranks") or [] if r.get("cuda_process_sharing")],
        },
        "window": {
            "skip_first": skip_first,
            "last": last,
            "iterations_total": len(rows),
            "n": len(window),
            "first_iteration": window[0]["iteration"] if window else None,
            "last_iteration": window[-1]["iteration"] if window else None,
        },
        "metrics": metrics,
    }


def render(result: dict[str, Any]) -> str:
    ev, win = result["evidence"], result["window"]
    clients = ", ".join(f"{role} {pid}" for role, pid in ev["client_pids"].items()) or "none"
    lines = [
        f"run      {result['run']}",
        f"status   {result['status']}" + (f" ({result['cause']})" if result["cause"] else ""),
        f"algo     {result['algo']}  task {result['task']}  seed {result['seed']}",
        f"mode     configured {ev['configured']}, effective {ev['effective']}; clients {clients}; "
        f"server {ev['server_pid']}",
        f"window   iterations {win['first_iteration']}..{win['last_iteration']} ({win['n']} of "
        f"{win['iterations_total']}; first {win['skip_first']} skipped)",
        "",
        f"{'metric':<32}{'mean':>14}{'std':>12}{'n':>6}",
    ]
    for key, s in result["metrics"].items():
        mean = "-" if s["mean"] is None else f"{s['mean']:.3f}"
        std = "-" if s["std"] is None else f"{s['std']:.3f}"
        extra = f"   last {s['last']:g}" if s.get("last") is not None else ""
        lines.append(f"{key:<32}{mean:>14}{std:>12}{s['n']:>6}{extra}")
    return "\n".join(lines)
