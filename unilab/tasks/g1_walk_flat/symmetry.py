"""The walk's left-right mirror: how each observation term and the action change when the robot, its
command and its gait clock are reflected through the robot's x-z plane (`algo.symmetry`).

The G1 model's right side is built as the mirror image of its left (unilab.assets.g1), the rewards and
the randomisation treat both sides alike, so the mirror of a transition is a transition the task could
have produced. (The published figures put the waist's and the torso's centres of mass a fraction of a
millimetre off the mid-plane; the mirror leaves that out.) The gait clock swaps the feet by moving half a cycle: the right foot's phase is the left
one's plus 0.5, so the mirrored clock reads (-sin, -cos).
"""

from __future__ import annotations

from unilab.algos.symmetry import Mirror, VectorMirror
from unilab.tasks.common.mirror import AXIAL, POLAR

_SWAP_FEET = ((1, 0), (1.0, 1.0))  # (left, right) -> (right, left)

# term name -> its mirror, or "joints" for a vector over the actuated joints
_TERMS = {
    "base_ang_vel": AXIAL,
    "projected_gravity": POLAR,
    "joint_pos_rel": "joints",
    "joint_vel": "joints",
    "last_action": "joints",
    "command": ((0, 1, 2), (1.0, -1.0, -1.0)),  # (vx, vy, wz)
    "gait_phase_sin_cos": ((0, 1), (-1.0, -1.0)),
    "base_lin_vel": POLAR,
    "foot_contact": _SWAP_FEET,
    "foot_height": _SWAP_FEET,
    "base_height": ((0,), (1.0,)),
}


def layout_mirror(layout: list[tuple[str, int]], joints: tuple[tuple[int, ...], tuple[float, ...]]) -> VectorMirror:
    """The mirror of a vector made of the named terms of `layout` ((name, width), in order)."""
    perm: list[int] = []
    sign: list[float] = []
    offset = 0
    for name, width in layout:
        if name not in _TERMS:
            raise ValueError(f"observation term {name!r} has no mirror (known: {', '.join(_TERMS)})")
        term_perm, term_sign = joints if _TERMS[name] == "joints" else _TERMS[name]
        if len(term_perm) != width:
            raise ValueError(f"observation term {name!r}: {width} wide, its mirror {len(term_perm)}")
        perm += [offset + p for p in term_perm]
        sign += list(term_sign)
        offset += width
    return VectorMirror(tuple(perm), tuple(sign))


def walk_mirror(policy_layout: list[tuple[str, int]], critic_layout: list[tuple[str, int]],
                joints: tuple[tuple[int, ...], tuple[float, ...]]) -> Mirror:
    """The walk's `Mirror` from its observation layouts and the joints' mirror (perm, sign)."""
    return Mirror(obs=layout_mirror(policy_layout, joints), critic_obs=layout_mirror(critic_layout, joints),
                  action=VectorMirror(*joints))
