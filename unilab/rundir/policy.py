"""The metadata_props of an exported policy (policy.onnx, policy_iter_N.onnx): its schema, who made it, from which
checkpoint, and the env's description (unilab.tasks.common.metadata); lists and numbers as JSON.

Schema 2 adds what a deployer needs beyond schema 1's layout: each observation term's frame and unit
(`observation_frames`), the start state (`episode_start`), when an episode ends (`terminations`), the gait clock (`gait`, walk), the command (`command`,
walk), the motion's bodies and frame rule (`motion`, tracking) and the simulated model (`model`). A schema 1 policy
lacks them; a reader fills what it can (`SCHEMA_1_DEFAULTS`)."""

from __future__ import annotations

import json

METADATA_SCHEMA = "unilab.policy/2"
READABLE_SCHEMAS = ("unilab.policy/1", METADATA_SCHEMA)
METADATA_KEYS = (
    "schema", "unilab_version", "task", "algo", "checkpoint", "iteration", "env_steps", "control_dt",
    "obs_dim", "action_dim", "joint_names", "default_joint_pos", "action_bounds", "action_scale",
    "action_span_low", "action_span_high", "action_to_target", "kp", "kd", "observation_names",
    "observation_sizes", "observation_scales", "observation_clip", "observation_frames", "episode_start",
    "terminations", "gait", "command", "motion", "model",
)
TEXT_KEYS = ("schema", "unilab_version", "task", "algo", "checkpoint", "action_bounds", "action_to_target")
SCHEMA_2_KEYS = METADATA_KEYS[METADATA_KEYS.index("observation_frames"):]


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


def read_metadata(props: dict[str, str]) -> dict:
    """The values of an exported policy's metadata_props (JSON decoded); ValueError when they are not a unilab
    policy's or of a schema this unilab cannot read. A schema 1 policy gets None for the keys schema 2 added."""
    schema = props.get("schema")
    if schema is None:
        raise ValueError("no unilab metadata (no 'schema' in its metadata_props): export it with `unilab export`")
    if schema not in READABLE_SCHEMAS:
        raise ValueError(f"metadata schema {schema!r}; this unilab reads {', '.join(READABLE_SCHEMAS)}")
    needed = METADATA_KEYS if schema == METADATA_SCHEMA else METADATA_KEYS[:METADATA_KEYS.index("observation_frames")]
    missing = [k for k in needed if k not in props]
    if missing:
        raise ValueError(f"its metadata lacks {', '.join(missing)}")
    values = {k: props[k] if k in TEXT_KEYS else json.loads(props[k]) for k in needed}
    for key in SCHEMA_2_KEYS:
        values.setdefault(key, None)
    return values
