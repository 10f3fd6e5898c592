"""FlashSAC: SAC made stable at large scale by bounding weight, feature and return norms.

The update cycle, acting and checkpoints are the shared skeleton's (unilab/algos/base.py); this file
supplies the networks, optimisers and losses, and after every optimiser step (and every EMA) projects the
norm-bounded layers back onto their spheres.

Choices worth knowing:
- BatchNorm statistics: critic and target critic see one joint batch of (s, a) and (s', a'), so both halves
  are normalised alike (the loss reads the first half, the target the second); the next action comes
  from the actor with running statistics, as when acting; the actor's loss runs it on batch statistics and
  reads the critic with running statistics;
- clipped double-Q in the target: per sample, the member whose expected value is smallest provides the
  whole next-state distribution; the actor maximises the members' mean expected value;
- rewards are scaled by `ReturnNormalizer` (statistics updated in `add`), so v_min/v_max are in units of
  the normalised return;
- temperature: log_alpha follows the gradient of log_alpha * (log std_a - log target_action_std), where
  log std_a is the batch mean over samples and action dimensions of the action-space log-std
  (pre-tanh log-std + tanh log-Jacobian at the sample): alpha grows while the policy is narrower than the
  target std and shrinks while it is wider;
- one learning rate for actor, critic and temperature, held in a device tensor that the (captured) cycle
  recomputes from a device step counter before every gradient step (capturable Adam reads it);
- acting: every env holds its exploration noise for a random number of steps (`RepeatedNoise`).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor

from unilab.algos.base import OffPolicyLearner
from unilab.algos.common import (
    RepeatedNoise,
    ReturnNormalizer,
    categorical_projection,
    repeat_length_probs,
    warmup_cosine,
)
from unilab.algos.flashsac.networks import (
    ActingPolicy,
    Actor,
    CategoricalCritic,
    project_weights_,
)
from unilab.algos.replay import gather_rows


class FlashSACLearner(OffPolicyLearner):
    metric_names = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean", "action_std", "lr", "reward_scale")

    def __init__(self, cfg, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        if cfg.num_critics < 2:
            raise ValueError(f"flashsac: num_critics must be >= 2 for clipped double-Q, got {cfg.num_critics}")
        if not cfg.target_action_std > 0:
            raise ValueError(f"flashsac: target_action_std must be positive, got {cfg.target_action_std}")
        self.log_target_std = math.log(cfg.target_action_std)
        super().__init__(cfg, obs_dim, critic_obs_dim, action_dim, device, seed)

    def _build_networks(self):
        cfg, dev = self.cfg, self.device
        actor = Actor(
            self.obs_dim, self.action_dim, cfg.actor_hidden_dim, cfg.actor_num_blocks, cfg.expansion,
            cfg.batchnorm_momentum, cfg.log_std_min, cfg.log_std_max, init_std=cfg.target_action_std,
        ).to(dev)
        critic = CategoricalCritic(
            self.critic_obs_dim, self.action_dim, cfg.num_critics, cfg.critic_hidden_dim, cfg.critic_num_blocks,
            cfg.expansion, cfg.batchnorm_momentum, cfg.num_atoms,
        ).to(dev)
        # Observations need no normaliser: both networks open with a BatchNorm layer. Rewards get one.
        self.reward_norm = ReturnNormalizer(
            cfg.gamma, cfg.reward_norm_max_return, cfg.num_envs, enabled=cfg.reward_normalization
        ).to(dev)
        return actor, critic

    def _build_optimisers(self):
        cfg = self.cfg
        decay_steps = cfg.lr_decay_steps or cfg.max_iterations * cfg.updates_per_step
        self._schedule = {"init": cfg.lr_init, "peak": cfg.lr, "end": cfg.lr_end,
                          "warmup_steps": cfg.lr_warmup_steps, "total_steps": decay_steps}
        self.lr_step = torch.zeros((), device=self.device)  # gradient steps taken, as the schedule counts them
        self.lr = warmup_cosine(self.lr_step, **self._schedule)
        # All three optimisers hold this very tensor as their lr. Tensor learning rates need capturable
        # Adam on CUDA (graph or not); on the CPU the single-tensor Adam reads it eagerly.
        return (
            torch.optim.Adam(self.critic.parameters(), lr=self.lr, capturable=self.on_cuda),
            torch.optim.Adam(self.actor.parameters(), lr=self.lr, capturable=self.on_cuda),
            torch.optim.Adam([self.log_alpha], lr=self.lr, capturable=self.on_cuda),
        )

    def _compile_step_functions(self) -> None:
        super()._compile_step_functions()
        # The sphere projections and the EMA are compiled too, as separate functions: inductor's C++
        # backend failed to compile the critic's projection, the EMA reading it and the target's
        # projection as one graph.
        self._project_critic_fn = self._maybe_compiled(self._project_critic)
        self._ema_target_fn = self._maybe_compiled(self._ema_target)
        self._project_actor_fn = self._maybe_compiled(self._project_actor)

    def _build_acting(self):
        self.noise = RepeatedNoise(
            repeat_length_probs(self.cfg.noise_repeat_max, self.cfg.noise_repeat, self.cfg.noise_repeat_exponent),
            self.device,
        )
        return ActingPolicy(self.actor)

    def _update_statistics(self, rows: dict[str, Tensor]) -> None:
        self.reward_norm.update(rows["reward"], rows["terminated"])

    def gemm_batches(self, num_envs: int) -> tuple[int, ...]:
        """The skeleton's, and twice the batch: the critics see the batch and its successors stacked
        (`_critic_loss`)."""
        return (*super().gemm_batches(num_envs), 2 * int(self.cfg.batch_size))

    # ------------------------------------------------------------------ losses

    def _critic_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-entropy of the members against the projected target distribution (summed over members)
        on the replay rows `idx`, and their mean expected value. Updates both critics' BatchNorm statistics."""
        cfg = self.cfg
        b = gather_rows(data, idx)
        n = b["action"].shape[0]
        reward = self.reward_norm.normalize(b["reward"])
        joint_obs = torch.cat([b["critic_obs"], b["next_critic_obs"]])
        with torch.no_grad():
            with self._autocast():
                next_action, next_logp, _ = self.actor.sample(b["next_obs"])
                target_logits = self.critic_target(joint_obs, torch.cat([b["action"], next_action]), True)[:, n:]
            target_probs = target_logits.softmax(-1)  # (E, B, A)
            lowest = (target_probs * self.support).sum(-1).argmin(0)  # (B,)
            next_probs = target_probs.gather(0, lowest.view(1, -1, 1).expand(1, -1, target_probs.shape[-1]))[0]
            discount = cfg.gamma * (1.0 - b["terminated"])
            atoms = reward.unsqueeze(-1) + discount.unsqueeze(-1) * (self.support - alpha * next_logp.unsqueeze(-1))
            target = categorical_projection(next_probs, atoms, self.support, method="dense")

        with self._autocast():
            logits = self.critic(joint_obs, torch.cat([b["action"], next_action]), True)[:, :n]
        log_probs = logits.log_softmax(-1)
        loss = -(target * log_probs).sum(-1).mean(-1).sum()
        return loss, (log_probs.detach().exp() * self.support).sum(-1).mean()

    def _actor_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, ...]:
        """SAC actor loss on the members' mean expected value (critic read with running statistics) on the
        replay rows `idx`, the temperature's loss (towards the target action-space std), the log-probs of
        the actions and their mean action-space log-std."""
        b = gather_rows(data, idx, ("obs", "critic_obs"))
        with self._autocast():
            action, logp, action_log_std = self.actor.sample(b["obs"], batch_stats=True)
            q = self._expected(self.critic(b["critic_obs"], action, False)).mean(0)
        mean_log_std = action_log_std.detach().mean()
        alpha_loss = self.log_alpha * (mean_log_std - self.log_target_std)
        return (alpha * logp - q).mean(), alpha_loss, logp, mean_log_std

    # ------------------------------------------------------------------ the step around them

    def _step(self, update_actor: bool) -> dict[str, Tensor]:
        # This step's learning rate, from the device step counter (a captured cycle advances it too).
        self.lr.copy_(warmup_cosine(self.lr_step, **self._schedule))
        self.lr_step.add_(1.0)
        return super()._step(update_actor)

    def _after_critic_step(self) -> None:
        self._project_critic_fn()
        self._ema_target_fn()

    def _after_actor_step(self) -> None:
        self._project_actor_fn()

    def _project_critic(self) -> None:
        with torch.no_grad():
            project_weights_(self.critic)

    def _ema_target(self) -> None:
        """EMA of the (projected) critic into the target, then the target back onto its spheres."""
        self._polyak_target()
        with torch.no_grad():
            project_weights_(self.critic_target)

    def _project_actor(self) -> None:
        with torch.no_grad():
            project_weights_(self.actor)

    def _actor_metrics(self, logp: Tensor, mean_log_std: Tensor) -> dict[str, Tensor]:
        return {**super()._actor_metrics(logp), "action_std": mean_log_std.exp()}

    def _cycle_end_metrics(self) -> dict[str, Tensor]:
        return {**super()._cycle_end_metrics(), "lr": self.lr.clone(), "reward_scale": self.reward_norm.divisor.clone()}

    # ------------------------------------------------------------------ acting and checkpoints

    def _act(self, obs: Tensor, deterministic: bool) -> Tensor:
        """Deterministic: tanh of the mean. Otherwise every env (row) reuses one noise sample for a random
        number of calls (see `RepeatedNoise`); rows are assumed to be the same envs from call to call."""
        noise = None if deterministic else self.noise(obs.shape[0], self.action_dim)
        return self._act_fn(obs, noise)

    def _extra_state(self) -> dict:
        return {"reward_norm": self.reward_norm.state_dict(), "lr_step": self.lr_step.clone()}

    def _load_extra_state(self, sd: dict) -> None:
        self.reward_norm.load_state_dict(sd["reward_norm"])
        with torch.no_grad():
            self.lr_step.copy_(sd["lr_step"])
            self.lr.copy_(warmup_cosine(self.lr_step, **self._schedule))

    def _optimiser_state(self, opt: torch.optim.Optimizer) -> dict:
        # The learning rate is left out: it is the shared schedule tensor, restored from `lr_step` on load
        # (saving the live tensor would alias it).
        state = opt.state_dict()
        return {**state, "param_groups": [{k: v for k, v in g.items() if k != "lr"} for g in state["param_groups"]]}

    def _load_optimiser(self, opt: torch.optim.Optimizer, saved: dict) -> None:
        # Every group points back at the shared learning-rate tensor.
        super()._load_optimiser(opt, {**saved, "param_groups": [{**g, "lr": self.lr} for g in saved["param_groups"]]})
        for group in opt.param_groups:
            group["lr"] = self.lr

    def _onnx_policy(self) -> torch.nn.Module:
        return copy.deepcopy(self.acting)
