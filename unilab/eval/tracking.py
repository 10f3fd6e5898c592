"""Motion tracking of every clip of a motion, from its first frame to its last.

Each clip gets its own block of envs, all put on the clip's frame 0 and driven by the deterministic
policy until the clip ends or they terminate. An env counts only until its first episode end; the
errors are averaged over the steps it was still tracking (a terminated env's last state is excluded).

Suites: `robust` is the run's task config as trained (its randomisation, pushes, observation noise);
`nominal` is the same with every randomisation setting the config has switched off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

# eval's names for the plain parts (unilab eval's table and report read them here)
from unilab.tasks.g1_motion_tracking.evaluation import (BREAKDOWN, METRICS, PROTOCOL,  # noqa: F401
                                                       SUCCESS_MAX_GLOBAL_M, format_suite, overall, worst_parts)

# The "off" value of randomisation settings whose off value is not simply zero or False.
OFF_VALUES: dict[str, Any] = {"friction_range": None, "push_interval_s": None, "stagger_first_episode": False}


@dataclass
class TrackingEvalSettings:
    envs_per_clip: int = 16
    motion: Optional[str] = None  # a clip file or directory instead of the run's own motion


def _switched_off(section: dict, noise_only: bool = False) -> tuple[dict, list[str]]:
    """The keys of a config section (nested sections too) set to their off value, and the dotted keys
    left as they are because no safe "off" is known (a range: zero friction is no "off")."""
    over: dict[str, Any] = {}
    kept: list[str] = []
    for key, value in section.items():
        if noise_only and "noise" not in key:
            continue
        if key in OFF_VALUES:
            over[key] = OFF_VALUES[key]
        elif isinstance(value, dict):
            over[key], inner = _switched_off(value)
            kept += [f"{key}.{k}" for k in inner]
        elif isinstance(value, bool):
            over[key] = False
        elif isinstance(value, (int, float)):
            over[key] = type(value)(0)
        elif value is not None:
            kept.append(key)
    return over, kept


def task_overrides(suite: str, task: dict, settings: TrackingEvalSettings, max_clip_s: float,
                   num_clips: int) -> tuple[dict, list[str]]:
    """What the suite changes in the run's task config, and the randomisation keys nominal had to keep.
    Only keys that exist in `task` are touched, so configs of older or newer runs work alike."""
    if suite not in ("nominal", "robust"):
        raise ValueError(f"unknown suite {suite!r}; known: nominal, robust")
    over: dict[str, Any] = {"num_envs": settings.envs_per_clip * num_clips,
                            "episode_length_s": max_clip_s + 1.0}  # a clip's end, not the time-out, ends it
    if settings.motion is not None:
        over["motion_file"] = settings.motion
    kept: list[str] = []
    if suite == "nominal":
        for name, noise_only in (("randomization", False), ("observations", True)):
            if isinstance(task.get(name), dict):
                section, left = _switched_off(task[name], noise_only)
                over[name] = section
                kept += [f"{name}.{k}" for k in left]
    elif isinstance(task.get("randomization"), dict) and "stagger_first_episode" in task["randomization"]:
        over["randomization"] = {"stagger_first_episode": False}  # every env starts on frame 0 together
    return over, kept


def rollout(env, policy, envs_per_clip: int) -> list[dict]:
    """Play every clip of `env`'s motion from frame 0 with `policy`; one row per clip."""
    k, dev = envs_per_clip, env.device
    clips = torch.arange(env.num_clips, device=dev).repeat_interleave(k)
    obs = env.reset_to_clips(clips)
    steps = int(env.episode_limit.max())
    n = env.num_envs
    alive = torch.ones(n, dtype=torch.bool, device=dev)
    fell = torch.zeros(n, dtype=torch.bool, device=dev)
    tracked = torch.zeros(n, device=dev)  # steps taken before the episode ended by a termination
    measured = torch.zeros(n, device=dev)
    sums = {key: torch.zeros(n, device=dev) for key in ("body_pos", "joint_pos", "anchor_ori", *PROTOCOL)}
    worst = torch.zeros(n, device=dev)  # the largest global error while tracking: success's test
    part_sums = {key: torch.zeros(n, len(env.part_names[key]), device=dev) for _, key, _ in BREAKDOWN}
    with torch.no_grad():
        for _ in range(steps):
            obs, _, _, terminated, truncated, _ = env.step(policy(obs))
            fell |= alive & terminated
            tracked += (alive & ~terminated).float()
            alive &= ~(terminated | truncated)
            # After step(): an env that ended was reset already, so only the still running ones are measured.
            errors, parts = env.tracking_errors_and_parts()
            errors = {**errors, **env.protocol_errors()}
            worst = torch.maximum(worst, torch.where(alive, errors["global"], 0.0))
            for key, total in sums.items():
                total += torch.where(alive, errors[key], 0.0)
            for key, total in part_sums.items():
                total += torch.where(alive[:, None], parts[key], 0.0)
            measured += alive.float()
    to_track = (env.clip_length[clips] - 1).float()
    done_frames = torch.minimum(torch.round(tracked * env.frames_per_step), to_track)
    completion = torch.where(fell, done_frames / to_track, torch.ones_like(to_track))
    mean = {key: total / measured.clamp_min(1.0) for key, total in sums.items()}
    succeeded = ~fell & (worst <= SUCCESS_MAX_GLOBAL_M)
    part_mean = {key: total / measured.clamp_min(1.0)[:, None] for key, total in part_sums.items()}
    rows = []
    for c, name in enumerate(env.clip_names):
        block = slice(c * k, (c + 1) * k)
        ok = measured[block] > 0

        def avg(key, scale=1.0):
            return float(mean[key][block][ok].mean()) * scale if bool(ok.any()) else None

        def by_part(key, scale):
            if not bool(ok.any()):
                return None
            values = part_mean[key][block][ok].mean(dim=0) * scale
            return dict(zip(env.part_names[key], values.tolist()))

        rows.append({
            "clip": name,
            "frames": int(env.clip_num_frames[c]),
            "completion": float(completion[block].mean()),
            "body_pos_error_mm": avg("body_pos", 1000.0),
            "joint_pos_error_rad": avg("joint_pos"),
            "anchor_ori_error_rad": avg("anchor_ori"),
            "fall_fraction": float(fell[block].float().mean()),
            "global_body_pos_error_mm": avg("global", 1000.0),
            "root_relative_body_pos_error_mm": avg("root_relative", 1000.0),
            "success": float(succeeded[block].float().mean()),
            **{name: by_part(key, scale) for name, key, scale in BREAKDOWN},
        })
    return rows
