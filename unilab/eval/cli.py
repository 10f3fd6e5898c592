"""`unilab eval RUN [--checkpoint FILE] [--suite nominal|robust|push|all]`: eval.json and a printed table.

The run's task picks the evaluation: a command grid for `g1_walk_flat` (unilab/eval/walk.py), every
clip of the motion for `g1_motion_tracking` (unilab/eval/tracking.py). The report's header fields are
common; each suite holds the task's rows (`per_command` or `per_clip`) and their `overall` means.

Input is checked before anything is built: a directory that is not a run, a run without
checkpoints, a checkpoint of another run's task or algorithm, a task without an evaluation or a
bad `--motion` exit 2 with the reason, and nothing is written.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from unilab.exit_codes import EXIT_USAGE
from unilab.rundir.layout import EVAL_FILE, is_run_dir

EVAL_SCHEMA = "unilab.eval/1"
EVALUATED_TASKS = ("g1_walk_flat", "g1_motion_tracking")
SUITE_NAMES = ("nominal", "robust", "push")  # the walk task's (unilab/eval/walk.py); tracking has the first two


class EvalInputError(ValueError):
    """Bad input to `unilab eval`: exit 2, nothing written."""


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


def check_inputs(run: str, checkpoint: str | None, tasks: tuple[str, ...] | None = EVALUATED_TASKS) -> tuple[dict, Path]:
    """The run's config and the checkpoint to evaluate, or EvalInputError. tasks: those accepted (None: any)."""
    from unilab.rundir.checkpoint import find_checkpoint, run_dir_of
    from unilab.rundir.run_config import load_run_config

    try:
        config = load_run_config(run)
    except (FileNotFoundError, ValueError) as exc:
        raise EvalInputError(f"{run} is not a run directory ({exc})") from exc
    task, algo = config["task"]["name"], config["algo"]["name"]
    if tasks is not None and task not in tasks:
        raise EvalInputError(f"no evaluation for task {task!r} yet; evaluated tasks: {', '.join(EVALUATED_TASKS)}")
    try:
        ckpt = find_checkpoint(checkpoint or run)
    except (FileNotFoundError, ValueError) as exc:  # ValueError: a latest.pt leading out of checkpoints/
        raise EvalInputError(str(exc).replace("training.resume=", "")) from exc
    owner = run_dir_of(ckpt)
    if checkpoint and is_run_dir(owner):
        other = load_run_config(owner)
        theirs = (other["task"]["name"], other["algo"]["name"])
        if theirs != (task, algo):
            raise EvalInputError(f"{ckpt} is a checkpoint of {theirs[1]} on {theirs[0]}; {run} trains {algo} on {task}")
    return config, ckpt


def checkpoint_state(ckpt: Path) -> dict:
    """The checkpoint's dict, read before any env is built; EvalInputError for one that is refused (it holds
    more than data) or unreadable."""
    from unilab.runtime.play import read_policy_checkpoint

    try:
        return read_policy_checkpoint(ckpt)
    except ValueError as exc:
        raise EvalInputError(str(exc)) from exc


class _WalkEval:
    """The walk task's command grid."""

    def __init__(self, task: dict, settings):
        from . import walk

        self.walk, self.settings = walk, settings or walk.WalkEvalSettings()
        self.fields = {"commands": [list(c) for c in walk.COMMAND_GRID]}

    def task_config(self, task: dict, suite: str) -> dict:
        return _merge(task, self.walk.task_overrides(suite, self.settings))

    def run(self, env, policy, suite: str) -> dict:
        rows = self.walk.rollout(env, policy, self.settings)
        return {"per_command": rows, "overall": self.walk.overall(rows)}


class _TrackingEval:
    """Every clip of the run's motion (or of `settings.motion`), played from its first frame."""

    def __init__(self, task: dict, settings):
        from unilab.motion.default_clip import default_clip_path
        from unilab.motion.library import load_motion_library
        from unilab.tasks.g1_motion_tracking.config import check_motion_file

        from . import tracking

        self.tracking, self.settings = tracking, settings or tracking.TrackingEvalSettings()
        motion = self.settings.motion or task.get("motion_file")
        if self.settings.motion is not None:
            try:
                library = check_motion_file(self.settings.motion)
            except ValueError as exc:
                raise EvalInputError(str(exc).replace("task.motion_file", "--motion")) from None
        else:
            try:
                library = load_motion_library(motion if motion is not None else default_clip_path())
            except ValueError as exc:  # the run's own motion file moved or changed since training
                raise EvalInputError(f"the motion to evaluate on: {exc}") from None
        self.max_clip_s = max(c.duration for c in library.clips)
        self.num_clips = library.num_clips
        self.fields = {"motion": str(motion) if motion is not None else None, "clips": list(library.names)}
        self.nominal_kept: list[str] = []

    def task_config(self, task: dict, suite: str) -> dict:
        over, kept = self.tracking.task_overrides(suite, task, self.settings, self.max_clip_s, self.num_clips)
        if suite == "nominal":
            self.nominal_kept = kept
        return _merge(task, over)

    def run(self, env, policy, suite: str) -> dict:
        rows = self.tracking.rollout(env, policy, self.settings.envs_per_clip)
        out = {"per_clip": rows, "overall": self.tracking.overall(rows)}
        if suite == "nominal":
            out["randomization_kept"] = self.nominal_kept  # settings without a known "off": as trained
        return out


EVALUATIONS = {"g1_walk_flat": _WalkEval, "g1_motion_tracking": _TrackingEval}


def evaluate(run: str, *, checkpoint: str | None = None, suites=("nominal", "robust"), device: str | None = None,
             settings=None, out: str | None = None) -> dict:
    """settings: the task's (walk.WalkEvalSettings or tracking.TrackingEvalSettings); None: its defaults."""
    import torch

    from unilab.atomic import write_json_atomic
    from unilab.registry import instantiate
    from unilab.runtime.play import load_learner
    from unilab.tasks import make_env

    config, ckpt = check_inputs(run, checkpoint)
    state = checkpoint_state(ckpt)
    evaluation = EVALUATIONS[config["task"]["name"]](config["task"], settings)
    device = device or str(config["training"]["device"])
    seed = int(config["training"]["seed"]) + 104729  # neither the training nor the play envs' seed
    report = {"schema": EVAL_SCHEMA, "run": str(Path(run).resolve()), "checkpoint": str(ckpt),
              "checkpoint_time": Path(ckpt).stat().st_mtime,  # when it was written: learning curves in wall time
              "task": config["task"]["name"], "algo": config["algo"]["name"], "device": device,
              "settings": vars(evaluation.settings), **evaluation.fields, "suites": {}}
    algo, sim = instantiate("algo", config["algo"]), instantiate("sim", config["sim"])
    for suite in suites:
        task = instantiate("task", evaluation.task_config(config["task"], suite))
        env = make_env(task, sim, device, seed)
        try:
            learner, state = load_learner(algo, env, ckpt, device, seed, state=state)
        except ValueError as exc:
            raise EvalInputError(str(exc)) from exc
        report["iteration"], report["env_steps"] = int(state["iteration"]), int(state.get("env_steps", 0))
        report["suites"][suite] = evaluation.run(env, functools.partial(learner.act, deterministic=True), suite)
        del env, learner
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    write_json_atomic(Path(out) if out else Path(run) / EVAL_FILE, report)
    return report


def format_table(report: dict, parts: int = 0) -> str:
    """The report as the console prints it; `parts`: motion tracking's largest body and joint errors per clip."""
    def num(x, fmt="{:.3f}"):
        return "-" if x is None else fmt.format(x)

    lines = [f"eval of {report['checkpoint']} (iteration {report.get('iteration')}, {report.get('env_steps', 0):,} env steps)"]
    if report.get("task") == "g1_motion_tracking":
        from .tracking import format_suite

        for suite, res in report["suites"].items():
            lines += format_suite(suite, res, parts)
        return "\n".join(lines)
    for suite, res in report["suites"].items():
        lines.append(f"\n[{suite}]  command (vx, vy, wz) -> achieved      lin err m/s  yaw err rad/s  falls  torque/limit")
        for r in res["per_command"]:
            cmd = "({:+.2f}, {:+.2f}, {:+.2f})".format(*r["command"])
            ach = "({:+.2f}, {:+.2f}, {:+.2f})".format(*r["achieved"])
            lines.append(f"  {cmd:<22} {ach:<20} {num(r['lin_error']):>10} {num(r['yaw_error']):>13} "
                         f"{100 * r['fall_fraction']:>5.1f}% {num(r['torque_share'], '{:.2f}'):>12}")
        o = res["overall"]
        lines.append(f"  {'overall':<43} {num(o['lin_error']):>10} {num(o['yaw_error']):>13} "
                     f"{100 * (o['fall_fraction'] or 0):>5.1f}% {num(o['torque_share'], '{:.2f}'):>12}")
        if o.get("combined_lin_error") is not None or o.get("max_fall_fraction") is not None:
            lines.append(f"  {'combined (vx, vy, wz all set)':<43} {num(o.get('combined_lin_error')):>10} "
                         f"{'':>13} {100 * (o.get('combined_fall_fraction') or 0):>5.1f}%")
            lines.append(f"  {'worst command falls':<43} {'':>10} {'':>13} {100 * (o.get('max_fall_fraction') or 0):>5.1f}%")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="measure a run's policy (eval.json): velocity tracking over a command grid "
                                    "(walk), or every clip of the motion played from its start (motion tracking)")
    p.add_argument("run", help="run directory")
    p.add_argument("--checkpoint", help="checkpoint file (default: the run's latest)")
    p.add_argument("--suite", choices=(*SUITE_NAMES, "all"), default="all",
                   help="walk: nominal (no noise, pushes or friction draws), robust (noise, friction 0.3-1.2, "
                        "pushes up to 0.5 m/s), push (noise, friction, a 0.5-1.0 m/s push every 2 s); "
                        "motion tracking: nominal, robust; all: every suite of the task (default)")
    p.add_argument("--device", help="default: the run's training.device")
    p.add_argument("--envs-per-command", type=int, default=32, help="walk: envs per command of the grid")
    p.add_argument("--hold-s", type=float, default=10.0, help="walk: seconds each command is held")
    p.add_argument("--window-s", type=float, default=6.0, help="walk: the last seconds of the hold that are measured")
    p.add_argument("--envs-per-clip", type=int, default=16, help="motion tracking: envs playing each clip")
    p.add_argument("--motion", help="motion tracking: a clip file or directory to evaluate on "
                                    "(default: the run's task.motion_file)")
    p.add_argument("--parts", type=int, default=0, metavar="N",
                   help="motion tracking: print each clip's N largest body position and joint errors (eval.json "
                        "holds them all)")
    p.add_argument("--out", help="where to write the report (default: RUN/eval.json)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=main)


def _settings(args: argparse.Namespace):
    """The evaluation settings of the run's task from the flags (None when the run is no run: checked later)."""
    from unilab.rundir.run_config import load_run_config

    from .tracking import TrackingEvalSettings
    from .walk import WalkEvalSettings

    try:
        task = load_run_config(args.run)["task"]["name"]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    if task == "g1_motion_tracking":
        if args.envs_per_clip < 1:
            raise EvalInputError("need --envs-per-clip >= 1")
        return TrackingEvalSettings(args.envs_per_clip, args.motion)
    for flag, value in (("--motion", args.motion), ("--parts", args.parts or None)):
        if value is not None:
            raise EvalInputError(f"{flag} is for motion tracking runs; {args.run} trains {task}")
    return WalkEvalSettings(args.envs_per_command, args.hold_s, args.window_s)


def _suites(name: str, settings) -> tuple[str, ...]:
    """The suites `--suite` names for the run's task; EvalInputError for one the task has not."""
    from .walk import SUITES, WalkEvalSettings

    if settings is None:  # no run: evaluate() says so
        return (name,) if name != "all" else ("nominal",)
    known = tuple(SUITES) if isinstance(settings, WalkEvalSettings) else ("nominal", "robust")
    if name == "all":
        return known
    if name not in known:
        raise EvalInputError(f"--suite {name}: this run's task has the suites {', '.join(known)}")
    return (name,)


def main(args: argparse.Namespace) -> int:
    if args.envs_per_command < 1 or not 0 < args.window_s <= args.hold_s:
        print("unilab eval: need --envs-per-command >= 1 and 0 < --window-s <= --hold-s", file=sys.stderr)
        return EXIT_USAGE
    if args.parts < 0:
        print(f"unilab eval: --parts {args.parts}: need a count >= 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = _settings(args)
        suites = _suites(args.suite, settings)
        report = evaluate(args.run, checkpoint=args.checkpoint, suites=suites, device=args.device,
                          settings=settings, out=args.out)
    except EvalInputError as exc:
        print(f"unilab eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(report, indent=2) if args.json else format_table(report, args.parts))
    return 0
