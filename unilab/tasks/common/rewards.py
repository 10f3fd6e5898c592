"""Small reward kernels shared by tasks. All reduce over the last dimension where noted."""

from __future__ import annotations

import torch


def squared_norm(x: torch.Tensor) -> torch.Tensor:
    """Sum of squares over the last dimension."""
    return (x * x).sum(dim=-1)


def exp_kernel(error_sq: torch.Tensor, std: float) -> torch.Tensor:
    """exp(-error^2 / std^2): 1 at zero error, ~0.37 at one std."""
    return torch.exp(error_sq * (-1.0 / (std * std)))


def exp_tracking(target: torch.Tensor, actual: torch.Tensor, std: float) -> torch.Tensor:
    """exp kernel on the squared L2 error over the last dimension."""
    return exp_kernel(squared_norm(target - actual), std)


def out_of_limits(x: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Total distance by which x leaves [lower, upper], summed over the last dimension."""
    return ((lower - x).clamp_min(0.0) + (x - upper).clamp_min(0.0)).sum(dim=-1)


def soft_limits(lower: torch.Tensor, upper: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Shrink [lower, upper] about its midpoint to `factor` of its width."""
    mid = 0.5 * (lower + upper)
    half = 0.5 * (upper - lower) * factor
    return mid - half, mid + half
