"""Config schema, ConfigStore registration, resolvers and the checks of the `train` app."""

from .resolvers import register_resolvers
from .schema import CudaProcessSharing, ExecutionConfig, TrainConfig, TrainingConfig
from .store import register_configs
from .validation import ConfigError, RequestError, ValidatedRequest, validate

__all__ = [
    "ConfigError",
    "CudaProcessSharing",
    "ExecutionConfig",
    "RequestError",
    "TrainConfig",
    "TrainingConfig",
    "ValidatedRequest",
    "register_configs",
    "register_resolvers",
    "validate",
]
