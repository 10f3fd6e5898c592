"""FlashSAC networks: norm-bounded residual trunks, a tanh-Gaussian actor and a categorical critic ensemble.

Every layer carries a leading ensemble axis E (the actor is an ensemble of one), so the critic's members run
as batched matmuls, not a Python loop. Tensors flow as (E, B, features).

Norm bounds, restored by `project_weights_` after every optimiser step:
- linear weights: every output unit's weight row has unit L2 norm, so a layer can only rotate features,
  never inflate them;
- BatchNorm affine (gain and bias together) and RMSNorm gain: norm sqrt(d) per member, their value at
  initialisation, so they can redistribute scale across features but not grow it.
Output biases (policy heads, critic logits) are the only free-norm parameters.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_EPS = 1e-8


class UnitLinear(nn.Module):
    """Bias-free linear map per ensemble member with unit-norm weight rows."""

    def __init__(self, members: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, out_dim, in_dim))
        with torch.no_grad():
            for w in self.weight:
                nn.init.orthogonal_(w)
        self.project_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(x, self.weight.transpose(-1, -2))

    @torch.no_grad()
    def project_(self) -> None:
        self.weight.div_(self.weight.norm(dim=-1, keepdim=True).clamp(min=_EPS))


class EnsembleBatchNorm(nn.Module):
    """BatchNorm over the batch axis, separately per member; computes in float32 under autocast.

    With `batch_stats` the batch is normalised by its own statistics and the running ones are updated at
    rate max(momentum, 1 / updates): a plain average over the first 1/momentum updates, so acting with the
    running statistics is sensible from the first update on. Otherwise the running statistics are used.
    """

    def __init__(self, members: int, dim: int, momentum: float = 0.01, eps: float = 1e-5):
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(members, dim))
        self.bias = nn.Parameter(torch.zeros(members, dim))
        self.register_buffer("running_mean", torch.zeros(members, dim))
        self.register_buffer("running_var", torch.ones(members, dim))
        self.register_buffer("updates", torch.zeros(()))

    def forward(self, x: Tensor, batch_stats: bool) -> Tensor:
        x = x.float()
        if batch_stats:
            var, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
            with torch.no_grad():
                self.updates.add_(1.0)
                rate = torch.clamp(1.0 / self.updates, min=self.momentum)
                unbiased = x.shape[1] / max(x.shape[1] - 1, 1)
                self.running_mean.lerp_(mean.squeeze(1), rate)
                self.running_var.lerp_(var.squeeze(1) * unbiased, rate)
        else:
            mean, var = self.running_mean.unsqueeze(1), self.running_var.unsqueeze(1)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)

    @torch.no_grad()
    def project_(self) -> None:
        norm = torch.sqrt(self.weight.square().sum(-1, keepdim=True) + self.bias.square().sum(-1, keepdim=True))
        factor = math.sqrt(self.weight.shape[-1]) / norm.clamp(min=_EPS)
        self.weight.mul_(factor)
        self.bias.mul_(factor)


class EnsembleRMSNorm(nn.Module):
    def __init__(self, members: int, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(members, dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x.float()
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight.unsqueeze(1)

    @torch.no_grad()
    def project_(self) -> None:
        norm = self.weight.norm(dim=-1, keepdim=True).clamp(min=_EPS)
        self.weight.mul_(math.sqrt(self.weight.shape[-1]) / norm)


class InvertedResidualBlock(nn.Module):
    """x + BN(W_down ReLU(BN(W_up x))): widen by `expansion`, then a linear bottleneck back into the stream."""

    def __init__(self, members: int, dim: int, expansion: int, momentum: float):
        super().__init__()
        self.up = UnitLinear(members, dim, dim * expansion)
        self.up_norm = EnsembleBatchNorm(members, dim * expansion, momentum)
        self.down = UnitLinear(members, dim * expansion, dim)
        self.down_norm = EnsembleBatchNorm(members, dim, momentum)

    def forward(self, x: Tensor, batch_stats: bool) -> Tensor:
        h = F.relu(self.up_norm(self.up(x), batch_stats))
        return x + self.down_norm(self.down(h), batch_stats)


class Trunk(nn.Module):
    """Input BatchNorm -> unit-norm embedding -> residual blocks -> RMSNorm; (B, in) or (E, B, in) -> (E, B, hidden)."""

    def __init__(self, members: int, in_dim: int, hidden_dim: int, num_blocks: int, expansion: int, momentum: float):
        super().__init__()
        self.members = members
        self.input_norm = EnsembleBatchNorm(members, in_dim, momentum)
        self.embed = UnitLinear(members, in_dim, hidden_dim)
        self.blocks = nn.ModuleList(
            InvertedResidualBlock(members, hidden_dim, expansion, momentum) for _ in range(num_blocks)
        )
        self.output_norm = EnsembleRMSNorm(members, hidden_dim)

    def forward(self, x: Tensor, batch_stats: bool) -> Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.members, -1, -1)
        x = self.embed(self.input_norm(x, batch_stats))
        for block in self.blocks:
            x = block(x, batch_stats)
        return self.output_norm(x)


def project_weights_(module: nn.Module) -> None:
    """Put every norm-bounded layer of `module` back on its sphere (after an optimiser step or an EMA)."""
    for m in module.modules():
        if isinstance(m, (UnitLinear, EnsembleBatchNorm, EnsembleRMSNorm)):
            m.project_()


def tanh_log_det(u: Tensor) -> Tensor:
    """log(1 - tanh(u)^2), stable for large |u|: 2 * (log 2 - u - softplus(-2u))."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy over actions in [-1, 1], reading raw observations (the input BatchNorm
    normalises them)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dim: int, num_blocks: int, expansion: int,
                 momentum: float, log_std_min: float, log_std_max: float, init_std: float = 0.15):
        super().__init__()
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        self.trunk = Trunk(1, obs_dim, hidden_dim, num_blocks, expansion, momentum)
        self.mean_head = UnitLinear(1, hidden_dim, action_dim)
        self.mean_bias = nn.Parameter(torch.zeros(action_dim))
        self.log_std_head = UnitLinear(1, hidden_dim, action_dim)
        # Centre the initial log-std on init_std (the head's own output still spreads it per sample).
        frac = (math.log(init_std) - log_std_min) / (log_std_max - log_std_min)
        frac = min(max(frac, 1e-3), 1 - 1e-3)
        self.log_std_bias = nn.Parameter(torch.full((action_dim,), math.log(frac / (1 - frac))))

    def forward(self, obs: Tensor, batch_stats: bool = False) -> tuple[Tensor, Tensor]:
        """Pre-tanh mean and log-std (B, action_dim), float32."""
        h = self.trunk(obs, batch_stats)
        mean = (self.mean_head(h)[0] + self.mean_bias).float()
        raw = (self.log_std_head(h)[0] + self.log_std_bias).float()
        log_std = self.log_std_min + (self.log_std_max - self.log_std_min) * torch.sigmoid(raw)
        return mean, log_std

    def sample(self, obs: Tensor, batch_stats: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Reparameterised action in [-1, 1], its log-probability, and the per-dimension log-std of the action
        itself (pre-tanh log-std plus the tanh log-Jacobian at the sample)."""
        mean, log_std = self(obs, batch_stats)
        noise = torch.randn_like(mean)
        u = mean + noise * log_std.exp()
        log_det = tanh_log_det(u)
        gaussian_logp = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
        return torch.tanh(u), (gaussian_logp - log_det).sum(-1), log_std + log_det

    def deterministic(self, obs: Tensor) -> Tensor:
        return torch.tanh(self(obs)[0])

    def with_noise(self, obs: Tensor, noise: Tensor) -> Tensor:
        """Action for a given standard-normal noise sample (acting with repeated noise)."""
        mean, log_std = self(obs)
        return torch.tanh(mean + noise * log_std.exp())


class CategoricalCritic(nn.Module):
    """Ensemble of categorical Q-distributions over (critic_obs, action); returns logits (E, B, num_atoms)."""

    def __init__(self, critic_obs_dim: int, action_dim: int, members: int, hidden_dim: int, num_blocks: int,
                 expansion: int, momentum: float, num_atoms: int):
        super().__init__()
        self.trunk = Trunk(members, critic_obs_dim + action_dim, hidden_dim, num_blocks, expansion, momentum)
        self.head = UnitLinear(members, hidden_dim, num_atoms)
        self.head_bias = nn.Parameter(torch.zeros(members, num_atoms))

    def forward(self, critic_obs: Tensor, action: Tensor, batch_stats: bool) -> Tensor:
        x = torch.cat([critic_obs, action.to(critic_obs.dtype)], dim=-1)
        return (self.head(self.trunk(x, batch_stats)) + self.head_bias.unsqueeze(1)).float()


class ActingPolicy(nn.Module):
    """A private copy of the actor (weights and BatchNorm statistics) that acts and is exported.

    The learner refreshes it with `publish_from`, so acting never reads tensors a training step is writing.
    """

    def __init__(self, actor: Actor):
        super().__init__()
        self.actor = copy.deepcopy(actor).requires_grad_(False)

    @torch.no_grad()
    def publish_from(self, actor: Actor) -> None:
        src = [t.detach() for t in (*actor.parameters(), *actor.buffers())]
        torch._foreach_copy_([*self.actor.parameters(), *self.actor.buffers()], src)

    def forward(self, obs: Tensor, noise: Tensor | None = None) -> Tensor:
        if noise is None:
            return self.actor.deterministic(obs)
        return self.actor.with_noise(obs, noise)
