"""Velocity tracking of a walk policy over a fixed command grid.

Every command of the grid is held by its own block of envs for `hold_s`; the body-frame velocity
is averaged over the last `window_s` of that hold (steady state, gait sway averaged out). An env
that falls is counted in the fall fraction and left out of the velocity errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unilab.tasks.g1_walk_flat.evaluation import (  # noqa: F401 (eval's names)
    COMMAND_GRID, SLOW_GRID, SUITES, is_combined, overall, suite_commands)


@dataclass
class WalkEvalSettings:
    envs_per_command: int = 32
    hold_s: float = 10.0
    window_s: float = 6.0


def task_overrides(suite: str, settings: WalkEvalSettings) -> dict:
    """What the suite changes in the run's task config (episodes outlast the hold, all start together)."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    over = {k: dict(v) for k, v in SUITES[suite].items()}
    over["randomization"]["stagger_first_episode"] = False
    over["episode_length_s"] = settings.hold_s + 1.0
    over["num_envs"] = settings.envs_per_command * len(suite_commands(suite))
    return over


def pd_torque_share(env) -> torch.Tensor:
    """(N,) mean over joints of |actuator torque| / torque limit, from the PD law of the actuators."""
    m = env.mj_model
    dev = env.device
    kp = torch.as_tensor(m.actuator_gainprm[:, 0], dtype=torch.float32, device=dev)
    kd = -torch.as_tensor(m.actuator_biasprm[:, 2], dtype=torch.float32, device=dev)
    limit = torch.as_tensor(m.actuator_forcerange[:, 1], dtype=torch.float32, device=dev)
    tau = kp * (env.backend.ctrl - env.joint_pos) - kd * env.joint_vel
    return (tau.abs().clamp(max=limit) / limit).mean(dim=1)


def rollout(env, policy, settings: WalkEvalSettings, commands=COMMAND_GRID) -> list[dict]:
    """Hold `commands` (a suite's, `suite_commands`) on `env` (built with `task_overrides` for that suite) and
    measure; one row per command."""
    k = settings.envs_per_command
    dev = env.device
    grid = torch.tensor(commands, dtype=torch.float32, device=dev)
    env.hold_commands(grid.repeat_interleave(k, dim=0))
    steps = int(round(settings.hold_s / env.dt))
    window = min(steps, int(round(settings.window_s / env.dt)))
    n = env.num_envs
    vel_sum = torch.zeros(n, 3, device=dev)
    torque_sum = torch.zeros(n, device=dev)
    fell = torch.zeros(n, dtype=torch.bool, device=dev)
    obs = env.reset()
    with torch.no_grad():
        for t in range(steps):
            obs, _, _, terminated, _, _ = env.step(policy(obs))
            fell |= terminated
            if t >= steps - window:
                # After step(): the state of the step just taken (a fallen env was reset: excluded).
                vel_sum[:, :2] += env.base_lin_vel_b[:, :2]
                vel_sum[:, 2] += env.base_ang_vel_b[:, 2]
                torque_sum += pd_torque_share(env)
    mean_vel = vel_sum / window
    torque = torque_sum / window
    rows = []
    for i, cmd in enumerate(commands):
        block = slice(i * k, (i + 1) * k)
        ok = ~fell[block]
        v = mean_vel[block][ok]
        c = grid[i]
        if len(v):
            achieved = v.mean(dim=0)
            lin_err = (v[:, :2] - c[:2]).norm(dim=1).mean().item()
            yaw_err = (v[:, 2] - c[2]).abs().mean().item()
            torque_share = torque[block][ok].mean().item()
        else:
            achieved, lin_err, yaw_err, torque_share = None, None, None, None  # every env fell: nothing measured
        rows.append({
            "command": list(cmd),
            "achieved": None if achieved is None else [round(float(x), 4) for x in achieved],
            "lin_error": lin_err,
            "yaw_error": yaw_err,
            "fall_fraction": float(fell[block].float().mean()),
            "torque_share": torque_share,
        })
    return rows
