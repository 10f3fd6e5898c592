"""Running observation normaliser whose statistics stay on the device (no host sync to update)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningNormalizer(nn.Module):
    """Running mean/variance merged batch by batch (Chan et al.'s parallel update).

    The statistics are kept in float64 so that the merge stays exact over billions of samples;
    `loc`/`scale` are their float32 images, refreshed on every update, which is all `normalize` reads.
    All updates are in place, so a CUDA graph that normalises keeps seeing the newest statistics.
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8, enabled: bool = True):
        super().__init__()
        self.dim = dim
        self.clip = clip
        self.eps = eps
        self.enabled = enabled
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("loc", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        if not self.enabled or x.shape[0] == 0:
            return
        x = x.reshape(-1, self.dim).to(torch.float64)
        n_b = x.shape[0]
        var_b, mean_b = torch.var_mean(x, dim=0, correction=0)
        total = self.count + n_b
        delta = mean_b - self.mean
        # With count == 0 these reduce to (mean_b, var_b), so the first batch needs no branch.
        m2 = self.var * self.count + var_b * n_b + delta.square() * (self.count * n_b / total)
        self.mean.add_(delta * (n_b / total))
        self.var.copy_(m2 / total)
        self.count.copy_(total)
        self.loc.copy_(self.mean)
        self.scale.copy_(torch.rsqrt(self.var + self.eps))

    def normalize(self, x: Tensor) -> Tensor:
        if not self.enabled:
            return x
        return ((x - self.loc) * self.scale).clamp(-self.clip, self.clip)

    forward = normalize
