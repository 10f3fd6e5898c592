"""The launcher's console: its own phase lines, the children's (`Phase`), and the progress line (`Progress`),
printed from one process so that their order is the order they happened in."""

from __future__ import annotations

import sys
import time
from collections import deque
from contextlib import contextmanager

from unilab.runtime.child_log import HangUpSafe
from unilab.runtime.protocol import Phase, Progress

RATE_WINDOW_S = 60.0  # the ETA follows the iteration rate of about the last minute


def clock_text(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def count_text(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


@contextmanager
def console_may_hang_up():
    """The launcher's stdout and stderr for a run: a terminal that goes away mid-run (a closed ssh connection, then
    SIGHUP) makes the writes after it fail; they are dropped (HangUpSafe) so the run still stops, saves and
    writes its summary."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = HangUpSafe(sys.stdout), HangUpSafe(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class Console:
    def __init__(self, world_size: int = 1, stream=None, clock=time.monotonic):
        self.world_size = world_size
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self._points: dict[int, deque] = {}  # rank -> (time, iterations done), the rate window

    def rank_prefix(self, rank: int | None) -> str:
        return f"[rank {rank}] " if self.world_size > 1 and rank is not None else ""

    def print(self, text: str, rank: int | None = None) -> None:
        print(f"unilab: {self.rank_prefix(rank)}{text}", file=self.stream or sys.stderr, flush=True)

    def show(self, msg) -> None:
        if isinstance(msg, Phase):
            self.print(msg.text, rank_of(msg.name))
        elif isinstance(msg, Progress):
            self.print(self.progress_text(msg), msg.rank)

    def eta_s(self, rank: int, done: int, total: int) -> float | None:
        """Seconds left at the iteration rate of the last RATE_WINDOW_S (None until two points exist)."""
        now = self.clock()
        points = self._points.setdefault(rank, deque())
        points.append((now, done))
        while len(points) > 2 and now - points[1][0] >= RATE_WINDOW_S:
            points.popleft()
        (t0, i0), (t1, i1) = points[0], points[-1]
        if i1 <= i0 or t1 <= t0:
            return None
        return (total - done) * (t1 - t0) / (i1 - i0)

    def progress_text(self, p: Progress) -> str:
        eta = self.eta_s(p.rank, p.iterations_done, p.max_iterations)
        sps = "- env-steps/s" if p.env_steps_per_s is None else f"{count_text(p.env_steps_per_s)} env-steps/s"
        if p.episodes:
            episodes = (f"return {p.episode_return:.2f}, length {p.episode_length:.0f} steps "
                        f"(last {p.episodes} episodes)")
        else:
            episodes = "return, length (none yet)"
        return (f"[it {p.iterations_done}/{p.max_iterations}] {clock_text(self.clock() - self.started)} elapsed, "
                f"ETA {'-' if eta is None else clock_text(eta)} | {count_text(p.env_steps)} env steps, {sps} | "
                f"{episodes} | replay {count_text(p.replay_size)}")


# Set by `unilab warmup`, whose run is removed after it: no commands for a run that will not be there.
NO_NEXT_STEPS_ENV = "UNILAB_NO_NEXT_STEPS"
# What a CPU run is not, per task: its policy is a check that training runs, not a skill.
SKILL = {"g1_walk_flat": ("walk", "walk.mp4"), "g1_motion_tracking": ("track its motion", "tracking.mp4")}


def after_a_cpu_run(run_dir: str, algo: str, task: str, iterations: int, num_envs: int) -> list[str]:
    """The last console lines of a CPU run: what it was, and the commands that come next (the GPU recipe last)."""
    skill, video = SKILL.get(task, ("do its task", "play.mp4"))
    run = run_dir if " " not in run_dir else f"'{run_dir}'"
    steps = [(f"unilab play {run} --video {video}", "watch it (world 0, as a video file)"),
             (f"unilab eval {run}", "measure it (eval.json)"),
             (f"unilab export {run}", "the policy as ONNX, with its deployment metadata"),
             (f"unilab sim2sim {run}", "the policy in plain MuJoCo"),
             ("unilab demo", "a trained policy, shipped with unilab"),
             (f"train --algo {algo} --task {task} +execution=mps", "on a GPU host: the full-size run")]
    width = max(len(cmd) for cmd, _ in steps)
    return [f"this was a tiny CPU smoke run ({iterations} iterations of {num_envs} envs): it shows that training "
            f"runs here; its policy is not expected to {skill}. Next:",
            *(f"  {cmd:<{width}}  {what}" for cmd, what in steps)]


def rank_of(name: str) -> int | None:
    """The rank in a child's name (`learner[1]` -> 1); None for a name without one."""
    _, _, rank = name.partition("[")
    try:
        return int(rank.rstrip("]"))
    except ValueError:
        return None
