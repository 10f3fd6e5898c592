"""Left-right symmetry for the learner: a task's mirror map, and the replay rows mirrored with it.

A bilateral robot whose model, rewards and randomisation are left-right symmetric has a mirror image of
every transition that is as likely as the transition itself. The task supplies the map (`Mirror`: which
entry of each vector goes where, and with which sign); the learner trains on a batch whose second half is
mirrored (`mirror_half`), so that one policy learns both sides of each gait from the data of either, at
the cost of one gather per field.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# Which map mirrors which transition field (reward and terminated are unchanged by a mirror).
_FIELD_MAP = {"obs": "obs", "next_obs": "obs", "critic_obs": "critic_obs", "next_critic_obs": "critic_obs",
              "action": "action"}


@dataclass(frozen=True)
class VectorMirror:
    """The mirror of one vector: mirrored[i] = x[perm[i]] * sign[i]."""

    perm: tuple[int, ...]
    sign: tuple[float, ...]

    def check(self, what: str, dim: int) -> None:
        """A permutation of range(dim) with signs of +-1 that is its own inverse (mirroring twice is the
        identity); ValueError naming `what` otherwise."""
        perm, sign = self.perm, self.sign
        if len(perm) != dim or len(sign) != dim or sorted(perm) != list(range(dim)):
            raise ValueError(f"{what} mirror: not a permutation of its {dim} entries (perm {list(perm)})")
        if any(s not in (1.0, -1.0) for s in sign):
            raise ValueError(f"{what} mirror: signs must be +1 or -1, got {list(sign)}")
        broken = [i for i in range(dim) if perm[perm[i]] != i or sign[i] * sign[perm[i]] != 1.0]
        if broken:
            raise ValueError(f"{what} mirror: mirroring twice does not give back entries {broken}")


@dataclass(frozen=True)
class Mirror:
    """A task's left-right mirror of its observations, critic observations and actions."""

    obs: VectorMirror
    critic_obs: VectorMirror
    action: VectorMirror

    def check(self, obs_dim: int, critic_obs_dim: int, action_dim: int) -> None:
        self.obs.check("observation", obs_dim)
        self.critic_obs.check("critic observation", critic_obs_dim)
        self.action.check("action", action_dim)


class RowMirror:
    """`Mirror` as device tensors, applied to gathered replay rows."""

    def __init__(self, mirror: Mirror, device: torch.device):
        self.maps = {name: (torch.tensor(m.perm, device=device), torch.tensor(m.sign, device=device))
                     for name, m in (("obs", mirror.obs), ("critic_obs", mirror.critic_obs),
                                     ("action", mirror.action))}

    def __call__(self, field: str, x: Tensor) -> Tensor:
        perm, sign = self.maps[_FIELD_MAP[field]]
        return x.index_select(-1, perm) * sign

    def mirror_half(self, rows: dict[str, Tensor]) -> dict[str, Tensor]:
        """The rows with their second half (rows n // 2 onwards) mirrored: the batch keeps its size and cost,
        and a uniform sample stays uniform over both sides."""
        out = {}
        for key, x in rows.items():
            if key in _FIELD_MAP:
                h = x.shape[0] // 2
                x = torch.cat((x[:h], self(key, x[h:])))
            out[key] = x
        return out
