"""Replay sampling biased by the age of the transitions, on the device and without host values: the fill
level and the write position are read from the replay's device scalars, so a captured CUDA graph keeps
sampling the current contents on every replay."""

from __future__ import annotations

import torch
from torch import Tensor

from unilab.algos.replay import ReplayBuffer


def age_weights(age: Tensor, decay_step: int, min_weight: float) -> Tensor:
    """Sampling weight of transitions of this age (1: the newest). A positive decay favours the newest, a
    negative one the oldest (see `ReplaySampling` in config.py)."""
    span = float(max(abs(decay_step), 1))
    if decay_step > 0:
        return (1.0 - age / span).clamp(min=min_weight)
    return (min_weight + age / span).clamp(max=1.0)


class AgeBiasedSampler:
    """Draws replay rows by the age of their transition, bucket by bucket.

    `prepare` cuts the filled replay, oldest to newest, into `num_buckets` runs of ceil(size / num_buckets)
    transitions (the last ones shorter or empty) and weighs each by the age at its middle; `sample` draws
    buckets by weight (inverse CDF) and a row uniformly inside each. With `decay_step` 0 it draws uniformly.
    Where every weight is 0 (a zero minimum and only old transitions), buckets are drawn uniformly.
    """

    def __init__(self, replay: ReplayBuffer, decay_step: int, min_weight: float, num_buckets: int):
        self.replay = replay
        self.decay_step = int(decay_step)
        self.min_weight = float(min_weight)
        self.num_buckets = int(num_buckets)
        self._bucket_ids = torch.arange(self.num_buckets, device=replay.device)

    def prepare(self) -> None:
        """The bucket table for the replay's current contents (once per update cycle: the replay does not
        change during one)."""
        if self.decay_step == 0:
            return
        size = self.replay.size_tensor
        width = torch.div(size + self.num_buckets - 1, self.num_buckets, rounding_mode="floor")
        starts = self._bucket_ids * width  # logical rows: 0 is the oldest
        ends = torch.minimum(starts + width, size)
        widths = (ends - starts).clamp(min=0)
        middle = torch.div(starts + ends - 1, 2, rounding_mode="floor")
        filled = widths > 0
        weights = torch.where(filled, age_weights((size - middle).float(), self.decay_step, self.min_weight), 0.0)
        weights = torch.where(weights.sum() > 0, weights, filled.float())
        self._cdf = weights.cumsum(0)
        self._starts, self._widths = starts, widths
        self._oldest = self.replay.ptr_tensor - size  # physical row of the oldest transition, modulo capacity

    def sample(self, batch_size: int) -> Tensor:
        """`batch_size` physical row indices (after `prepare`)."""
        if self.decay_step == 0:
            return self.replay.sample_indices(batch_size)
        dev = self.replay.device
        u = torch.rand(batch_size, device=dev) * self._cdf[-1]
        bucket = torch.searchsorted(self._cdf, u, right=True).clamp_(max=self.num_buckets - 1)
        width = self._widths[bucket]
        offset = torch.minimum((torch.rand(batch_size, device=dev) * width).long(), width - 1)
        return torch.remainder(self._oldest + self._starts[bucket] + offset, self.replay.capacity)
