"""FastSAC networks: LayerNorm MLPs, a tanh-Gaussian actor and twin C51 critics."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unilab.algos.normalizer import RunningNormalizer

# bf16 GEMMs whose operand widths are multiples of 8 (16 bytes) get cuBLAS's fast tensor-core kernels; other
# widths (task observation sizes, 101 atoms) fall back to align-1/2 kernels several times slower (their
# share of the update cycle: docs/history/performance.md, 2026-11-30). So the first and last layers are padded:
# the input with zero columns, the output with columns that are sliced off. Their padded weights start at
# zero and get exactly zero gradient, so they stay zero and the function is the unpadded network's.
ALIGN = 8


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def mlp(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """Three hidden layers narrowing hidden -> hidden/2 -> hidden/4, each Linear + LayerNorm + SiLU."""
    widths = [in_dim, hidden_dim, max(hidden_dim // 2, 1), max(hidden_dim // 4, 1)]
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.LayerNorm(b), nn.SiLU()]
    layers.append(nn.Linear(widths[-1], out_dim))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy over actions in [-1, 1]; takes normalised observations."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dim: int, log_std_min: float, log_std_max: float):
        super().__init__()
        self.action_dim = action_dim
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        self.obs_dim = obs_dim
        self.net = mlp(aligned(obs_dim), hidden_dim, aligned(2 * action_dim))
        first, head = self.net[0], self.net[-1]
        with torch.no_grad():
            bound = 1.0 / math.sqrt(obs_dim)  # nn.Linear's init for the unpadded fan-in
            first.weight.uniform_(-bound, bound)[:, obs_dim:] = 0.0
            first.bias.uniform_(-bound, bound)
            # Start near the centre of the action box with a moderate std, whatever the trunk says.
            head.weight.uniform_(-1e-3, 1e-3)[2 * action_dim:] = 0.0
            head.bias.zero_()

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Pre-tanh mean and log-std, in float32 even when the trunk ran under bf16 autocast."""
        obs = F.pad(obs, (0, self.net[0].in_features - self.obs_dim))
        out = self.net(obs)[..., : 2 * self.action_dim]
        mean, raw_log_std = out.float().chunk(2, dim=-1)
        # Soft clamp into [min, max]: unlike clamp(), the gradient never vanishes at the bounds.
        log_std = self.log_std_max - F.softplus(self.log_std_max - raw_log_std)
        log_std = self.log_std_min + F.softplus(log_std - self.log_std_min)
        return mean, log_std

    def sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Reparameterised action in [-1, 1] and its log-probability (tanh change of variables)."""
        mean, log_std = self(obs)
        noise = torch.randn_like(mean)
        u = mean + noise * log_std.exp()
        gaussian_logp = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
        # log(1 - tanh(u)^2) written stably: 2 * (log 2 - u - softplus(-2u)).
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return torch.tanh(u), (gaussian_logp - log_det).sum(-1)

    def deterministic(self, obs: Tensor) -> Tensor:
        return torch.tanh(self(obs)[0])


class EnsembleMLP(nn.Module):
    """`members` independent MLPs of `mlp`'s shape, evaluated together: every layer is one batched
    matmul over the members, so twin critics cost the kernels of one (and run larger GEMMs).
    Each member is initialised as `nn.Linear` would be; LayerNorm affine parameters are per member.
    Input and output widths are padded to `aligned` ones (zero weights there, see ALIGN)."""

    def __init__(self, members: int, in_dim: int, hidden_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        widths = [in_dim, hidden_dim, max(hidden_dim // 2, 1), max(hidden_dim // 4, 1), out_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        last = len(widths) - 2
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            bound = 1.0 / math.sqrt(a)
            w = torch.zeros(members, aligned(a) if i == 0 else a, aligned(b) if i == last else b)
            bias = torch.zeros(members, 1, w.shape[-1])
            w[:, :a, :b].uniform_(-bound, bound)
            bias[..., :b].uniform_(-bound, bound)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(bias))
        self.norm_weights = nn.ParameterList([nn.Parameter(torch.ones(members, 1, w)) for w in widths[1:-1]])
        self.norm_biases = nn.ParameterList([nn.Parameter(torch.zeros(members, 1, w)) for w in widths[1:-1]])

    def forward(self, x: Tensor) -> Tensor:
        """(B, in) shared by all members, or (members, B, in) -> (members, B, out)."""
        x = F.pad(x, (0, self.weights[0].shape[-2] - self.in_dim))
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            # matmul, then the bias in the next fused kernel: baddbmm would first copy the bias into
            # every row of its output (a copy kernel per layer under inductor).
            x = torch.matmul(x, w) + b
            if i < last:
                x = F.silu(torch.addcmul(self.norm_biases[i], F.layer_norm(x, x.shape[-1:]), self.norm_weights[i]))
        return x[..., : self.out_dim]


class TwinDistributionalCritic(nn.Module):
    """Two independent C51 critics over (critic_obs, action); forward returns logits (2, B, num_atoms)."""

    def __init__(self, critic_obs_dim: int, action_dim: int, hidden_dim: int, num_atoms: int):
        super().__init__()
        self.net = EnsembleMLP(2, critic_obs_dim + action_dim, hidden_dim, num_atoms)

    def forward(self, critic_obs: Tensor, action: Tensor) -> Tensor:
        return self.net(torch.cat([critic_obs, action.to(critic_obs.dtype)], dim=-1))


class ActingPolicy(nn.Module):
    """What acts and what is exported: observation normalisation followed by the actor.

    It owns its own copies of the weights and statistics; the learner refreshes them with
    `publish_from`, so acting never reads tensors that a training step is writing.
    """

    def __init__(self, actor: Actor, normalizer: RunningNormalizer):
        super().__init__()
        self.actor = actor
        self.normalize_obs = normalizer.enabled
        self.clip = normalizer.clip
        self.register_buffer("loc", normalizer.loc.detach().clone())
        self.register_buffer("scale", normalizer.scale.detach().clone())
        self.requires_grad_(False)

    @torch.no_grad()
    def publish_from(self, actor: Actor, normalizer: RunningNormalizer) -> None:
        torch._foreach_copy_(list(self.actor.parameters()), [p.detach() for p in actor.parameters()])
        self.loc.copy_(normalizer.loc)
        self.scale.copy_(normalizer.scale)

    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        if self.normalize_obs:
            obs = ((obs - self.loc) * self.scale).clamp(-self.clip, self.clip)
        if deterministic:
            return self.actor.deterministic(obs)
        return self.actor.sample(obs)[0]
