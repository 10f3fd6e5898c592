"""Pieces shared by the off-policy learners; like everything the learners run, none of them syncs the host.

- `categorical_projection`: C51 projection of a shifted/scaled categorical distribution onto a fixed support;
- `warmup_cosine`: learning rate of a warm-up + cosine schedule computed from a device step counter;
- `RepeatedNoise`: per-env exploration noise held for a random number of steps;
- `ReturnNormalizer`: reward scale from the running statistics of each env's discounted return.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from unilab.algos.normalizer import RunningNormalizer


@torch.no_grad()
def categorical_projection(probs: Tensor, atoms: Tensor, support: Tensor, method: str = "dense") -> Tensor:
    """C51 projection of the distribution with mass `probs[..., j]` at `atoms[..., j]` onto the evenly spaced
    `support`: every atom is first clamped into [support[0], support[-1]], then its mass is split between the
    two nearest support points in proportion to proximity. A target: no gradient.

    Two ways to compute it, equal up to float rounding; each learner keeps the one its numbers were made with:
    - "dense" (FlashSAC): support point i receives sum_j p_j * max(0, 1 - |atom_j - z_i| / dz), as a
      (..., A, A) weighting with one in-place buffer: B * A^2 floats (84 MB for B = 2048, A = 101), and
      deterministic on the GPU;
    - "scatter" (FastSAC): each atom's two shares are scatter-added at its neighbours' indices: B * A floats,
      but atomic (run-to-run varying) sums on the GPU.
    """
    if method == "dense":
        return _dense_projection(probs, atoms, support)
    if method == "scatter":
        return _scatter_projection(probs, atoms, support)
    raise ValueError(f"categorical_projection: unknown method {method!r}; known: 'dense', 'scatter'")


def _dense_projection(probs: Tensor, atoms: Tensor, support: Tensor) -> Tensor:
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (support.shape[0] - 1)
    # weight[..., i, j]: share of atom j that lands on support point i.
    weight = atoms.clamp(v_min, v_max).unsqueeze(-2) - support.unsqueeze(-1)
    weight.abs_().div_(delta).neg_().add_(1.0).clamp_(min=0.0)
    return weight.mul_(probs.unsqueeze(-2)).sum(-1)


def _scatter_projection(probs: Tensor, atoms: Tensor, support: Tensor) -> Tensor:
    num_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    pos = (atoms.clamp(v_min, v_max) - v_min) / delta  # fractional support index in [0, A-1]
    # A non-finite atom must not become an out-of-range index (a device-side assert on the GPU, fatal to
    # every MPS client); its NaN still reaches the loss through upper_weight, for the NaN guard.
    lower = torch.nan_to_num(pos, nan=0.0).floor().clamp(0, num_atoms - 1)
    upper_weight = pos - lower
    lower_idx = lower.long()
    # At the top point, pos == lower and the (clamped) upper neighbour receives zero mass.
    upper_idx = (lower_idx + 1).clamp(max=num_atoms - 1)
    out = torch.zeros_like(probs)
    out.scatter_add_(-1, lower_idx, probs * (1.0 - upper_weight))
    out.scatter_add_(-1, upper_idx, probs * upper_weight)
    return out


def warmup_cosine(
    step: Tensor, init: float, peak: float, end: float, warmup_steps: int, total_steps: int
) -> Tensor:
    """Linear warm-up init -> peak over `warmup_steps`, then cosine peak -> end until `total_steps`, then end.

    `step` is a device tensor, so a captured CUDA graph recomputes the rate on every replay.
    """
    step = step.to(torch.float32)
    warm = init + (peak - init) * step / max(warmup_steps, 1)
    progress = ((step - warmup_steps) / max(total_steps - warmup_steps, 1)).clamp(0.0, 1.0)
    decay = end + (peak - end) * 0.5 * (1.0 + torch.cos(math.pi * progress))
    return torch.where(step < warmup_steps, warm, decay)


def repeat_length_probs(max_repeat: int, kind: str = "zeta", exponent: float = 2.0) -> Tensor:
    """P(k) for k = 1..max_repeat: a truncated zeta law (k^-exponent) or uniform."""
    if max_repeat < 1:
        raise ValueError(f"noise repeat length must be >= 1, got {max_repeat}")
    k = torch.arange(1, max_repeat + 1, dtype=torch.float64)
    if kind == "zeta":
        w = k.pow(-float(exponent))
    elif kind == "uniform":
        w = torch.ones_like(k)
    else:
        raise ValueError(f"unknown noise repeat distribution {kind!r}; known: 'zeta', 'uniform'")
    return (w / w.sum()).float()


class RepeatedNoise:
    """Standard-normal noise per row (env) that each row keeps for k calls, k ~ `probs` drawn anew each time.

    Temporally correlated exploration: an actuator pushed the same way for several control steps moves
    the robot much further than white noise of the same scale. State lives in device tensors; a change of
    the row count (host-side shape) restarts every row.
    """

    def __init__(self, probs: Tensor, device: torch.device):
        self.cdf = torch.cumsum(probs, 0).to(device)
        self.max_repeat = probs.shape[0]
        self.device = device
        self.noise: Tensor | None = None  # (rows, dim)
        self.left: Tensor | None = None  # further calls that reuse each row's current sample

    def draw_lengths(self, n: int) -> Tensor:
        u = torch.rand(n, device=self.device)
        idx = torch.searchsorted(self.cdf, u, right=True).clamp(max=self.max_repeat - 1)
        return idx + 1

    def __call__(self, rows: int, dim: int) -> Tensor:
        if self.noise is None or self.noise.shape != (rows, dim):
            self.noise = torch.zeros(rows, dim, device=self.device)
            self.left = torch.zeros(rows, dtype=torch.int64, device=self.device)
        expired = self.left <= 0
        fresh = torch.randn(rows, dim, device=self.device)
        self.noise.copy_(torch.where(expired.unsqueeze(-1), fresh, self.noise))
        self.left.copy_(torch.where(expired, self.draw_lengths(rows), self.left) - 1)
        return self.noise


class ReturnNormalizer(nn.Module):
    """Divides rewards by max(std(G), max|G| / max_return), G being each env's running discounted return.

    G_t = r_t + gamma * G_{t-1}, restarted after a terminal step. Dividing by std(G) puts returns of every
    task on one scale; the max|G| term guarantees that every return seen so far maps into [-max_return,
    max_return], the range the categorical critic covers. Rewards are only scaled, never shifted: a shift
    would change how attractive termination is.

    Rows passed to `update` are tick-major: rows [t*num_envs, (t+1)*num_envs) are env step t. `num_envs`
    of 0 takes the row count of the first update as one step of all envs.
    """

    def __init__(self, gamma: float, max_return: float, num_envs: int = 0, enabled: bool = True, eps: float = 1e-8):
        super().__init__()
        self.gamma = gamma
        self.max_return = max_return
        self.enabled = enabled
        self.eps = eps
        self.return_stats = RunningNormalizer(1)
        self.register_buffer("returns", torch.zeros(max(int(num_envs), 0)))
        self.register_buffer("max_abs_return", torch.zeros((), dtype=torch.float64))
        self.register_buffer("divisor", torch.ones(()))

    @property
    def num_envs(self) -> int:
        return self.returns.shape[0]

    @torch.no_grad()
    def update(self, reward: Tensor, terminated: Tensor) -> None:
        if not self.enabled or reward.shape[0] == 0:
            return
        if self.num_envs == 0:
            self.returns = torch.zeros(reward.shape[0], device=reward.device)
        n = self.num_envs
        if reward.shape[0] % n:
            raise ValueError(f"reward normalisation: {reward.shape[0]} rows are not whole steps of {n} envs")
        steps = reward.shape[0] // n
        reward = reward.reshape(steps, n).float()
        alive = 1.0 - terminated.reshape(steps, n).float()
        seen = torch.empty_like(reward)
        for t in range(steps):  # a chunk holds few env steps (env_steps_per_sync)
            self.returns.mul_(self.gamma).add_(reward[t])
            seen[t] = self.returns
            self.returns.mul_(alive[t])
        self.return_stats.update(seen.reshape(-1, 1))
        self.max_abs_return.copy_(torch.maximum(self.max_abs_return, seen.abs().max().double()))
        std = torch.sqrt(self.return_stats.var[0] + self.eps)
        self.divisor.copy_(torch.maximum(std, self.max_abs_return / self.max_return).clamp(min=self.eps))

    def normalize(self, reward: Tensor) -> Tensor:
        return reward / self.divisor if self.enabled else reward

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        saved = state_dict.get(prefix + "returns")
        if saved is not None and saved.shape != self.returns.shape:  # env count fixed lazily on first update
            self.returns = torch.zeros(saved.shape, device=self.returns.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
