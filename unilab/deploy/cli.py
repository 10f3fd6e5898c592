"""`unilab sim2sim RUN|policy.onnx`: an exported policy in plain MuJoCo on the CPU, from the ONNX file and its
metadata alone (numpy, onnxruntime, mujoco: no torch, no warp), measured as `unilab eval` measures it.

Walk policies hold eval's command grid (`--commands slow`: its slow suite's; `--command vx,vy,wz`: one), optionally
pushed; motion tracking policies play `--clip`. `--model mjlab` runs them on mjlab's G1 MJCF instead of the G1 they
were trained on. Bad input (a missing file, an ONNX without unilab metadata, a wrong task, a bad command) exits 2
before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from unilab.exit_codes import EXIT_USAGE

TASKS = ("g1_walk_flat", "g1_motion_tracking")
# The walk's measured window: eval's 6 s of a 10 s hold; a shorter --hold-s keeps its last 60 %.
WINDOW_S = 6.0
WINDOW_SHARE = 0.6


def parse_command(text: str) -> tuple[float, float, float]:
    """'vx,vy,wz' -> floats; DeployError naming what is wrong."""
    from .policy import DeployError

    parts = text.split(",")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or not all(abs(v) < 10.0 for v in values):
        raise DeployError(f"--command {text}: give vx,vy,wz (m/s, m/s, rad/s), e.g. --command 0.5,0,0")
    return values  # type: ignore[return-value]


def _check_args(args: argparse.Namespace) -> None:
    from .policy import DeployError

    if args.window_s is None:
        args.window_s = min(WINDOW_S, WINDOW_SHARE * args.hold_s)
    if not 0 < args.window_s <= args.hold_s or args.envs_per_command < 1:
        raise DeployError("need 0 < --window-s <= --hold-s and --envs-per-command >= 1")
    if args.command and args.commands != "nominal":
        raise DeployError(f"--command {args.command} and --commands {args.commands}: give one of the two")
    if args.push_vel < 0 or args.push_interval <= 0:
        raise DeployError("need --push-vel >= 0 (m/s) and --push-interval > 0 (s)")
    if args.video:
        from .video import check_fps, parse_size

        folder = os.path.dirname(os.path.abspath(args.video))
        if not os.path.isdir(folder):
            raise DeployError(f"--video {args.video}: {folder} is not a directory")
        parse_size(args.size)
        if args.fps is not None:
            check_fps(args.fps)


def run(args: argparse.Namespace, say=print) -> dict:
    """Load, build, roll out; returns the report (the table's rows). DeployError for bad input."""
    from unilab.sim.headless import mujoco  # after video.prepare() chose a GL backend

    from . import model as models
    from .policy import DeployError, OnnxPolicy

    _check_args(args)
    command = parse_command(args.command) if args.command else None
    policy = OnnxPolicy(args.policy, tasks=TASKS)
    meta = policy.meta
    if meta["task"] == "g1_motion_tracking" and not args.clip:
        raise DeployError(f"{policy.path} tracks motions: give the clip to play with --clip clip.npz")
    if meta["task"] == "g1_walk_flat" and args.clip:
        raise DeployError(f"--clip is for motion tracking policies; {policy.path} walks")
    if args.clip:
        from .tracking import load_clip

        load_clip(args.clip, meta)  # a bad clip is refused before anything is written
    model, notes = models.build_model(meta, args.model)
    say(f"sim2sim of {policy.path} ({meta['task']}, {meta['algo']}, iteration {meta['iteration']}, schema "
        f"{meta['schema']}) on MuJoCo {mujoco.__version__}, CPU")
    for line in policy.notes + notes:
        say(line)
    if args.model == "mjlab":
        ours, _ = models.build_model(meta, "ours")
        for line in models.compare(ours, model):
            say(line)
    writer = None
    if args.video:
        from .video import VideoWriter, parse_size, steps_per_frame

        width, height = parse_size(args.size)
        every = 1 if args.fps is None else steps_per_frame(meta["control_dt"], args.fps)
        writer = VideoWriter(model, args.video, fps=1.0 / meta["control_dt"], width=width, height=height, every=every)
    try:
        report = _rollout(args, policy, model, command, writer)
    finally:
        if writer is not None:
            writer.close()
            say(f"wrote {args.video}")
    report.update({"policy": str(policy.path), "task": meta["task"], "model": args.model})
    return report


def _rollout(args, policy, model, command, writer) -> dict:
    from .walk import WalkSettings, rollout

    on_frame = writer.frame if writer is not None else None
    progress = (lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    if policy.meta["task"] == "g1_motion_tracking":
        from .tracking import play_clip

        rows = play_clip(model, policy, args.clip, on_frame=on_frame, progress=progress)
        return {"suite": "nominal", "per_clip": rows}
    from unilab.tasks.g1_walk_flat.evaluation import suite_commands

    commands = [command] if command else list(suite_commands(args.commands))
    settings = WalkSettings(args.hold_s, args.window_s, args.envs_per_command, args.push_vel, args.push_interval,
                            args.seed)
    rows = rollout(model, policy, commands, settings, on_floor=args.model != "ours", on_frame=on_frame,
                   progress=progress)
    suite = f"pushed {args.push_vel:g} m/s every {args.push_interval:g} s" if args.push_vel > 0 else "nominal"
    if args.commands == "slow" and not command:
        suite = "slow" if args.push_vel == 0 else f"slow, {suite}"
    return {"suite": suite, "per_command": rows}


def format_report(report: dict) -> str:
    if "per_clip" in report:
        from unilab.tasks.g1_motion_tracking.evaluation import format_suite, overall

        return "\n".join(format_suite(report["suite"], {"per_clip": report["per_clip"],
                                                        "overall": overall(report["per_clip"])}))
    from unilab.tasks.g1_walk_flat.evaluation import format_suite, overall

    return "\n".join(format_suite(report["suite"], {"per_command": report["per_command"],
                                                    "overall": overall(report["per_command"])}))


def add_parser(sub) -> None:
    p = sub.add_parser("sim2sim", help="run an exported policy in plain MuJoCo on the CPU (onnxruntime, no torch) "
                                       "and measure it as unilab eval does; --model mjlab: on mjlab's G1 MJCF")
    p.add_argument("policy", help="a run directory (its policy.onnx, else its newest policy_iter_*.onnx) or an "
                                  ".onnx file")
    p.add_argument("--model", choices=("ours", "mjlab"), default="ours",
                   help="ours: the G1 it was trained on (default); mjlab: mjlab 1.6.0's G1 MJCF with the policy's "
                        "actuators and armature by joint name (fetched once into the cache)")
    p.add_argument("--command", metavar="VX,VY,WZ", help="walk: hold this one command instead of eval's grid")
    p.add_argument("--commands", choices=("nominal", "slow"), default="nominal",
                   help="walk: which of eval's command lists to hold: its grid (nominal, the default) or its slow "
                        "suite's commands (slow)")
    p.add_argument("--hold-s", type=float, default=10.0, help="walk: seconds each command is held (default 10)")
    p.add_argument("--window-s", type=float, help="walk: the last seconds measured (default 6, or 60 %% of a "
                   "shorter hold: 2.4 of --hold-s 4)")
    p.add_argument("--envs-per-command", type=int, default=1,
                   help="walk: rollouts per command (default 1; they differ only in their pushes)")
    p.add_argument("--push-vel", type=float, default=0.0, metavar="M_S",
                   help="walk: push the pelvis by this many m/s in a random horizontal direction (default 0: none)")
    p.add_argument("--push-interval", type=float, default=3.0, metavar="S", help="walk: seconds between pushes "
                                                                               "(default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the push directions (default 0)")
    p.add_argument("--clip", help="motion tracking: the clip (.npz) to play from its first frame")
    p.add_argument("--video", metavar="FILE", help="write the rollout to FILE (.mp4 or .gif); needs imageio (pip "
                                                   "install 'unilab[video]')")
    p.add_argument("--size", default="640x480", metavar="WxH", help="video frame size (default 640x480)")
    p.add_argument("--fps", type=float, metavar="FPS",
                   help="video frames per second, played in real time (default: every policy step)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from .policy import DeployError

    if args.video:
        from .video import prepare

        try:
            _check_args(args)  # a bad path is refused before OpenGL is looked at
            prepare()  # before mujoco is imported: the GL backend is chosen once
        except DeployError as exc:
            print(f"unilab sim2sim: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        report = run(args, say=lambda line: print(line, file=sys.stderr if args.json else sys.stdout))
    except DeployError as exc:
        print(f"unilab sim2sim: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
