"""WarpSAC: FlashSAC's learner with three changes to how it trains:

- in every gradient step that trains the actor, the actor and temperature take their step first and the
  critic then trains on the same batch, its target reading the updated policy and temperature; each such
  step opens its group of `policy_delay` steps (FlashSAC: the critic first, the actor closing the group);
- replay rows are drawn by the age of their transition (`AgeBiasedSampler`; `replay_sampling.decay_step`
  0 is FlashSAC's uniform draw);
- the norm bounds of FlashSAC's networks can be switched off per network (`actor_normalize_parameters`,
  `critic_normalize_parameters`).

Networks, losses, optimisers, the learning-rate schedule, reward normalisation, acting and checkpoints are
FlashSAC's (unilab/algos/flashsac/), the cycle the shared skeleton's (unilab/algos/base.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from unilab.algos.flashsac.learner import FlashSACLearner
from unilab.algos.flashsac.networks import EnsembleBatchNorm, EnsembleRMSNorm, UnitLinear
from unilab.algos.warpsac.replay import AgeBiasedSampler


class WarpSACLearner(FlashSACLearner):
    policy_before_critic = True

    def __init__(self, cfg, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        super().__init__(cfg, obs_dim, critic_obs_dim, action_dim, device, seed)
        bias = cfg.replay_sampling
        self.sampler = AgeBiasedSampler(self.replay, bias.decay_step, bias.min_weight, bias.num_buckets)

    def _build_networks(self):
        actor, critic = super()._build_networks()
        # Before the target critic is copied from the critic (the skeleton does that next).
        if not self.cfg.actor_normalize_parameters:
            free_parameters_(actor)
        if not self.cfg.critic_normalize_parameters:
            free_parameters_(critic)
        return actor, critic

    def _actor_schedule(self) -> list[bool]:
        delay = self.cfg.policy_delay
        return [k % delay == 0 for k in range(self.cfg.updates_per_step)]

    def _cycle(self) -> Tensor:
        self.sampler.prepare()
        return super()._cycle()

    def _sample_indices(self) -> Tensor:
        return self.sampler.sample(self.cfg.batch_size)

    def _after_critic_step(self) -> None:
        if self.cfg.critic_normalize_parameters:
            super()._after_critic_step()
        else:
            self._polyak_target()

    def _after_actor_step(self) -> None:
        if self.cfg.actor_normalize_parameters:
            super()._after_actor_step()


@torch.no_grad()
def free_parameters_(module: nn.Module) -> None:
    """The layout of `module`'s norm-bounded layers without their bounds: plain orthogonal weights (rows
    not rescaled to unit norm), unit norm gains and zero norm biases."""
    for m in module.modules():
        if isinstance(m, UnitLinear):
            for w in m.weight:
                nn.init.orthogonal_(w)
        elif isinstance(m, (EnsembleBatchNorm, EnsembleRMSNorm)):
            m.weight.fill_(1.0)
            if isinstance(m, EnsembleBatchNorm):
                m.bias.zero_()
