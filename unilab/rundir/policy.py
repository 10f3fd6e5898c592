"""The metadata_props of an exported policy (policy.onnx, policy_iter_N.onnx): its schema, who made it, from which
checkpoint, and the env's description (unilab.tasks.common.metadata); lists and numbers as JSON."""

from __future__ import annotations

import json

METADATA_SCHEMA = "unilab.policy/1"
METADATA_KEYS = (
    "schema", "unilab_version", "task", "algo", "checkpoint", "iteration", "env_steps", "control_dt",
    "obs_dim", "action_dim", "joint_names", "default_joint_pos", "action_bounds", "action_scale",
    "action_span_low", "action_span_high", "action_to_target", "kp", "kd", "observation_names",
    "observation_sizes", "observation_scales", "observation_clip",
)


def metadata_props(description: dict, *, task: str, algo: str, checkpoint: str, iteration: int,
                   env_steps: int) -> dict[str, str]:
    """metadata_props of an exported policy: who made it, from which checkpoint, and the env's description."""
    import unilab

    values = {
        "schema": METADATA_SCHEMA,
        "unilab_version": unilab.__version__,
        "task": task,
        "algo": algo,
        "checkpoint": checkpoint,
        "iteration": int(iteration),
        "env_steps": int(env_steps),
        **description,
    }
    assert tuple(values) == METADATA_KEYS and sum(values["observation_sizes"]) == values["obs_dim"]
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
