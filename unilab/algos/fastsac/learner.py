"""FastSAC: SAC with twin distributional (C51) critics, LayerNorm MLPs and large batches.

The update cycle, acting and checkpoints are the shared skeleton's (unilab/algos/base.py); this file
supplies the networks, optimisers and losses.

Choices worth knowing:
- observations and critic observations are normalised by running statistics (updated in `add`);
- target entropy is -action_dim * (1 - target_entropy_ratio) (ratio 0: SAC's usual -|A|);
- clipped double-Q in the target: per sample, the target critic whose expected value is smaller provides
  the whole next-state distribution;
- the actor maximises the mean of the two critics' expected values (the min is already in the target);
- AdamW with weight decay for actor and critic, none for log_alpha (decay would drag alpha towards 1);
- with `symmetry`, half of each batch is mirrored left-right by the task's map (unilab.algos.symmetry).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from unilab.algos.base import OffPolicyLearner
from unilab.algos.common import categorical_projection
from unilab.algos.fastsac.networks import ActingPolicy, Actor, TwinDistributionalCritic
from unilab.algos.normalizer import RunningNormalizer
from unilab.algos.replay import gather_rows


class FastSACLearner(OffPolicyLearner):
    metric_names = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean")

    def __init__(self, cfg, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        self.target_entropy = -action_dim * (1.0 - cfg.target_entropy_ratio)
        super().__init__(cfg, obs_dim, critic_obs_dim, action_dim, device, seed)

    def _build_networks(self):
        cfg, dev = self.cfg, self.device
        actor = Actor(self.obs_dim, self.action_dim, cfg.actor_hidden_dim, cfg.log_std_min, cfg.log_std_max).to(dev)
        critic = TwinDistributionalCritic(self.critic_obs_dim, self.action_dim, cfg.critic_hidden_dim,
                                          cfg.num_atoms).to(dev)
        self.obs_norm = RunningNormalizer(self.obs_dim, cfg.obs_clip, enabled=cfg.obs_normalization).to(dev)
        self.critic_obs_norm = RunningNormalizer(self.critic_obs_dim, cfg.obs_clip,
                                                 enabled=cfg.obs_normalization).to(dev)
        return actor, critic

    def _build_optimisers(self):
        cfg = self.cfg

        def lr(name: str) -> float:  # the deprecated per-optimiser rates still apply where set
            own = getattr(cfg, f"{name}_lr", None)
            return cfg.lr if own is None else own

        # fused: one kernel per optimiser step instead of one per tensor (the cycle is launch-bound).
        adamw = dict(weight_decay=cfg.weight_decay, capturable=self.use_graph, fused=self.on_cuda)
        return (
            torch.optim.AdamW(self.critic.parameters(), lr("critic"), **adamw),
            torch.optim.AdamW(self.actor.parameters(), lr("actor"), **adamw),
            torch.optim.AdamW([self.log_alpha], lr("alpha"), **{**adamw, "weight_decay": 0.0}),
        )

    def _build_acting(self):
        return ActingPolicy(copy.deepcopy(self.actor), self.obs_norm)

    def _update_statistics(self, rows: dict[str, Tensor]) -> None:
        self.obs_norm.update(rows["obs"])
        self.critic_obs_norm.update(rows["critic_obs"])

    # ------------------------------------------------------------------ losses

    def _critic_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-entropy of both critics against the projected target distribution (summed over the
        twins) on the replay rows `idx`, and the online critics' mean expected value."""
        cfg = self.cfg
        b = self._mirrored(gather_rows(data, idx))
        next_obs = self.obs_norm(b["next_obs"])
        critic_obs, next_critic_obs = self.critic_obs_norm(b["critic_obs"]), self.critic_obs_norm(b["next_critic_obs"])
        with torch.no_grad():
            with self._autocast():
                next_action, next_logp = self.actor.sample(next_obs)
                target_logits = self.critic_target(next_critic_obs, next_action)
            target_probs = target_logits.float().softmax(-1)  # (2, B, A)
            next_q = (target_probs * self.support).sum(-1)  # (2, B)
            next_probs = torch.where((next_q[0] <= next_q[1]).unsqueeze(-1), target_probs[0], target_probs[1])
            discount = cfg.gamma * (1.0 - b["terminated"])
            target_atoms = b["reward"].unsqueeze(-1) + discount.unsqueeze(-1) * (
                self.support - alpha * next_logp.unsqueeze(-1)
            )
            target = categorical_projection(next_probs, target_atoms, self.support, method="scatter")

        with self._autocast():
            logits = self.critic(critic_obs, b["action"])
        log_probs = logits.float().log_softmax(-1)
        loss = -(target * log_probs).sum(-1).mean(-1).sum()
        q_mean = (log_probs.detach().exp() * self.support).sum(-1).mean()
        return loss, q_mean

    def _actor_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """SAC actor loss on the mean of the twins' expected values (replay rows `idx`), the temperature's
        loss and the log-probs of the actions."""
        b = self._mirrored(gather_rows(data, idx, ("obs", "critic_obs")))
        obs, critic_obs = self.obs_norm(b["obs"]), self.critic_obs_norm(b["critic_obs"])
        with self._autocast():
            action, logp = self.actor.sample(obs)
            q = self._expected(self.critic(critic_obs, action)).mean(0)
        alpha_loss = (self.log_alpha.exp() * (-logp.detach() - self.target_entropy)).mean()
        return (alpha * logp - q).mean(), alpha_loss, logp

    # ------------------------------------------------------------------ acting and checkpoints

    def _publish(self) -> None:
        self.acting.publish_from(self.actor, self.obs_norm)

    def _extra_state(self) -> dict:
        return {"obs_norm": self.obs_norm.state_dict(), "critic_obs_norm": self.critic_obs_norm.state_dict()}

    def _load_extra_state(self, sd: dict) -> None:
        self.obs_norm.load_state_dict(sd["obs_norm"])
        self.critic_obs_norm.load_state_dict(sd["critic_obs_norm"])

    def _upgrade_checkpoint(self, sd: dict) -> dict:
        return _with_aligned_widths(sd, self)

    def _onnx_policy(self) -> torch.nn.Module:
        return _Deterministic(ActingPolicy(copy.deepcopy(self.actor), self.obs_norm))


def _zero_padded(saved: Tensor, shape: torch.Size) -> Tensor:
    """`saved` with zeros appended along every dimension where it is shorter than `shape`."""
    if saved.shape == shape or saved.dim() != len(shape) or any(a > b for a, b in zip(saved.shape, shape)):
        return saved  # equal, or not a narrower copy: load_state_dict reports any mismatch
    out = saved.new_zeros(shape)
    out[tuple(slice(0, n) for n in saved.shape)] = saved
    return out


def _with_aligned_widths(sd: dict, learner: FastSACLearner) -> dict:
    """A checkpoint written before the first/last layer widths were padded to multiples of 8: its
    weights and optimiser moments are zero-padded to today's shapes (exactly what the padding holds)."""
    sd = dict(sd)
    for name in ("actor", "critic", "critic_target"):
        ref = getattr(learner, name).state_dict()
        sd[name] = {k: _zero_padded(v, ref[k].shape) if k in ref else v for k, v in sd[name].items()}
    for name, module in (("actor_opt", learner.actor), ("critic_opt", learner.critic)):
        shapes = [p.shape for p in module.parameters()]
        state = {i: {k: _zero_padded(v, shapes[i]) if torch.is_tensor(v) and v.dim() and i < len(shapes) else v
                     for k, v in per_param.items()}
                 for i, per_param in sd[name]["state"].items()}
        sd[name] = {**sd[name], "state": state}
    return sd


class _Deterministic(torch.nn.Module):
    def __init__(self, policy: ActingPolicy):
        super().__init__()
        self.policy = policy

    def forward(self, obs: Tensor) -> Tensor:
        return self.policy(obs, deterministic=True)
