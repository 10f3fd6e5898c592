"""Training-time clips (`training.outputs.video_interval`): every N iterations the collector records world 0 for
CLIP_S seconds, and a separate process renders the clip to `videos/iter_<N>.mp4` in the run directory.

Why this shape: the collector's loop is the hot path. Per tick it only copies world 0's qpos (~36
floats) into a preallocated device buffer (an asynchronous device-to-device copy: no host sync, nothing
inside the env's captured graphs). When the clip is full, one non-blocking copy moves it to pinned host
memory behind a CUDA event; later ticks poll that event (`query`, which never waits) and, once it has
completed, save the positions next to the model (`videos/model.mjb`) and start `python -m
unilab.viz.clip` on them, which also adds a strip of frames to the run's TensorBoard (images, since
TensorBoard's video summaries need moviepy). Rendering and encoding therefore take neither the collector's nor the
learner's interpreter lock, and OpenGL never enters a training process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from unilab.processes import end_child

CLIP_S = 5.0
VIDEO_DIR = "videos"
MODEL_FILE = "model.mjb"
RENDER_LOG = "render.log"
STRIP_FRAMES = 6  # frames of a clip in its TensorBoard image
# At the collector's exit its renders get this long to finish; it must stay well inside the launcher's
# stop grace. Renders still running are stopped, and the launcher renders their clips (render_leftovers).
EXIT_WAIT_S = 2.0
LEFTOVER_TIMEOUT_S = 300.0  # per clip the launcher renders after the run


def clip_ticks(control_dt: float) -> int:
    """Env steps a clip records."""
    return max(2, round(CLIP_S / control_dt))


def no_clip_note(interval: int, start_iteration: int, max_iterations: int, steps_per_iteration: int,
                 control_dt: float) -> str | None:
    """Why a run with this `training.outputs.video_interval` writes no clip, or None when it writes one. The first clip
    starts at the first multiple of `interval` from `start_iteration` and needs `clip_ticks` env steps (the
    collector's ticks, `steps_per_iteration` an iteration) before the run's last iteration ends."""
    ticks = clip_ticks(control_dt)
    first = -(-start_iteration // interval) * interval
    iterations = -(-ticks // steps_per_iteration)
    if first + iterations <= max_iterations:
        return None
    return (f"training.outputs.video_interval={interval} writes no clip in this run: a clip records {CLIP_S:g} s of world 0 "
            f"({ticks} env steps, {iterations} iterations of {steps_per_iteration}) from iteration {first}, and the "
            f"run ends at iteration {max_iterations}; a run of at least {first + iterations} iterations "
            "(algo.max_iterations) writes one")


def render_command(clip: str | Path) -> list[str]:
    return [sys.executable, "-m", "unilab.viz.clip", str(clip)]


def _start_render(clip: Path) -> subprocess.Popen:
    with open(clip.parent / RENDER_LOG, "a") as log:
        return subprocess.Popen(render_command(clip), stdin=subprocess.DEVNULL, stdout=log, stderr=log)


class ClipRecorder:
    """World 0's positions over CLIP_S seconds, every `interval` iterations, handed to a render process."""

    def __init__(self, env, interval: int, run_dir: str | Path):
        import torch

        from unilab.sim.headless import mujoco

        from .video import require_imageio

        require_imageio()  # a run asking for videos without the extra fails at startup, not at the first clip
        self.torch = torch
        self.env = env
        self.interval = int(interval)
        self.dir = Path(run_dir) / VIDEO_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        mujoco.mj_saveModel(env.mj_model, str(self.dir / MODEL_FILE), None)
        ticks = clip_ticks(env.dt)
        nq = env.qpos.shape[1]
        self.buf = torch.zeros(ticks, nq, device=env.device)
        cuda = env.device.type == "cuda"
        self.host = torch.zeros(ticks, nq, pin_memory=cuda)
        self.event = torch.cuda.Event() if cuda else None
        self.row = None  # the next row while recording
        self.started = None  # iteration at the start of the clip being recorded or copied
        self.pending = False  # a full clip on its way to the host
        self.renders: list[subprocess.Popen] = []

    def tick(self, iteration: int) -> None:
        """After each env step; `iteration` is the learner iteration this tick belongs to."""
        if self.pending and (self.event is None or self.event.query()):
            self._hand_over()
        if self.row is None:
            if self.pending or iteration % self.interval or iteration == self.started:
                return
            self.row, self.started = 0, iteration
        self.buf[self.row].copy_(self.env.qpos[0])
        self.row += 1
        if self.row == len(self.buf):
            self.host.copy_(self.buf, non_blocking=True)
            if self.event is not None:
                self.event.record()
            self.row, self.pending = None, True

    def _hand_over(self) -> None:
        self.renders = [p for p in self.renders if p.poll() is None]  # reap finished renders
        self.renders.append(_start_render(self._save()))

    def _save(self) -> Path:
        """The full clip on the host, as the npz a render reads."""
        import numpy as np

        self.pending = False
        clip = self.dir / f"iter_{self.started:07d}.npz"
        np.savez(clip, qpos=self.host.numpy().astype(np.float64), dt=float(self.env.dt), iteration=self.started)
        return clip

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """At the collector's exit: a full clip still on its way to the host is saved, the renders get
        `wait_s` in all to finish and the others are stopped. No process of this recorder outlives it;
        the clips left as npz are rendered by the launcher (render_leftovers)."""
        deadline = time.monotonic() + wait_s
        try:
            if self.pending:
                if self.event is not None:
                    self.event.synchronize()
                self._save()
        finally:
            for proc in self.renders:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    end_child(proc, grace_s=2.0)
            self.renders = []


def render_leftovers(run_dir: str | Path, interrupted: Callable[[], bool] = lambda: False,
                     say: Callable[[str], None] = print, timeout_s: float = LEFTOVER_TIMEOUT_S) -> list[Path]:
    """Render, one at a time in a child process, the clips a run left as npz (their render was stopped at
    the collector's exit). A clip whose render fails, times out or is interrupted stays, and `say` names
    the command that renders it. Returns the videos written."""
    clips = []
    for clip in sorted((Path(run_dir) / VIDEO_DIR).glob("iter_*.npz")):
        if clip.with_suffix(".mp4").exists():  # rendered; its render was stopped before it removed the npz
            clip.unlink()
        else:
            clips.append(clip)
    if clips:
        say(f"rendering {len(clips)} training clip(s) the run left in {clips[0].parent}")
    written = []
    for i, clip in enumerate(clips):
        if not interrupted():
            proc = _start_render(clip)
            deadline = time.monotonic() + timeout_s
            while proc.poll() is None and time.monotonic() < deadline and not interrupted():
                time.sleep(0.1)
            if proc.poll() is None:
                end_child(proc, grace_s=2.0)
            if proc.returncode == 0 and clip.with_suffix(".mp4").exists():
                written.append(clip.with_suffix(".mp4"))
                continue
        say(f"{len(clips) - i} training clip(s) not rendered (see {clip.parent / RENDER_LOG}); render one with: "
            + " ".join(render_command(clip)))
        break
    return written


def render_clip(clip: str | Path, *, width: int = 480, height: int = 360, collision: bool = False) -> Path:
    """Render a saved clip (qpos, dt) with the model saved beside it into an mp4 of the same name, in the G1's
    look (its collision geoms with `collision`); the clip file is removed once the video is written."""
    import mujoco
    import numpy as np

    from .render import FrameRenderer
    from .video import VideoWriter
    from .watch import root_body

    clip = Path(clip)
    data = np.load(clip)
    model = mujoco.MjModel.from_binary_path(str(clip.parent / MODEL_FILE))
    out = clip.with_suffix(".mp4")
    renderer = FrameRenderer(model, width=width, height=height, camera="track", root_body=root_body(model),
                             collision=collision)
    writer = VideoWriter(out.with_name(out.stem + ".part.mp4"), 1.0 / float(data["dt"]))
    qpos = data["qpos"]
    strip_at = set(np.linspace(0, len(qpos) - 1, STRIP_FRAMES).round().astype(int).tolist())
    strip = []
    ok = False
    try:
        for i, q in enumerate(qpos):
            frame = renderer.frame(q[None])
            writer.append(frame)
            if i in strip_at:
                strip.append(frame[::2, ::2])  # half size: the strip stays small in the event file
        ok = True
    finally:
        writer.close(ok)
        renderer.close()
    writer.path.replace(out)  # a finished file appears at once: never a half-written iter_<N>.mp4
    _to_tensorboard(clip.parent.parent, int(data["iteration"]), np.concatenate(strip, axis=1))
    clip.unlink()
    return out


def _to_tensorboard(run_dir: Path, iteration: int, strip) -> None:
    """The strip as an image at `iteration` in the run's TensorBoard, when the run writes one."""
    from unilab.rundir.layout import TENSORBOARD_DIR

    tb = run_dir / TENSORBOARD_DIR
    if not tb.is_dir():
        return  # training.outputs.logger without tensorboard
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tb), filename_suffix=".clips") as w:
        w.add_image("clip/world0", strip, iteration, dataformats="HWC")


def main(argv: list[str] | None = None) -> None:
    import argparse

    from .gl import use_headless_gl

    parser = argparse.ArgumentParser(prog="python -m unilab.viz.clip", description="render a training clip")
    parser.add_argument("clip", help="videos/iter_<N>.npz of a run")
    parser.add_argument("--collision", action="store_true", help="draw the collision geoms, not the G1's meshes")
    args = parser.parse_args(argv)
    use_headless_gl()
    print(f"unilab: clip -> {render_clip(args.clip, collision=args.collision)}", flush=True)


if __name__ == "__main__":
    main()
