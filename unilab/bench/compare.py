"""Arms of extracted runs -> throughput improvement of MPS over the baseline, and the gates that decide it.

An arm is (algo, task, configured mode); its repeats differ by seed only. Arm statistics are the mean
and the sample std over repeats of each run's window mean.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unilab.rundir.layout import is_run_dir
from unilab.rundir.run_config import diff_configs

from .extract import COUNTER_KEYS, DEFAULT_LAST, DEFAULT_SKIP_FIRST, TIMING_KEYS, RunError, extract

THROUGHPUT_KEY = "env_steps_per_s"
# What may differ between the runs of one comparison; anything else makes it apples to oranges.
VARYING_KEYS = ("training.mps.cuda_process_sharing", "training.run.seed", "training.run.run_name",
                "training.run.log_dir", "training.run.resume")


@dataclass
class CompareOptions:
    baseline_mode: str | None = None
    candidate_mode: str = "mps"
    threshold_pct: float = 20.0
    backpressure_tolerance_pct: float = 10.0
    skip_first: int = DEFAULT_SKIP_FIRST
    last: int = DEFAULT_LAST


def parse_mode(text: str) -> str | None:
    return None if text.lower() in ("null", "none", "default", "") else text


def expand_runs(paths: list[str]) -> list[Path]:
    """Run directories as given, or the run directories directly inside a given folder (e.g. runs/)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if is_run_dir(path) or not path.is_dir():
            out.append(path)
            continue
        children = sorted(p for p in path.iterdir() if is_run_dir(p))
        if not children:
            raise RunError(f"{path}: neither a run directory nor a folder of run directories")
        out.extend(children)
    resolved = [p.resolve() for p in out]
    if len(set(resolved)) != len(resolved):
        raise RunError("a run directory is given twice")
    return out


def load_runs(paths: list[Path], opts: CompareOptions) -> list[dict]:
    results = []
    for path in paths:
        try:
            results.append(extract(path, last=opts.last, skip_first=opts.skip_first))
        except RunError:
            # A run that failed or was interrupted still counts: it fails the `completed` gate.
            probe = extract(path, last=opts.last, skip_first=opts.skip_first, allow_short=True)
            if probe["status"] == "completed":
                raise
            results.append(probe)
    return results


def _mean_std(values: list[float | None]) -> dict[str, Any]:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values)}


def _arm(runs: list[dict], mode: str | None) -> dict[str, Any]:
    return {
        "mode": mode,
        "runs": [r["run"] for r in runs],
        "seeds": [r["seed"] for r in runs],
        "status": [r["status"] for r in runs],
        "effective": [r["evidence"]["effective"] for r in runs],
        "metrics": {key: _mean_std([r["metrics"][key]["mean"] for r in runs]) for key in TIMING_KEYS},
        "counters": {key: _mean_std([r["metrics"][key]["last"] for r in runs]) | {
            "max": max((r["metrics"][key]["last"] or 0 for r in runs), default=0)} for key in COUNTER_KEYS},
    }


def _mps_observed(run: dict, mode: str) -> bool:
    """Effective `mode` with both client pids: for the run (rank 0) and every rank that recorded evidence."""
    ev = run["evidence"]
    return all(e["effective"] == mode and all(e["client_pids"].get(role) for role in ("learner", "collector"))
               for e in (ev, *ev["ranks"]))


def _check_same_config(runs: list[dict]) -> None:
    first = runs[0]
    for other in runs[1:]:
        rows = [key for key, _, _ in diff_configs(first["config"], other["config"])
                if not any(key == k or key.startswith(k + ".") for k in VARYING_KEYS)]
        if rows:
            raise RunError(f"{first['run']} and {other['run']} differ in more than the mode and seed: "
                           + ", ".join(rows[:8]) + (" ..." if len(rows) > 8 else ""))


def _gate(name: str, passed: bool, detail: str) -> dict[str, Any]:
    return {"gate": name, "passed": bool(passed), "detail": detail}


def _group(algo: str, task: str, runs: list[dict], opts: CompareOptions) -> dict[str, Any]:
    baseline = [r for r in runs if r["evidence"]["configured"] == opts.baseline_mode]
    candidate = [r for r in runs if r["evidence"]["configured"] == opts.candidate_mode]
    _check_same_config(baseline + candidate)
    base, cand = _arm(baseline, opts.baseline_mode), _arm(candidate, opts.candidate_mode)
    b, c = base["metrics"][THROUGHPUT_KEY]["mean"], cand["metrics"][THROUGHPUT_KEY]["mean"]
    improvement = 100.0 * (c / b - 1.0) if b and c is not None else None
    gates = [
        _gate("throughput", improvement is not None and improvement >= opts.threshold_pct,
              f"{THROUGHPUT_KEY} {improvement:+.1f}% (threshold +{opts.threshold_pct:g}%)" if improvement is not None
              else f"{THROUGHPUT_KEY} not measured in both arms"),
    ]
    unfinished = [f"{Path(r['run']).name}: {r['status']}" for r in runs if r["status"] != "completed"]
    gates.append(_gate("completed", not unfinished, "all runs completed" if not unfinished else "; ".join(unfinished)))
    unseen = [Path(r["run"]).name for r in candidate if not _mps_observed(r, opts.candidate_mode)]
    gates.append(_gate("mps_observed", not unseen,
                       f"effective {opts.candidate_mode} with learner and collector client pids in every "
                       f"{opts.candidate_mode} run" if not unseen else "no MPS evidence in " + ", ".join(unseen)))
    # A baseline run that reached a live daemon (inherited CUDA_MPS_PIPE_DIRECTORY) may itself have run under MPS,
    # unless its children were pointed away from it (training.mps.block_ambient_mps) and the launcher then found
    # neither of them among the daemon's clients (effective stays null).
    tainted = [Path(r["run"]).name for r in baseline
               if r["evidence"]["effective"] is not None
               or (r["evidence"]["daemon_reachable"] and not r["evidence"]["ambient_mps_blocked"])]
    gates.append(_gate("baseline_without_mps", not tainted,
                       "the baseline runs had no MPS (no daemon reachable, or blocked and not its clients)"
                       if not tainted else
                       "an MPS daemon was reachable from " + ", ".join(tainted)
                       + " (its processes may have run under MPS)"))
    bp_base, bp_cand = base["counters"]["ingress_backpressure"]["mean"], cand["counters"]["ingress_backpressure"]["mean"]
    bp_limit = (bp_base or 0.0) * (1 + opts.backpressure_tolerance_pct / 100) + 1  # +1: 0 -> 1 is noise
    gates.append(_gate("backpressure", bp_cand is None or bp_cand <= bp_limit,
                       f"ingress_backpressure {_fmt(bp_cand)} vs baseline {_fmt(bp_base)} (limit {bp_limit:.1f})"))
    nan_base, nan_cand = base["counters"]["nan_guard_trips"]["max"], cand["counters"]["nan_guard_trips"]["max"]
    gates.append(_gate("nan_guard", nan_cand <= nan_base,
                       f"nan_guard_trips max {nan_cand:g} vs baseline {nan_base:g}"))
    return {"algo": algo, "task": task, "baseline": base, "candidate": cand, "improvement_pct": improvement,
            "gates": gates, "passed": all(g["passed"] for g in gates)}


def _arm_problems(algo: str, task: str, runs: list[dict], opts: CompareOptions) -> list[str]:
    """Why this group has no verdict: an arm without runs (its jobs never made a run directory), or an arm none
    of whose runs completed (failed or interrupted: nothing to measure)."""
    problems = []
    for name, mode in (("baseline", opts.baseline_mode), ("candidate", opts.candidate_mode)):
        arm = [r for r in runs if r["evidence"]["configured"] == mode]
        label = f"{algo}/{task}: no {{}}{name} run (configured mode {mode if mode is not None else 'null'})"
        if not arm:
            problems.append(label.format(""))
        elif not any(r["status"] == "completed" for r in arm):
            problems.append(label.format("completed ") + ": " + "; ".join(
                f"{r['name']} {r['status'] or 'without a status'}" + (f" ({r['cause']})" if r.get("cause") else "")
                for r in arm))
    return problems


def compare(results: list[dict], opts: CompareOptions) -> dict[str, Any]:
    if opts.baseline_mode == opts.candidate_mode:
        raise RunError(f"the baseline mode and the candidate mode are both {opts.candidate_mode}")
    modes = {opts.baseline_mode, opts.candidate_mode}
    stray = [r["run"] for r in results if r["evidence"]["configured"] not in modes]
    if stray:
        raise RunError(f"runs of neither arm (configured mode not in {sorted(map(str, modes))}): {', '.join(stray)}")
    keys = sorted({(r["algo"], r["task"]) for r in results})
    by_group = {key: [r for r in results if (r["algo"], r["task"]) == key] for key in keys}
    problems = [p for (algo, task), runs in by_group.items() for p in _arm_problems(algo, task, runs, opts)]
    if problems:
        raise RunError("no verdict without both arms:\n  " + "\n  ".join(problems)
                       + "\n  (rerun the missing or failed jobs: the summary at the end of `train -m` lists "
                       "each job's status and run directory)")
    groups = [_group(algo, task, runs, opts) for (algo, task), runs in by_group.items()]
    return {"threshold_pct": opts.threshold_pct, "window": {"skip_first": opts.skip_first, "last": opts.last},
            "groups": groups, "passed": all(g["passed"] for g in groups)}


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cell(stat: dict) -> str:
    if stat["mean"] is None:
        return "-"
    digits = 0 if abs(stat["mean"]) >= 1000 else 2
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def _n(arm: dict) -> str:
    """How many runs an arm's means come from; a run with no measured rows (failed or interrupted before its
    window) is named apart, so that `± 0` does not pass for two agreeing runs."""
    measured, found = arm["metrics"]["env_steps_per_s"]["n"], len(arm["runs"])
    return f"n={measured}" if measured == found else f"n={measured} of {found} runs"


def render_markdown(report: dict[str, Any]) -> str:
    out: list[str] = []
    for g in report["groups"]:
        base, cand = g["baseline"], g["candidate"]
        out += [f"## {g['algo']} / {g['task']}", "",
                f"| metric | {base['mode'] or 'null'} ({_n(base)}) | {cand['mode']} ({_n(cand)}) | change |",
                "|---|---:|---:|---:|"]
        for key in TIMING_KEYS:
            b, c = base["metrics"][key], cand["metrics"][key]
            change = f"{100 * (c['mean'] / b['mean'] - 1):+.1f}%" if b["mean"] and c["mean"] is not None else "-"
            out.append(f"| {key} | {_cell(b)} | {_cell(c)} | {change} |")
        for key in COUNTER_KEYS:
            b, c = base["counters"][key], cand["counters"][key]
            out.append(f"| {key} (final count) | {_cell(b)} | {_cell(c)} | |")
        out.append(f"| effective mode | {', '.join(e or 'null' for e in base['effective'])} | "
                   f"{', '.join(e or 'null' for e in cand['effective'])} | |")
        out += ["", "| gate | result | detail |", "|---|---|---|"]
        out += [f"| {x['gate']} | {'PASS' if x['passed'] else 'FAIL'} | {x['detail']} |" for x in g["gates"]]
        out.append("")
    out.append(f"**{'PASS' if report['passed'] else 'FAIL'}**: {THROUGHPUT_KEY} threshold "
               f"+{report['threshold_pct']:g}%, window = last {report['window']['last']} iterations after "
               f"skipping {report['window']['skip_first']}")
    return "\n".join(out)
