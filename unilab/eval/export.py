"""`unilab export RUN [--checkpoint FILE] [--format onnx] [--out FILE]`: a run's policy as a file to deploy.

RUN is a run directory (finished or interrupted: its latest checkpoint) or a checkpoint file inside one
(the run's run_config.json is read from beside its checkpoints/ folder). The ONNX model maps `obs` to the
deterministic `action` in [-1, 1], the observation normaliser included; its metadata_props say how to
build the observation and how to turn the action into PD targets (unilab.rundir.policy.METADATA_KEYS; lists
and numbers as JSON). Bad input (not a run, no checkpoint, a checkpoint that does not fit, an unknown format) exits 2
and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from unilab.exit_codes import EXIT_FAILED, EXIT_USAGE

from .cli import EvalInputError, check_inputs, checkpoint_state

FORMATS = ("onnx",)
def policy_metadata(env, config: dict, state: dict, checkpoint: Path) -> dict[str, str]:
    from unilab.rundir.policy import metadata_props
    from unilab.tasks.common.metadata import env_description

    return metadata_props(env_description(env), task=str(config["task"]["name"]), algo=str(config["algo"]["name"]),
                          checkpoint=checkpoint.resolve().name, iteration=state["iteration"],
                          env_steps=state.get("env_steps", 0))


def export(run: str, *, checkpoint: str | None = None, fmt: str = "onnx", out: str | None = None) -> Path:
    """Write the policy; returns the file. EvalInputError for bad input (before anything is written)."""
    from unilab.registry import instantiate
    from unilab.rundir.checkpoint import run_dir_of
    from unilab.rundir.layout import RUN_CONFIG_FILE, is_run_dir
    from unilab.runtime.play import load_learner, out_file
    from unilab.tasks import make_env

    if fmt not in FORMATS:
        raise EvalInputError(f"--format {fmt}: unknown; choose from {', '.join(FORMATS)}")
    path = Path(run).expanduser()
    if path.is_file() and path.name != RUN_CONFIG_FILE and checkpoint is None:  # a lone checkpoint file
        if not is_run_dir(run_dir_of(path)):  # named as given, not by the folder above its folder
            raise EvalInputError(f"{run}: not a run directory, nor a checkpoint in one's checkpoints/; pass the run "
                                 f"directory it came from with --checkpoint (unilab export RUN --checkpoint {run})")
        checkpoint, run = str(path), str(run_dir_of(path))
    try:
        out_path = None if out is None else out_file(out, "policy.onnx")
    except ValueError as exc:
        raise EvalInputError(str(exc)) from exc
    config, ckpt = check_inputs(run, checkpoint, tasks=None)
    state = checkpoint_state(ckpt)
    seed = int(config["training"]["run"]["seed"])
    task = instantiate("task", {**config["task"], "num_envs": 1})
    env = make_env(task, instantiate("sim", config["sim"]), "cpu", seed)
    try:
        learner, state = load_learner(instantiate("algo", config["algo"]), env, ckpt, "cpu", seed, state=state)
    except ValueError as exc:
        raise EvalInputError(str(exc)) from exc
    run_dir = path.parent if path.is_file() and path.name == RUN_CONFIG_FILE else Path(run)
    out_path = out_path or run_dir / f"policy_iter_{int(state['iteration']):07d}.{fmt}"
    learner.export_onnx(str(out_path), policy_metadata(env, config, state, ckpt))
    return out_path


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write a run's policy as ONNX with its deployment metadata "
                       "(joints, default pose, action spans, gains, observation layout, dt)")
    p.add_argument("run", help="run directory, or a checkpoint file in one")
    p.add_argument("--checkpoint", help="checkpoint file (default: the run's latest)")
    p.add_argument("--format", default="onnx", help=f"one of: {', '.join(FORMATS)} (default: onnx)")
    p.add_argument("--out", help="output file (default: RUN/policy_iter_<iteration>.onnx)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        out = export(args.run, checkpoint=args.checkpoint, fmt=args.format, out=args.out)
    except EvalInputError as exc:
        print(f"unilab export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as exc:  # a missing onnx package
        print(f"unilab export: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"unilab export: wrote {out}")
    return 0
