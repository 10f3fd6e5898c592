"""Velocity tracking of a walk policy over a fixed command grid.

Every command of the grid is held by its own block of envs for `hold_s`; the body-frame velocity
is averaged over the last `window_s` of that hold (steady state, gait sway averaged out). An env
that falls is counted in the fall fraction and left out of the velocity errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# (vx m/s, vy m/s, wz rad/s): straight walking both ways, side steps (a slow one too), turning on the
# spot, walking while turning or side-stepping, all three at once; standing last.
COMMAND_GRID: tuple[tuple[float, float, float], ...] = (
    (0.5, 0.0, 0.0), (1.0, 0.0, 0.0), (-0.5, 0.0, 0.0),
    (0.0, 0.4, 0.0), (0.0, -0.4, 0.0), (0.0, 0.25, 0.0),
    (0.0, 0.0, 0.8), (0.0, 0.0, -0.8),
    (0.5, 0.0, 0.8), (0.5, 0.0, -0.8), (1.0, 0.0, 0.8),
    (0.5, 0.4, 0.0), (-0.5, -0.4, 0.0),
    (0.5, 0.3, 0.5), (0.5, -0.3, -0.5), (-0.4, 0.3, 0.5),
    (0.0, 0.0, 0.0),
)

# Every suite sets these itself, whatever the run trained with: no payload or motor draws, and pushes
# at their full size from the first step.
_FIXED = {"added_mass_kg": None, "kp_scale": None, "kd_scale": None, "push_curriculum_steps": 0}

# Task settings of each suite: "nominal" is the command grid without noise, pushes or friction draws;
# "robust" adds observation noise, friction 0.3-1.2 and a push of up to 0.5 m/s every 1-3 s; "push"
# pushes every env every 2 s (all at once) by 0.5-1.0 m/s in a uniform direction, with the noise and
# friction of "robust".
SUITES: dict[str, dict] = {
    "nominal": {"observations": {"noise_scale": 0.0},
                "randomization": {**_FIXED, "friction_range": None, "push_interval_s": None}},
    "robust": {"observations": {"noise_scale": 1.0},
               "randomization": {**_FIXED, "friction_range": [0.3, 1.2], "push_interval_s": [1.0, 3.0],
                                 "push_min_vel_xy": 0.0, "push_max_vel_xy": 0.5}},
    "push": {"observations": {"noise_scale": 1.0},
             "randomization": {**_FIXED, "friction_range": [0.3, 1.2], "push_interval_s": [2.0, 2.0],
                               "push_min_vel_xy": 0.5, "push_max_vel_xy": 1.0}},
}


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
    over["num_envs"] = settings.envs_per_command * len(COMMAND_GRID)
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


def rollout(env, policy, settings: WalkEvalSettings) -> list[dict]:
    """Hold the grid's commands on `env` (built with `task_overrides`) and measure; one row per command."""
    k = settings.envs_per_command
    dev = env.device
    grid = torch.tensor(COMMAND_GRID, dtype=torch.float32, device=dev)
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
    for i, cmd in enumerate(COMMAND_GRID):
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
            achieved, lin_err, yaw_err, torque_share = torch.full((3,), float("nan")), None, None, None
        rows.append({
            "command": list(cmd),
            "achieved": [round(float(x), 4) for x in achieved],
            "lin_error": lin_err,
            "yaw_error": yaw_err,
            "fall_fraction": float(fell[block].float().mean()),
            "torque_share": torque_share,
        })
    return rows


def is_combined(command) -> bool:
    """Walking and side-stepping and turning at once."""
    return all(c != 0.0 for c in command)


def overall(rows: list[dict]) -> dict:
    """Means over the grid (commands where every env fell have no velocity error), and the linear error
    and falls of the combined commands alone (vx, vy and wz all non-zero)."""
    def mean(key, subset=rows):
        vals = [r[key] for r in subset if r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    combined = [r for r in rows if is_combined(r["command"])]
    return {"lin_error": mean("lin_error"), "yaw_error": mean("yaw_error"),
            "fall_fraction": mean("fall_fraction"), "torque_share": mean("torque_share"),
            "combined_lin_error": mean("lin_error", combined), "combined_fall_fraction": mean("fall_fraction", combined),
            "max_fall_fraction": max((r["fall_fraction"] for r in rows), default=None)}
