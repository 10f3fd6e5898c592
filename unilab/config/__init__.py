"""Config schema, ConfigStore registration and resolvers of the `train` app."""

from .resolvers import register_resolvers
from .schema import CudaProcessSharing, ExecutionConfig, TrainConfig, TrainingConfig
from .store import register_configs

__all__ = [
    "CudaProcessSharing",
    "ExecutionConfig",
    "TrainConfig",
    "TrainingConfig",
    "register_configs",
    "register_resolvers",
]
