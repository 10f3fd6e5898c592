"""`unilab bench gate`: the short-run benchmark matrix, its jobs and its verdict.

The matrix is a table of cases (algorithm, task, throughput threshold, envs). Each case runs both arms
(`+execution=default`, `+execution=mps`) for `repeats` seeds with the `+bench=offpolicy_gate` preset, one
`train -m` job at a time, into its own folder; its verdict is `unilab bench compare`'s six checks with the
case's threshold. This module plans the jobs and judges their run directories; `gate_run` runs them.

Nothing here imports torch or initialises CUDA: the jobs are `train` subprocesses.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .compare import THROUGHPUT_KEY, CompareOptions, compare, load_runs
from .extract import DEFAULT_LAST, DEFAULT_SKIP_FIRST, RunError


@dataclass(frozen=True)
class Case:
    algo: str
    task: str
    threshold_pct: float  # minimum env_steps_per_s improvement of the MPS arm
    envs: int

    @property
    def name(self) -> str:
        return f"{self.algo}_{self.task}"


# The matrix: the design's two workloads with its thresholds, and WarpSAC on the walk task. The envs are
# those the gates have run at so far (2048 for both tasks; docs/en/performance.md).
CASES = (
    Case("fastsac", "g1_walk_flat", 20.0, 2048),
    Case("flashsac", "g1_motion_tracking", 10.0, 2048),
    Case("warpsac", "g1_walk_flat", 20.0, 2048),
)
ARMS = {"default": None, "mps": "mps"}  # +execution=<arm> -> the configured training.mps.cuda_process_sharing
PRESET = "+bench=offpolicy_gate"
DEFAULT_ITERATIONS = 300  # conf/bench/offpolicy_gate.yaml
DEFAULT_REPEATS = 2
TRAIN = (sys.executable, "-m", "unilab.cli.train")  # how a job calls `train` (tests substitute a fake)
# The table's columns: the design's evidence tables (metric keys in docs/en/metrics.md).
COLUMNS = (
    ("iteration_ms", "iteration ms"),
    (THROUGHPUT_KEY, "env-steps/s"),
    ("learner_train_ms", "learner train ms"),
    ("learner_wait_for_collector_ms", "learner wait for collector ms"),
    ("collector_env_step_ms", "collector env step ms"),
    ("collector_backend_step_ms", "backend step ms"),
    ("collector_replay_write_ms", "replay write ms"),
)
# What the gate sets itself; an extra override of one of these is refused (with the option to use instead).
OWNED_KEYS = {
    "training.run.seed": "--repeats", "training.run.log_dir": "--out", "training.run.run_name": "--out",
    "execution": "(both arms always run)", "task.num_envs": "--envs", "algo.max_iterations": "--iterations",
    "training.run.device": "--device", "algo": "--cases", "task": "--cases",
}


class GateInputError(ValueError):
    """Bad input to the gate (exit 2, before anything runs or is created)."""


@dataclass(frozen=True)
class Shape:
    iterations: int = DEFAULT_ITERATIONS
    skip_first: int = DEFAULT_SKIP_FIRST
    last: int = DEFAULT_LAST
    repeats: int = DEFAULT_REPEATS

    def shortfalls(self) -> list[str]:
        """How this shape falls short of the design's (>= 300 iterations, the first >= 50 ignored, the last
        >= 100 reported, >= 2 repeats per arm); [] for a full gate."""
        out = []
        if self.iterations < DEFAULT_ITERATIONS:
            out.append(f"{self.iterations} iterations per run, the design asks >= {DEFAULT_ITERATIONS}")
        if self.skip_first < DEFAULT_SKIP_FIRST:
            out.append(f"the first {self.skip_first} ignored, the design asks >= {DEFAULT_SKIP_FIRST}")
        if self.last < DEFAULT_LAST:
            out.append(f"the last {self.last} reported, the design asks >= {DEFAULT_LAST}")
        if self.repeats < DEFAULT_REPEATS:
            out.append(f"{self.repeats} repeat{'s' if self.repeats != 1 else ''} per arm, the design asks "
                       f">= {DEFAULT_REPEATS}")
        return out

    def check(self, allow_short: bool) -> None:
        if min(self.iterations, self.last, self.repeats) < 1 or self.skip_first < 0:
            raise GateInputError("--iterations, --last and --repeats must be >= 1, --skip-first >= 0")
        if self.skip_first + self.last > self.iterations:
            raise GateInputError(f"{self.skip_first} skipped + {self.last} reported iterations do not fit in "
                                 f"{self.iterations}: raise --iterations or lower --skip-first/--last")
        short = self.shortfalls()
        if short and not allow_short:
            raise GateInputError("not the design's gate shape: " + "; ".join(short)
                                 + ".\n  a shorter gate is marked SHORT in its table: pass --allow-short")


@dataclass
class Job:
    case: str
    arm: str
    seed: int
    run_dir: str
    log: str
    argv: list[str]
    code: int | None = None  # exit status of `train -m`; None: not run
    status: str | None = None  # the run's (run_summary.json), else what the exit status says
    duration_s: float | None = None

    @property
    def label(self) -> str:
        return f"{self.case} {self.arm} seed {self.seed}"

    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass
class Plan:
    cases: list[Case]
    shape: Shape
    device: str
    out: str
    overrides: list[str] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"cases": [dict(asdict(c), name=c.name) for c in self.cases],
                "shape": dict(asdict(self.shape), short=bool(self.shape.shortfalls()),
                              shortfalls=self.shape.shortfalls()),
                "device": self.device, "out": self.out, "overrides": self.overrides,
                "jobs": [asdict(j) for j in self.jobs]}


def select_cases(names: list[str] | None, thresholds: list[str], envs: list[str]) -> list[Case]:
    """The matrix, or the `--cases` named, with `--threshold` / `--envs` applied (CASE=VALUE, or VALUE for all)."""
    by_name = {c.name: c for c in CASES}
    wanted = [n for arg in names or [] for n in arg.split(",") if n] or list(by_name)
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise GateInputError(f"unknown case {', '.join(unknown)}; the cases: {', '.join(by_name)}")
    cases = [by_name[n] for n in dict.fromkeys(wanted)]
    threshold = _per_case(thresholds, cases, "--threshold", float)
    num_envs = _per_case(envs, cases, "--envs", int)
    return [Case(c.algo, c.task, threshold.get(c.name, c.threshold_pct), num_envs.get(c.name, c.envs))
            for c in cases]


def _per_case(values: list[str], cases: list[Case], option: str, kind) -> dict[str, Any]:
    out: dict[str, Any] = {}
    names = [c.name for c in cases]
    for raw in values:
        name, eq, text = raw.rpartition("=")
        if eq and name not in names:
            raise GateInputError(f"{option} {raw}: {name!r} is not a case of this gate ({', '.join(names)})")
        try:
            value = kind(text)
        except ValueError:
            raise GateInputError(f"{option} {raw}: {text!r} is not a number") from None
        if value <= 0 and kind is int:
            raise GateInputError(f"{option} {raw}: must be > 0")
        out.update({name: value} if eq else dict.fromkeys(names, value))
    return out


def check_overrides(overrides: list[str]) -> None:
    for arg in overrides:
        key = arg.split("=", 1)[0].lstrip("+~")
        if arg.startswith("-") or "=" not in arg:
            raise GateInputError(f"{arg!r}: only train overrides KEY=VALUE go after --")
        owner = OWNED_KEYS.get(key)
        if owner:
            raise GateInputError(f"{arg}: the gate sets {key} itself; use {owner}")


def unavailable(cases: list[Case]) -> list[str]:
    """The algorithms and tasks of these cases that `train` cannot be told to use in this build."""
    from unilab.config.catalog import choices

    known = {group: set(choices(group)) for group in ("algo", "task")}
    return [f"{group} {name} ({case.name})" for case in cases
            for group, name in (("algo", case.algo), ("task", case.task)) if name not in known[group]]


def plan_jobs(cases: list[Case], shape: Shape, device: str, out: Path, overrides: list[str]) -> Plan:
    """Per case, per seed, the default arm then the MPS arm: the arms alternate, so a drift of the host over
    the gate does not favour one of them."""
    plan = Plan(cases=cases, shape=shape, device=device, out=str(out), overrides=list(overrides))
    for case in cases:
        for seed in range(1, shape.repeats + 1):
            for arm in ARMS:
                name = f"{arm}_seed-{seed}"
                argv = [*TRAIN, "-m", f"+execution={arm}", PRESET, "--algo", case.algo, "--task", case.task,
                        f"training.run.device={device}", f"task.num_envs={case.envs}",
                        f"algo.max_iterations={shape.iterations}", f"training.run.seed={seed}",
                        f"training.run.log_dir={out / case.name}", f"training.run.run_name={name}", *overrides]
                plan.jobs.append(Job(case=case.name, arm=arm, seed=seed, run_dir=str(out / case.name / name),
                                     log=str(out / "logs" / f"{case.name}_{name}.log"), argv=argv))
    return plan


# ---- the verdict ------------------------------------------------------------------------------------


def judge(plan: Plan) -> dict[str, Any]:
    """Each case's `unilab bench compare` report with its threshold, and the gate's verdict."""
    results = [_judge_case(plan, case) for case in plan.cases]
    return {**plan.as_dict(), "results": results, "passed": all(r["passed"] for r in results)}


def _judge_case(plan: Plan, case: Case) -> dict[str, Any]:
    opts = CompareOptions(baseline_mode=ARMS["default"], candidate_mode=ARMS["mps"],
                          threshold_pct=case.threshold_pct, skip_first=plan.shape.skip_first, last=plan.shape.last)
    jobs = [j for j in plan.jobs if j.case == case.name]
    missing = [j for j in jobs if not Path(j.run_dir).is_dir()]
    present = [Path(j.run_dir) for j in jobs if j not in missing]
    group, runs, problem = None, [], None
    try:
        runs = load_runs(present, opts)
        groups = compare(runs, opts)["groups"] if runs else []
        group = groups[0] if groups else None
        problem = None if group else "no run directory in either arm"
    except RunError as exc:
        problem = str(exc)
    runs = [{k: v for k, v in run.items() if k != "config"} for run in runs]  # the configs: in the run dirs
    criteria = list(group["gates"]) if group else [{"gate": "verdict", "passed": False,
                                                    "detail": f"no verdict: {problem}"}]
    if missing:  # a job that made no run directory (its config was refused, or it was never run)
        detail = "no run directory: " + ", ".join(f"{Path(j.run_dir).name} ({j.status or 'not run'})" for j in missing)
        done = next((c for c in criteria if c["gate"] == "completed"), None)
        if done is None:
            criteria.append({"gate": "completed", "passed": False, "detail": detail})
        else:
            criteria[criteria.index(done)] = {"gate": "completed", "passed": False,
                                              "detail": detail if done["passed"] else f"{done['detail']}; {detail}"}
    return {"case": case.name, "algo": case.algo, "task": case.task, "threshold_pct": case.threshold_pct,
            "envs": case.envs, "report": group, "runs": runs, "criteria": criteria,
            "failed": [c["gate"] for c in criteria if not c["passed"]],
            "passed": all(c["passed"] for c in criteria)}


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def _arm_cells(arm: dict | None) -> list[str]:
    if arm is None:
        return ["-"] * (len(COLUMNS) + 1)
    n = arm["metrics"][THROUGHPUT_KEY]["n"]
    cells = [str(n)]
    for key, _ in COLUMNS:  # the spread over repeats: for the throughput, where there are repeats
        stat = arm["metrics"][key]
        cells.append(_num(stat["mean"]) + (f" ± {stat['std']:,.0f}" if key == THROUGHPUT_KEY and n > 1 else ""))
    return cells


def render(verdict: dict[str, Any]) -> str:
    """The table (a row per case and arm), the failed criteria with their details, and the overall line."""
    head = ["case", "arm", "n", *(label for _, label in COLUMNS), "change in env-steps/s", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(COLUMNS) + 2) + "---|"]
    details = []
    for r in verdict["results"]:
        report = r["report"]
        change = "-" if report is None or report["improvement_pct"] is None else f"{report['improvement_pct']:+.1f} %"
        result = "PASS" if r["passed"] else "FAIL: " + ", ".join(r["failed"])
        for arm in ARMS:
            side = None if report is None else report["baseline" if arm == "default" else "candidate"]
            last = arm == "mps"
            lines.append("| " + " | ".join([
                f"{r['algo']} / {r['task']}" if not last else "", arm, *_arm_cells(side),
                f"{change} (>= {r['threshold_pct']:g} %)" if last else "", result if last else ""]) + " |")
        details += [f"- {r['case']}: {c['gate']} FAIL: {c['detail']}" for c in r["criteria"] if not c["passed"]]
    shape = verdict["shape"]
    failed = [r["case"] for r in verdict["results"] if not r["passed"]]
    out = lines + ([""] + details if details else []) + [""]
    if shape["short"]:
        out.append("SHORT: " + "; ".join(shape["shortfalls"]) + " (not the design's gate)")
    out.append(f"**{'PASS' if verdict['passed'] else 'FAIL'}**: "
               + (f"all {len(verdict['results'])} cases pass" if not failed else
                  f"{len(failed)} of {len(verdict['results'])} cases fail ({', '.join(failed)})")
               + f"; {shape['iterations']} iterations per run, the last {shape['last']} reported after the first "
               f"{shape['skip_first']}, {shape['repeats']} repeat{'s' if shape['repeats'] != 1 else ''} per arm, "
               f"device {verdict['device']}")
    return "\n".join(out)


def plot_gate(verdict: dict[str, Any], path: Path) -> Path | None:
    """`unilab bench compare`'s chart, a panel per case with a verdict; None when no case has one."""
    from .plot import plot

    judged = [r for r in verdict["results"] if r["report"] is not None]
    if not judged:
        return None
    groups = [dict(r["report"], passed=r["passed"]) for r in judged]  # the case's verdict, missing runs included
    return plot({"groups": groups}, [run for r in judged for run in r["runs"]], path)
