"""The env's part of an exported policy's metadata: what a deployer needs to build the observation and to turn
the action into PD targets, read off the env (joints in actuator order, gains from the MuJoCo model, the
observation layout with each term's frame and unit, the gait clock or the motion, the model it simulated). The
collector sends it to the learner, which exports at the end of training; `unilab export` reads it from an env it
builds. The task's own part (frames, clock, command, motion) comes from the env's `deploy_description()`, written
beside the task (unilab/tasks/<task>/metadata.py)."""

from __future__ import annotations

from unilab.assets.fingerprint import model_fingerprint, model_totals
from unilab.sim.headless import mujoco


def _floats(values) -> list[float]:
    return [float(f"{float(v):.7g}") for v in values]


def model_description(env, builder: dict) -> dict:
    """The simulated model: how to rebuild it (`builder`: the function and its keyword arguments), the solver and
    step settings, per-joint armature and effort limits in actuator order, and what identifies it."""
    m = env.backend.mj_model  # the backend's copy: the timestep and solver caps it ran with
    dofs = m.jnt_dofadr[m.actuator_trnid[:, 0]]
    return {
        "name": m.names[:m.names.index(b"\0")].decode(),
        **builder,
        "timestep": float(f"{m.opt.timestep:.7g}"),
        "decimation": int(env.sim_cfg.decimation),
        "integrator": mujoco.mjtIntegrator(m.opt.integrator).name,
        "iterations": int(m.opt.iterations),
        "ls_iterations": int(m.opt.ls_iterations),
        "armature": _floats(m.dof_armature[dofs]),
        "effort_limit": _floats(m.actuator_forcerange[:, 1]),
        "fingerprint": model_fingerprint(m),
        **model_totals(m),
    }


def env_description(env) -> dict:
    """The env's part of the metadata (joints in actuator order, gains from the MuJoCo model, the
    observation layout): the collector sends it to the learner, which exports at the end of training."""
    m = env.mj_model
    low, high = env.action_spans()
    layout = env.policy_obs_layout()
    clip = getattr(getattr(env.cfg, "observations", None), "clip", None)
    bounds = str(getattr(env.cfg, "action_bounds", "uniform"))
    task = env.deploy_description()
    frames = task["observation_frames"]
    if [name for name, _, _ in layout] != list(frames):
        raise ValueError(f"{type(env).__name__}: observation_frames name {list(frames)}, the layout "
                         f"{[name for name, _, _ in layout]}")
    return {
        "control_dt": float(f"{env.dt:.7g}"),
        "obs_dim": int(env.obs_dim),
        "action_dim": int(env.action_dim),
        "joint_names": [m.joint(int(j)).name for j in m.actuator_trnid[:, 0]],
        "default_joint_pos": _floats(env.default_joint_pos.tolist()),
        "action_bounds": bounds,
        "action_scale": float(env.action_scale) if bounds == "uniform" else None,  # null: per-joint spans
        "action_span_low": _floats(low.tolist()),
        "action_span_high": _floats(high.tolist()),
        "action_to_target": env.action_to_target,
        "kp": _floats(m.actuator_gainprm[:, 0]),
        "kd": _floats(-m.actuator_biasprm[:, 2]),
        "observation_names": [name for name, _, _ in layout],
        "observation_sizes": [size for _, size, _ in layout],
        "observation_scales": _floats(scale for _, _, scale in layout),
        "observation_clip": None if clip is None else float(clip),
        "observation_frames": [frames[name] for name, _, _ in layout],
        "episode_start": task["episode_start"],
        "terminations": task.get("terminations"),
        "gait": task.get("gait"),
        "command": task.get("command"),
        "motion": task.get("motion"),
        "model": model_description(env, task["model_builder"]),
    }
