"""`g1_walk_flat`: G1 velocity tracking on flat ground. The env lives in `.env` (imports torch/warp)."""

from unilab.tasks.g1_walk_flat.config import G1WalkFlatConfig

__all__ = ["G1WalkFlatConfig"]
