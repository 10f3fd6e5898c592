"""unilab: off-policy RL for humanoid robots on MuJoCo Warp, with an explicit CUDA MPS execution mode."""

__version__ = "0.1.0"
