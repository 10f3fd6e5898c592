"""`unilab demo`: the walking policy that ships with unilab (unilab/assets/policies), in plain MuJoCo on the CPU:
a short tour of commands (stand, walk, turn, side-step, back, stand) drawn with the G1's meshes into a video file,
and in MuJoCo's viewer where a display exists. Nothing is trained and no GPU is needed; the policy's own record
(the .json beside it) says how it was trained and measured."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .policy import DeployError
from .video import check_fps, parse_size, steps_per_frame

POLICY_NAME = "g1_walk_flat_fastsac"


@dataclass(frozen=True)
class Leg:
    label: str
    command: tuple[float, float, float]  # vx, vy m/s (base frame), wz rad/s
    seconds: float


TOUR: tuple[Leg, ...] = (
    Leg("stand still", (0.0, 0.0, 0.0), 2.0),
    Leg("walk forward at 0.5 m/s", (0.5, 0.0, 0.0), 3.0),
    Leg("walk forward at 1.0 m/s", (1.0, 0.0, 0.0), 3.0),
    Leg("walk and turn left", (0.5, 0.0, 0.8), 3.0),
    Leg("side-step left", (0.0, 0.4, 0.0), 3.0),
    Leg("walk backward", (-0.5, 0.0, 0.0), 3.0),
    Leg("stand still", (0.0, 0.0, 0.0), 2.0),
)


def tour_seconds(tour: tuple[Leg, ...] = TOUR) -> float:
    return sum(leg.seconds for leg in tour)


def scaled_tour(seconds: float | None) -> tuple[Leg, ...]:
    """The tour with every leg scaled so that it lasts `seconds` (None: as it is)."""
    if seconds is None:
        return TOUR
    if not 1.0 <= seconds <= 600.0:
        raise DeployError(f"--seconds {seconds:g}: between 1 and 600")
    k = seconds / tour_seconds()
    return tuple(Leg(leg.label, leg.command, leg.seconds * k) for leg in TOUR)


def shipped_policy() -> Path:
    return Path(str(resources.files("unilab.assets") / "policies" / f"{POLICY_NAME}.onnx"))


def shipped_record() -> dict:
    return json.loads(shipped_policy().with_suffix(".json").read_text())


@dataclass
class TourLog:
    steps: int = 0
    falls: int = 0
    distance_m: float = 0.0  # pelvis path length in the ground plane
    legs: list[dict] = field(default_factory=list)


def walk_tour(model, policy, tour: tuple[Leg, ...] | None = None, *, on_frame: Optional[Callable] = None,
              say: Callable[[str], None] = print) -> TourLog:
    """Roll the policy through the tour's commands in one continuous episode (a fall restarts it from the start
    state); `on_frame(data)` after every policy step."""
    from unilab.sim.headless import mujoco

    from .model import decimation
    from .observe import Robot, WalkInputs, action_targets, walk_observation
    from .walk import fell, start_state

    meta = policy.meta
    if meta["task"] != "g1_walk_flat":
        raise DeployError(f"the demo walks: {meta['task']} is not a walk policy")
    robot = Robot(model, meta["joint_names"])
    data = mujoco.MjData(model)
    start = start_state(meta, model, robot)
    data.qpos[:] = start
    mujoco.mj_forward(model, data)
    substeps = decimation(meta, model)
    inputs = WalkInputs(np.zeros(3), 0, np.zeros(len(meta["joint_names"])))
    log = TourLog()
    for leg in tour or TOUR:
        say(f"  {leg.label} (command {leg.command[0]:+.1f} m/s, {leg.command[1]:+.1f} m/s, {leg.command[2]:+.1f} rad/s)")
        inputs.command = np.asarray(leg.command, dtype=np.float64)
        falls_before, xy = log.falls, data.qpos[robot.root_q:robot.root_q + 2].copy()
        for _ in range(int(round(leg.seconds / meta["control_dt"]))):
            action = np.clip(policy(walk_observation(meta, robot, data, inputs)), -1.0, 1.0)
            data.ctrl[robot.actuators] = action_targets(meta, action)
            for _ in range(substeps):
                mujoco.mj_step(model, data)
            inputs.steps, inputs.last_action = inputs.steps + 1, action
            log.steps += 1
            now = data.qpos[robot.root_q:robot.root_q + 2].copy()
            log.distance_m += float(np.linalg.norm(now - xy))
            xy = now
            if on_frame is not None:
                on_frame(data)
            if fell(meta, robot, data):
                log.falls += 1
                data.qpos[:], data.qvel[:] = start, 0.0
                mujoco.mj_forward(model, data)
                inputs.steps, inputs.last_action = 0, np.zeros_like(inputs.last_action)
                xy = data.qpos[robot.root_q:robot.root_q + 2].copy()
        log.legs.append({"leg": leg.label, "command": list(leg.command), "falls": log.falls - falls_before})
    return log


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="watch the walking G1 policy that ships with unilab, on the CPU (plain MuJoCo, "
                                    "no GPU): a video file, and the viewer where a display exists")
    p.add_argument("--video", default="demo.mp4", metavar="FILE",
                   help="the video to write (.mp4, or .gif; default demo.mp4; '' for none)")
    p.add_argument("--no-viewer", action="store_true", help="do not open MuJoCo's viewer even where a display exists")
    p.add_argument("--collision", action="store_true", help="draw the collision geoms instead of the meshes")
    p.add_argument("--size", default="480x360", metavar="WxH", help="video frame size (default 480x360)")
    p.add_argument("--seconds", type=float, metavar="S",
                   help=f"length of the tour, its legs shortened or lengthened alike (default {tour_seconds():g})")
    p.add_argument("--fps", type=float, default=20.0, help="video frames per second (default 20; it plays in real time)")
    p.set_defaults(func=main)


def main(args) -> int:
    import sys

    from unilab.exit_codes import EXIT_USAGE
    from unilab.viz.gl import has_display, viewer_problem

    def fail(message: str) -> int:
        print(f"unilab demo: {message}", file=sys.stderr)
        return EXIT_USAGE

    try:
        size = parse_size(args.size)
        tour = scaled_tour(args.seconds)
        check_fps(args.fps)
        if args.video:
            from .video import prepare

            prepare()  # imageio and an offscreen OpenGL, before mujoco is imported
        viewer = not args.no_viewer and has_display() and viewer_problem() is None
        if not args.video and not viewer:
            raise DeployError("nothing to show: no display for the viewer here, and --video ''")
        return _show(args, size, viewer, tour)
    except DeployError as exc:
        return fail(str(exc))


def _show(args, size: tuple[int, int], viewer: bool, tour: tuple[Leg, ...]) -> int:
    from unilab.viz.watch import WatchClosed

    from . import model as models
    from .policy import OnnxPolicy

    record = shipped_record()
    policy = OnnxPolicy(shipped_policy(), tasks=("g1_walk_flat",))
    model, _ = models.build_model(policy.meta, "ours")
    print(f"unilab demo: the {record['algo']} walk policy shipped with unilab (trained {record.get('date', '?')}; "
          f"{record['trained_with']}), in plain MuJoCo on the CPU")
    on_frame, closers = [], []
    writer = None
    if args.video:
        from .video import VideoWriter

        every = steps_per_frame(policy.meta["control_dt"], args.fps)
        writer = VideoWriter(model, args.video, fps=1.0 / policy.meta["control_dt"], width=size[0], height=size[1],
                             every=every, collision=args.collision)
        on_frame.append(writer.frame)
    if viewer:
        on_frame.append(_viewer_frame(model, policy.meta["control_dt"], args.collision, closers))
    ok = False
    try:
        log = walk_tour(model, policy, tour, on_frame=lambda data: [f(data) for f in on_frame])
        ok = True
    except WatchClosed:
        print("unilab demo: the viewer was closed")
        ok, log = True, None
    finally:
        if writer is not None:
            writer.close(ok)
        for close in closers:
            close()
    if log is None:
        return 0
    print(f"unilab demo: {log.steps * policy.meta['control_dt']:.0f} s walked, {log.distance_m:.1f} m, "
          f"{log.falls} falls" + (f"; wrote {args.video}" if writer is not None else ""))
    print("Next: `unilab sim2sim " + str(shipped_policy()) + "` measures it (add --model mjlab for mjlab's G1); "
          "docs/en/deploy.md says how to run it outside unilab.")
    return 0


def _viewer_frame(model, control_dt: float, collision: bool, closers: list) -> Callable:
    """MuJoCo's viewer on the dressed model, paced to real time; closing its window ends the tour."""
    from unilab.assets import look
    from unilab.viz.watch import ModelViewer

    shown = look.render_model(model, collision=collision)
    viewer = ModelViewer(shown, control_dt, look.scene_option(shown, collision=collision).geomgroup)
    closers.append(viewer.close)
    return lambda data: viewer.frame(data.qpos)
