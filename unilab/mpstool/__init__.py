"""`unilab mps`: start, stop and inspect a user-owned CUDA MPS control daemon, and run the probe.

Nothing here imports torch or Warp: GPUs are identified through NVML, and the daemon is only
reached through `nvidia-cuda-mps-control` (commands on stdin).
"""

from .errors import MpsToolError
from .host import ToolHost

__all__ = ["MpsToolError", "ToolHost"]
