"""`unilab eval RUN [--checkpoint FILE] [--suite nominal|robust|push|slow|all]`: eval.json and a printed table.

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
import time
from pathlib import Path

from unilab.exit_codes import EXIT_USAGE
from unilab.rundir.layout import EVAL_FILE, is_run_dir

EVAL_SCHEMA = "unilab.eval/1"
EVALUATED_TASKS = ("g1_walk_flat", "g1_motion_tracking")
SUITE_NAMES = ("nominal", "robust", "push", "slow")  # the walk task's (unilab/eval/walk.py); tracking has the first two


class EvalInputError(ValueError):
    """Bad input to `unilab eval`: exit 2, nothing written."""


# Sizes a CPU evaluates at when no size is given: the walk grid's commands x 4 envs for 6 s, a suite's time on two
# cores in docs/en/walk-reference.md; a GPU takes the settings' defaults. A request this many times the CPU size's
# env steps is a GPU size, and is warned of on a CPU.
CPU_WALK = {"envs_per_command": 4, "hold_s": 6.0, "window_s": 3.0}
CPU_TRACKING = {"envs_per_clip": 2}
GPU_SIZED = 4
PROGRESS_EVERY_S = 5.0


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
        raise EvalInputError(str(exc).replace("training.run.resume=", "")) from exc
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
        rows = self.walk.rollout(env, policy, self.settings, self.walk.suite_commands(suite))
        return {"per_command": rows, "overall": self.walk.overall(rows)}

    def steps(self, env) -> int:
        return int(round(self.settings.hold_s / env.dt))


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

    def steps(self, env) -> int:
        return int(env.episode_limit.max())  # after reset_to_clips: the longest clip


EVALUATIONS = {"g1_walk_flat": _WalkEval, "g1_motion_tracking": _TrackingEval}


class _Progress:
    """The env of a rollout, counting its steps: every `every_s` a line on standard error with the suite, the step,
    the time so far and the time left at the pace so far. Everything else is the env's."""

    def __init__(self, env, suite: str, steps, say, every_s: float = PROGRESS_EVERY_S, clock=time.monotonic):
        self._env, self._suite, self._steps, self._say = env, suite, steps, say
        self._every_s, self._clock = every_s, clock
        self._done = 0
        self._started = self._last = None

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, action):
        if self._started is None:
            self._started = self._last = self._clock()
            self._total = self._steps(self._env)
        out = self._env.step(action)
        self._done += 1
        now = self._clock()
        if now - self._last >= self._every_s or self._done == self._total:
            self._last = now
            took = now - self._started
            left = took / self._done * (self._total - self._done)
            self._say(f"{self._suite}: step {self._done}/{self._total} ({100 * self._done // self._total} %), "
                      f"{took:.0f} s, ETA {left:.0f} s")
        return out


def _say(text: str) -> None:
    print(f"unilab eval: {text}", file=sys.stderr, flush=True)


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
    device = device or str(config["training"]["run"]["device"])
    seed = int(config["training"]["run"]["seed"]) + 104729  # neither the training nor the play envs' seed
    report = {"schema": EVAL_SCHEMA, "run": str(Path(run).resolve()), "checkpoint": str(ckpt),
              "checkpoint_time": Path(ckpt).stat().st_mtime,  # when it was written: learning curves in wall time
              "task": config["task"]["name"], "algo": config["algo"]["name"], "device": device,
              "settings": vars(evaluation.settings), **evaluation.fields, "suites": {}}
    algo, sim = instantiate("algo", config["algo"]), instantiate("sim", config["sim"])
    for suite in suites:
        task = instantiate("task", evaluation.task_config(config["task"], suite))
        _say(f"{suite}: building {task.num_envs} envs on {device}")
        env = make_env(task, sim, device, seed, on_stage=lambda text, suite=suite: _say(f"{suite}: {text}"))
        try:
            learner, state = load_learner(algo, env, ckpt, device, seed, state=state)
        except ValueError as exc:
            raise EvalInputError(str(exc)) from exc
        report["iteration"], report["env_steps"] = int(state["iteration"]), int(state.get("env_steps", 0))
        counted = _Progress(env, suite, evaluation.steps, _say)
        report["suites"][suite] = evaluation.run(counted, functools.partial(learner.act, deterministic=True), suite)
        del env, learner
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    write_json_atomic(Path(out) if out else Path(run) / EVAL_FILE, report)
    return report


def format_table(report: dict, parts: int = 0) -> str:
    """The report as the console prints it; `parts`: motion tracking's largest body and joint errors per clip."""
    lines = [f"eval of {report['checkpoint']} (iteration {report.get('iteration')}, {report.get('env_steps', 0):,} env steps)"]
    if report.get("task") == "g1_motion_tracking":
        from .tracking import format_suite

        for suite, res in report["suites"].items():
            lines += format_suite(suite, res, parts)
        return "\n".join(lines)
    from unilab.tasks.g1_walk_flat.evaluation import format_suite as format_walk_suite

    for suite, res in report["suites"].items():
        lines += format_walk_suite(suite, res)
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="measure a run's policy (eval.json): velocity tracking over a command grid "
                                    "(walk), or every clip of the motion played from its start (motion tracking)")
    p.add_argument("run", help="run directory")
    p.add_argument("--checkpoint", help="checkpoint file (default: the run's latest)")
    p.add_argument("--suite", choices=(*SUITE_NAMES, "all"), default="all",
                   help="walk: nominal (no noise, pushes or friction draws), robust (noise, friction 0.3-1.2, "
                        "pushes up to 0.5 m/s), push (noise, friction, a 0.5-1.0 m/s push every 2 s), slow "
                        "(nominal, on 10 slow commands: 0.15-0.25 m/s, 0.3 rad/s); motion tracking: nominal, "
                        "robust; all: every suite of the task (default)")
    p.add_argument("--device", help="default: the run's training.run.device")
    p.add_argument("--envs-per-command", type=int, help="walk: envs per command of the grid (default: 32 on a GPU, "
                   f"{CPU_WALK['envs_per_command']} on the CPU)")
    p.add_argument("--hold-s", type=float, help="walk: seconds each command is held (default: 10 on a GPU, "
                   f"{CPU_WALK['hold_s']:g} on the CPU)")
    p.add_argument("--window-s", type=float, help="walk: the last seconds of the hold that are measured (default: 6 on "
                   f"a GPU, {CPU_WALK['window_s']:g} on the CPU)")
    p.add_argument("--envs-per-clip", type=int, help="motion tracking: envs playing each clip (default: 16 on a GPU, "
                   f"{CPU_TRACKING['envs_per_clip']} on the CPU)")
    p.add_argument("--motion", help="motion tracking: a clip file or directory to evaluate on "
                                    "(default: the run's task.motion_file)")
    p.add_argument("--parts", type=int, default=0, metavar="N",
                   help="motion tracking: print each clip's N largest body position and joint errors (eval.json "
                        "holds them all)")
    p.add_argument("--out", help="where to write the report (default: RUN/eval.json)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=main)


def _sized(given: dict, cpu_sizes: dict, gpu, cpu: bool, flags: str, describe) -> tuple[dict, list[str]]:
    """The sizes to use (those given, the rest the device's defaults) and the lines that say how they were chosen:
    on the CPU, which sizes it took, or a warning when the given ones are GPU-sized. `describe`: sizes -> words."""
    gpu_sizes = {key: getattr(gpu, key) for key in cpu_sizes}
    defaults = cpu_sizes if cpu else gpu_sizes
    sizes = {key: defaults[key] if value is None else value for key, value in given.items()}
    if not cpu:
        return sizes, []

    def work(values):  # env steps: envs x seconds
        return values[next(iter(cpu_sizes))] * values.get("hold_s", 1.0)

    lines = []
    if any(value is None for value in given.values()):
        lines.append(f"on the CPU: {describe(sizes)} (on a GPU: {describe(gpu_sizes)}; {flags} set them)")
    times = work(sizes) / work(cpu_sizes)
    if times >= GPU_SIZED:
        lines.append(f"warning: a GPU-sized evaluation on the CPU ({describe(sizes)}): {times:.0f}x the env steps of "
                     f"the CPU size ({describe(cpu_sizes)}), so about {times:.0f}x as long")
    return sizes, lines


def _walk_sizes(sizes: dict) -> str:
    return (f"{sizes['envs_per_command']} envs per command held {sizes['hold_s']:g} s, "
            f"the last {sizes['window_s']:g} s measured")


def _settings(args: argparse.Namespace, cpu: bool):
    """The evaluation settings of the run's task from the flags and the device, and the lines that say how they were
    sized (None when the run is no run: checked later)."""
    from unilab.rundir.run_config import load_run_config

    from .tracking import TrackingEvalSettings
    from .walk import WalkEvalSettings

    try:
        task = load_run_config(args.run)["task"]["name"]
    except (FileNotFoundError, ValueError, KeyError):
        return None, []
    if task == "g1_motion_tracking":
        if args.envs_per_clip is not None and args.envs_per_clip < 1:
            raise EvalInputError("need --envs-per-clip >= 1")
        sizes, lines = _sized({"envs_per_clip": args.envs_per_clip}, CPU_TRACKING, TrackingEvalSettings(), cpu,
                              "--envs-per-clip", lambda sizes: f"{sizes['envs_per_clip']} envs per clip")
        return TrackingEvalSettings(sizes["envs_per_clip"], args.motion), lines
    for flag, value in (("--motion", args.motion), ("--parts", args.parts or None)):
        if value is not None:
            raise EvalInputError(f"{flag} is for motion tracking runs; {args.run} trains {task}")
    given = {"envs_per_command": args.envs_per_command, "hold_s": args.hold_s, "window_s": args.window_s}
    sizes, lines = _sized(given, CPU_WALK, WalkEvalSettings(), cpu, "--envs-per-command, --hold-s, --window-s",
                          _walk_sizes)
    if sizes["envs_per_command"] < 1 or not 0 < sizes["window_s"] <= sizes["hold_s"]:
        raise EvalInputError(f"need --envs-per-command >= 1 and 0 < --window-s <= --hold-s (here "
                             f"{sizes['envs_per_command']}, {sizes['window_s']:g} and {sizes['hold_s']:g})")
    return WalkEvalSettings(**sizes), lines


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
    from unilab.runtime.play import device_here

    if args.parts < 0:
        print(f"unilab eval: --parts {args.parts}: need a count >= 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        device, note = device_here(args.device, _run_device(args.run))
        lines = [note] if note else []
        settings, sized = _settings(args, device == "cpu")
        suites = _suites(args.suite, settings)
        for line in lines + sized:
            _say(line)
        report = evaluate(args.run, checkpoint=args.checkpoint, suites=suites, device=device,
                          settings=settings, out=args.out)
    except EvalInputError as exc:
        print(f"unilab eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(report, indent=2) if args.json else format_table(report, args.parts))
    return 0


def _run_device(run: str) -> str:
    """The run's training.run.device ("cpu" when the run cannot be read: evaluate() then says why)."""
    from unilab.rundir.run_config import load_run_config

    try:
        return str(load_run_config(run)["training"]["run"]["device"])
    except (FileNotFoundError, ValueError, KeyError):
        return "cpu"
