"""Pieces shared by unilab tasks: the batched env base class, quaternion math, reward kernels."""

from unilab.tasks.common.base import TaskEnv

__all__ = ["TaskEnv"]
