"""Ranges and checks the task config schemas share (plain Python, like the schemas: no torch, warp or mujoco).
unilab/checks.py says why every number has an upper bound."""

from __future__ import annotations

from typing import Any

from unilab.checks import fields_in, ordered_pair, require

MAX_EPISODE_S = 86_400.0  # a day of control: the step counters stay far inside int64
MAX_SPEED = 10.0  # m/s and rad/s: commands, pushes and reset velocities well past what the G1 can do
MAX_REWARD_WEIGHT = 1e6  # per second; a float32 reward summed over envs and steps stays finite
MAX_STD = 100.0  # widths of the reward kernels, in their terms' units
MAX_HEIGHT = 10.0  # m
MAX_FRICTION = 10.0


def check_reward_weights(weights: Any) -> None:
    fields_in("task.rewards.weights", weights, -MAX_REWARD_WEIGHT, MAX_REWARD_WEIGHT, "per second")


def check_range_pairs(prefix: str, rnd: Any) -> None:
    """friction_range and push_interval_s: null (off) or [low, high] with 0 < low."""
    for name, high in (("friction_range", MAX_FRICTION), ("push_interval_s", MAX_EPISODE_S)):
        if getattr(rnd, name) is not None:
            ordered_pair(f"{prefix}.{name}", getattr(rnd, name), 0, high, low_open=True)


def check_control_steps(key: str, seconds: float, control_dt: float, steps: int = 1) -> None:
    """`seconds` (an episode's length) lasts at least `steps` control steps of `control_dt`."""
    require(seconds >= steps * control_dt - 1e-9, key, seconds,
            f"at least {steps} control step(s) of sim.timestep x sim.decimation = {control_dt:g} s")
