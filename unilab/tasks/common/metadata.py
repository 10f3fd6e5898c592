"""The env's part of an exported policy's metadata: what a deployer needs to build the observation and to turn
the action into PD targets, read off the env (joints in actuator order, gains from the MuJoCo model, the
observation layout). The collector sends it to the learner, which exports at the end of training; `unilab export`
reads it from an env it builds."""

from __future__ import annotations


def _floats(values) -> list[float]:
    return [float(f"{float(v):.7g}") for v in values]


def env_description(env) -> dict:
    """The env's part of the metadata (joints in actuator order, gains from the MuJoCo model, the
    observation layout): the collector sends it to the learner, which exports at the end of training."""
    m = env.mj_model
    low, high = env.action_spans()
    layout = env.policy_obs_layout()
    clip = getattr(getattr(env.cfg, "observations", None), "clip", None)
    bounds = str(getattr(env.cfg, "action_bounds", "uniform"))
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
    }
