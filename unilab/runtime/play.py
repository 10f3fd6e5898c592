"""Play: roll a trained policy out deterministically and report how its episodes went (play.json).

Runs after a completed training run when `training.outputs.no_play=false` (in its own process, so that the
launcher never initialises CUDA; the launcher supervises it like the learner and collector), or on
any run directory with `unilab play RUN`. Every env plays
its first episode, from a fresh reset, for `steps` control steps (default: until every env's first
episode has ended, at most one full episode); the report counts the envs whose episode ended early
(terminated) or at its limit.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

from unilab.config.run import RunConfig
from unilab.exit_codes import EXIT_USAGE
from unilab.rundir.layout import PLAY_FILE

AGENTS = ("policy", "zero", "random")


def play(run_dir: str | Path, config: RunConfig, device: str, *, checkpoint: str | None = None,
         num_envs: int | None = None, steps: int | None = None, out: str | Path | None = None,
         agent: str = "policy", watch=None) -> dict[str, Any]:
    """Play and write the report to `out` (default: the run's play.json, which the end-of-run play owns).
    `agent`: the run's policy (from its checkpoint), or zero / uniformly random actions in the action
    bounds [-1, 1] (sanity checks that need no checkpoint). `watch` (unilab.viz.watch) sees every state."""
    import torch

    from unilab.atomic import write_json_atomic
    from unilab.tasks import make_env
    from unilab.viz.watch import WatchClosed

    if agent not in AGENTS:
        raise ValueError(f"--agent {agent}: choose one of {', '.join(AGENTS)}")
    ckpt = state = None
    if agent == "policy":
        from unilab.rundir.checkpoint import find_checkpoint

        ckpt = find_checkpoint(str(checkpoint or run_dir))
        state = read_policy_checkpoint(ckpt)  # refused or unreadable: before the env is built
    task = dataclasses.replace(config.task, num_envs=int(num_envs)) if num_envs else config.task
    seed = config.training.run.seed + 7919  # not the training envs' seed
    env = make_env(task, config.sim, device, seed)
    n = env.num_envs
    act, iteration = _agent(agent, env, config, ckpt, state, device, seed)
    until_done = not steps  # the default: stop once every env's first episode has ended
    steps = int(steps or env.max_episode_length)

    dev = env.device
    ret = torch.zeros(n, device=dev)
    length = torch.zeros(n, device=dev)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)
    early = torch.zeros(n, dtype=torch.bool, device=dev)
    played = 0
    ok = False
    try:
        if watch is not None:
            watch.start(env)
        obs = env.reset()
        with torch.no_grad():
            if watch is not None:
                watch.frame(env)
            for _ in range(steps):
                obs, _, reward, terminated, truncated, _ = env.step(act(obs))
                active = ~finished
                ret += reward * active
                length += active.float()
                early |= terminated & active
                finished |= (terminated | truncated) & active
                played += 1
                if watch is not None:
                    watch.frame(env)
                if until_done and bool(finished.all()):
                    break
        ok = True
    except WatchClosed:
        ok = True
    finally:
        if watch is not None:
            watch.close(ok)
    report = {
        "checkpoint": None if ckpt is None else str(ckpt),
        "iteration": iteration,
        "agent": agent,
        "device": device,
        "num_envs": n,
        "steps": played,
        "max_episode_length": int(env.max_episode_length),
        "episodes_finished": int(finished.sum()),
        "terminated_fraction": float(early.float().mean()),
        "mean_return": float(ret.mean()),
        "mean_length": float(length.mean()),
    }
    write_json_atomic(Path(out) if out is not None else Path(run_dir) / PLAY_FILE, report)
    return report


def _agent(agent: str, env, config: RunConfig, ckpt, state, device: str, seed: int):
    """(observation -> action, the checkpoint's iteration or None) of the agent; `state`: the checkpoint's."""
    import functools

    import torch

    if agent == "policy":
        learner, state = load_learner(config.algo, env, ckpt, device, seed, state=state)
        return functools.partial(learner.act, deterministic=True), int(state["iteration"])
    shape = (env.num_envs, env.action_dim)
    if agent == "zero":
        zeros = torch.zeros(shape, device=env.device)
        return (lambda obs: zeros), None
    gen = torch.Generator(device=env.device)
    gen.manual_seed(seed)
    return (lambda obs: torch.rand(shape, device=env.device, generator=gen) * 2.0 - 1.0), None


def read_policy_checkpoint(checkpoint) -> dict:
    """The checkpoint's dict on the CPU, for play, eval and export. ValueError (UnsafeCheckpoint for one that
    holds more than data, nothing of it run) for a file that is no unilab checkpoint."""
    from unilab.rundir.checkpoint import UnsafeCheckpoint, load_checkpoint

    try:
        state = load_checkpoint(checkpoint, "cpu")
    except UnsafeCheckpoint:
        raise
    except Exception as exc:  # truncated, not a torch file, a directory: torch raises many kinds
        raise ValueError(f"{checkpoint}: not a readable checkpoint ({type(exc).__name__}: "
                         f"{(str(exc).strip().splitlines() or [''])[0]})") from None
    if not isinstance(state, dict) or not {"learner", "iteration"} <= state.keys():
        raise ValueError(f"{checkpoint}: not a unilab checkpoint (expected the keys learner and iteration)")
    return state


def load_learner(algo, env, checkpoint, device: str, seed: int, state: dict | None = None):
    """The learner of the typed algo config `algo` for `env`, with the checkpoint's weights; returns
    (learner, checkpoint dict). `state`: the checkpoint as read_policy_checkpoint read it (default: read here).
    A checkpoint whose shapes do not fit the config raises ValueError."""
    import dataclasses

    state = read_policy_checkpoint(checkpoint) if state is None else state
    # The replay is never sampled here: keep it one batch of envs small.
    algo = dataclasses.replace(algo, replay_capacity=env.num_envs)
    sizes = (env.obs_dim, env.critic_obs_dim, env.action_dim)
    return fitted_learner(algo, sizes, state, checkpoint, env.cfg.name, device, seed), state


def fitted_learner(algo, sizes: tuple[int, int, int], state: dict, checkpoint, task: str, device: str, seed: int):
    """The learner of the typed algo config `algo` for (obs_dim, critic_obs_dim, action_dim) `sizes`, with the
    checkpoint's learner state loaded: play, eval and export use it, and a resume checks with it before it
    touches the run directory. ValueError when the state does not fit (a network missing or of other shapes)."""
    import torch

    from unilab.algos.base import make_learner

    if getattr(algo, "symmetry", False):  # a training-time augmentation: acting needs no mirror map
        algo = dataclasses.replace(algo, symmetry=False)
    learner = make_learner(algo, *sizes, torch.device(device), seed)
    try:
        learner.load_state_dict(state["learner"])
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # what a bad dict raises
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{checkpoint}: does not fit this run's {algo.name} learner for {task} ({reason})") from exc
    return learner


def play_main(run_dir: str, config: RunConfig, device: str, out) -> None:
    """Process entry (a supervised child of the launcher): the report, or the error, goes to the `out`
    queue. It ends with the launcher (PDEATHSIG), leaves Ctrl-C to it and ends at once on SIGTERM."""
    from .messages import become_child
    from .protocol import Failed, Played

    become_child("play", out, stop_on_sigterm=False)
    try:
        out.put(Played(play(run_dir, config, device, num_envs=config.training.outputs.play_envs,
                            steps=config.training.outputs.play_steps)))
    except BaseException:
        out.put(Failed("play", traceback.format_exc()))


def describe(report: dict) -> str:
    return (f"play: {report['num_envs']} envs x {report['steps']} steps, mean return {report['mean_return']:.3f}, "
            f"mean length {report['mean_length']:.1f} (max {report['max_episode_length']}), "
            f"{100 * report['terminated_fraction']:.0f} % ended early")


def report_path(run_dir: str | Path, out: str | None) -> Path:
    """Where `unilab play` writes: `--out`, or a new play_<time>.json in the run directory (never the
    run's play.json). Raises ValueError for an `--out` that cannot take a file."""
    if out is None:
        run_dir = Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent  # RUN or RUN/run_config.json
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        for suffix in ("", *(f"_{i}" for i in range(1, 1000))):
            path = Path(run_dir) / f"play_{stamp}{suffix}.json"
            if not path.exists():
                return path
        raise ValueError(f"{run_dir}: too many play reports named play_{stamp}*.json")
    return out_file(out, "play.json")


def out_file(out: str, example: str) -> Path:
    """The file of an `--out` option; ValueError for one that is a directory or in a missing one."""
    path = Path(out).expanduser()
    if path.is_dir():
        raise ValueError(f"--out {out}: is a directory; give a file name, e.g. {path / example}")
    if not path.parent.is_dir():
        raise ValueError(f"--out {out}: {path.parent} is not a directory")
    return path


def device_here(asked: str | None, run_device: str) -> tuple[str, str | None]:
    """The device a tool (play, eval) simulates a run on, and a note when it is not the run's: a run trained on a GPU
    runs on the CPU of a host without one. A device asked for (--device) is used as given."""
    if asked or not run_device.startswith("cuda"):
        return asked or run_device, None
    import torch

    if torch.cuda.is_available():
        return run_device, None
    return "cpu", f"no GPU here: on the CPU (the run trained on {run_device}; --device sets it)"


def main(args) -> int:
    """`unilab play RUN`: in this process, on `--device` (default: the run's training.run.device)."""
    video, viewer = getattr(args, "video", None), getattr(args, "viewer", False)
    numbers = [("--envs", args.envs), ("--steps", args.steps)]
    if video is not None:
        numbers += [("--worlds", args.worlds), ("--fps", args.fps), ("--width", args.width), ("--height", args.height)]
    for flag, value in numbers:
        if value is not None and value <= 0:
            print(f"unilab play: {flag} {value}: expected a positive number", file=sys.stderr)
            return EXIT_USAGE
    try:
        _check_run_argument(args.run)
        if getattr(args, "collision", False) and video is None and not viewer:
            raise ValueError("--collision changes what --video or --viewer draws: add one of them")
        watch = _watcher(args) if video is not None or viewer else None
        from unilab.rundir.run_config import load_run_config

        values = load_run_config(args.run)  # a file that is no run directory is refused here
        agent = getattr(args, "agent", "policy")
        checkpoint = _policy_checkpoint(args.run, args.checkpoint) if agent == "policy" else args.checkpoint
        config = RunConfig.recorded(values, args.run)
        out = report_path(args.run, getattr(args, "out", None))
        device, note = device_here(args.device, config.training.run.device)
        if note:
            print(f"unilab play: {note}", file=sys.stderr)
        report = play(args.run, config, device,
                      checkpoint=checkpoint, num_envs=args.envs, steps=args.steps, out=out,
                      agent=agent, watch=watch)
    except (OSError, ValueError) as exc:
        print(f"unilab play: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as exc:
        from unilab.viz.gl import HeadlessGLUnavailable
        from unilab.viz.video import VideoExtraMissing

        if not isinstance(exc, (HeadlessGLUnavailable, VideoExtraMissing)):
            raise
        print(f"unilab play: {exc}", file=sys.stderr)  # what to install: a usage error, not a crash
        return EXIT_USAGE
    print(describe(report))
    print(json.dumps(report, indent=2))
    print(f"unilab play: report -> {out}", file=sys.stderr)
    if video is not None:
        print(f"unilab play: video -> {video}", file=sys.stderr)
    return 0


def _check_run_argument(run: str) -> None:
    """RUN is a run directory (or its run_config.json): a checkpoint or another file given for it is refused
    as what it is, with the command that plays it."""
    from unilab.rundir.checkpoint import run_dir_of
    from unilab.rundir.layout import RUN_CONFIG_FILE, is_run_dir

    path = Path(run)
    if not path.is_file() or path.name == RUN_CONFIG_FILE:
        return
    owner = run_dir_of(path)
    how = f"unilab play {owner} --checkpoint {run}" if is_run_dir(owner) else "unilab play RUN --checkpoint FILE"
    raise ValueError(f"{run}: not a run directory; pass the run directory or --checkpoint ({how})")


def _policy_checkpoint(run: str, checkpoint: str | None) -> str:
    """The checkpoint `unilab play` plays: `--checkpoint`, or the run's latest; FileNotFoundError in play's
    words (its options, not train's) when there is none."""
    from unilab.rundir.checkpoint import find_checkpoint
    from unilab.rundir.layout import CHECKPOINT_DIR

    if checkpoint is not None:
        if not Path(checkpoint).exists():
            raise FileNotFoundError(f"--checkpoint {checkpoint}: no such file")
        return checkpoint
    run_dir = Path(run) if Path(run).is_dir() else Path(run).parent  # RUN or RUN/run_config.json
    try:
        return str(find_checkpoint(str(run_dir)))
    except FileNotFoundError:
        raise FileNotFoundError(f"{run_dir}: no checkpoint in {run_dir / CHECKPOINT_DIR} yet (it is written every "
                                "algo.save_interval iterations and when the run stops); play one with --checkpoint "
                                "FILE, or try --agent zero or random, which need none") from None


def _watcher(args):
    """The --video recorder or the --viewer, checked before the env is built (nothing is written on an error)."""
    if args.video is not None and args.viewer:
        raise ValueError("--video and --viewer: choose one")
    if args.viewer:
        from unilab.viz.watch import PassiveViewer

        return PassiveViewer(collision=getattr(args, "collision", False))
    import importlib

    from unilab.viz.gl import require_gl, use_headless_gl, with_gl_hint
    from unilab.viz.video import check_video_path
    from unilab.viz.watch import VideoRecorder

    path = check_video_path(args.video)
    if path.suffix.lower() == ".mp4" and (args.width % 2 or args.height % 2):
        raise ValueError(f"--width {args.width} --height {args.height}: an mp4 needs even sides")
    recorder = VideoRecorder(path, worlds=args.worlds, fps=args.fps, width=args.width, height=args.height,
                             camera=args.camera, collision=getattr(args, "collision", False))  # the video extra
    require_gl(f"--video {args.video}")  # a usable OpenGL backend, or the package or variable that gives one
    use_headless_gl()  # before anything imports mujoco
    with_gl_hint(lambda: importlib.import_module("mujoco"))  # a missing GL library: say so before building the env
    return recorder
