"""One transition, the replay's row: what the collector writes into a replay-ingress slot and the learner adds to
its replay. Free of torch: the launcher's side of the protocol reads it too."""

from __future__ import annotations

TRANSITION_FIELDS = ("obs", "critic_obs", "action", "reward", "next_obs", "next_critic_obs", "terminated")


def transition_shapes(obs_dim: int, critic_obs_dim: int, action_dim: int) -> dict[str, tuple[int, ...]]:
    """The shape of one row of each transition field (() for a scalar), in TRANSITION_FIELDS order."""
    shapes = ((obs_dim,), (critic_obs_dim,), (action_dim,), (), (obs_dim,), (critic_obs_dim,), ())
    return dict(zip(TRANSITION_FIELDS, shapes, strict=True))
