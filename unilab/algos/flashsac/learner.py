"""FlashSAC: SAC made stable at large scale by bounding weight, feature and return norms.

One call to `update` is one cycle of `updates_per_step` gradient steps. Each step samples a batch from the
on-device replay, trains the critic ensemble on a projected categorical target, EMA-updates the target
critic and, on the steps the static policy-delay pattern selects, trains the actor and the temperature.
After every optimiser step (and every EMA) the norm-bounded layers are projected back onto their spheres.
On CUDA the whole cycle is captured once as a CUDA graph and replayed afterwards.

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
- the actor's loss runs with the critic frozen (requires_grad off), so no critic weight gradient is computed.
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

METRICS = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean", "action_std", "lr", "reward_scale")


class FlashSACLearner(OffPolicyLearner):
    def __init__(self, cfg, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        super().__init__(cfg, obs_dim, critic_obs_dim, action_dim, device, seed)
        if cfg.policy_delay < 1 or cfg.updates_per_step < cfg.policy_delay:
            raise ValueError(
                f"flashsac: policy_delay ({cfg.policy_delay}) must be >= 1 and <= updates_per_step "
                f"({cfg.updates_per_step}), or the actor would never be trained"
            )
        if cfg.num_critics < 2:
            raise ValueError(f"flashsac: num_critics must be >= 2 for clipped double-Q, got {cfg.num_critics}")
        if not cfg.target_action_std > 0:
            raise ValueError(f"flashsac: target_action_std must be positive, got {cfg.target_action_std}")
        torch.manual_seed(seed)
        dev = self.device
        self.on_cuda = dev.type == "cuda"
        self.use_graph = self.on_cuda and bool(cfg.cuda_graph)
        self.bf16 = self.on_cuda and bool(cfg.bf16)

        self.actor = Actor(
            obs_dim, action_dim, cfg.actor_hidden_dim, cfg.actor_num_blocks, cfg.expansion,
            cfg.batchnorm_momentum, cfg.log_std_min, cfg.log_std_max, init_std=cfg.target_action_std,
        ).to(dev)
        self.critic = CategoricalCritic(
            critic_obs_dim, action_dim, cfg.num_critics, cfg.critic_hidden_dim, cfg.critic_num_blocks,
            cfg.expansion, cfg.batchnorm_momentum, cfg.num_bins,
        ).to(dev)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.num_bins, device=dev)
        self.reward_norm = ReturnNormalizer(
            cfg.gamma, cfg.reward_norm_max_return, cfg.num_envs, enabled=cfg.reward_normalization
        ).to(dev)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=dev))
        self.log_target_std = math.log(cfg.target_action_std)

        decay_steps = cfg.lr_decay_steps or cfg.max_iterations * cfg.updates_per_step
        self._schedule = {"init": cfg.lr_init, "peak": cfg.lr, "end": cfg.lr_end,
                          "warmup_steps": cfg.lr_warmup_steps, "total_steps": decay_steps}
        self.lr_step = torch.zeros((), device=dev)  # gradient steps taken, as the schedule counts them
        self.lr = warmup_cosine(self.lr_step, **self._schedule)
        # All three optimisers hold this very tensor as their lr. Tensor learning rates need capturable
        # Adam on CUDA (graph or not); on the CPU the single-tensor Adam reads it eagerly.
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=self.lr, capturable=self.on_cuda)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=self.lr, capturable=self.on_cuda)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=self.lr, capturable=self.on_cuda)

        # BatchNorm running statistics stay per rank (each rank's own data), as the reward normaliser does.
        self._init_shared_state(METRICS)

        # What the cycle calls: compiled by inductor (fuses the BatchNorm/RMSNorm, residual, softmax and
        # projection kernels, forward and backward, and the sphere projections) before the cycle is
        # captured, or the eager methods.
        self._critic_loss_fn = self._maybe_compiled(self._critic_loss)
        self._actor_loss_fn = self._maybe_compiled(self._actor_loss)
        self._project_critic_fn = self._maybe_compiled(self._project_critic)
        self._ema_target_fn = self._maybe_compiled(self._ema_target)
        self._project_actor_fn = self._maybe_compiled(self._project_actor)

        self.acting = ActingPolicy(self.actor)
        self.noise = RepeatedNoise(
            repeat_length_probs(cfg.noise_repeat_max, cfg.noise_repeat, cfg.noise_repeat_exponent), dev
        )
        self._start_acting()

    # ------------------------------------------------------------------ data

    def add(self, batch: dict[str, Tensor]) -> None:
        rows = self._store(batch)
        # Observations need no normaliser here: both networks open with a BatchNorm layer.
        self.reward_norm.update(rows["reward"], rows["terminated"])

    # ------------------------------------------------------------------ training

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False)

    def _expected(self, logits: Tensor) -> Tensor:
        return (logits.softmax(-1) * self.support).sum(-1)

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
            target = categorical_projection(next_probs, atoms, self.support)

        with self._autocast():
            logits = self.critic(joint_obs, torch.cat([b["action"], next_action]), True)[:, :n]
        log_probs = logits.log_softmax(-1)
        loss = -(target * log_probs).sum(-1).mean(-1).sum()
        return loss, (log_probs.detach().exp() * self.support).sum(-1).mean()

    def _actor_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, ...]:
        """SAC actor loss on the members' mean expected value (critic read with running statistics) on the
        replay rows `idx`, the temperature's loss (towards the target action-space std), the log-probs of
        the actions and their mean action-space log-std. Call with the critic frozen, so that no critic
        weight gradient is computed."""
        b = gather_rows(data, idx, ("obs", "critic_obs"))
        with self._autocast():
            action, logp, action_log_std = self.actor.sample(b["obs"], batch_stats=True)
            q = self._expected(self.critic(b["critic_obs"], action, False)).mean(0)
        mean_log_std = action_log_std.detach().mean()
        alpha_loss = self.log_alpha * (mean_log_std - self.log_target_std)
        return (alpha * logp - q).mean(), alpha_loss, logp, mean_log_std

    # The sphere projections and the EMA, as separate functions: inductor (torch 2.13, C++) fails to
    # compile the critic's projection, the EMA reading it and the target's projection as one graph.
    def _project_critic(self) -> None:
        with torch.no_grad():
            project_weights_(self.critic)

    def _ema_target(self) -> None:
        """EMA of the (projected) critic into the target, then the target back onto its spheres."""
        with torch.no_grad():
            torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), self.cfg.tau)
            project_weights_(self.critic_target)

    def _project_actor(self) -> None:
        with torch.no_grad():
            project_weights_(self.actor)

    def _step(self, update_actor: bool) -> dict[str, Tensor]:
        self.lr.copy_(warmup_cosine(self.lr_step, **self._schedule))
        self.lr_step.add_(1.0)
        data, idx = self.replay.storage, self.replay.sample_indices(self.cfg.batch_size)
        alpha = self.log_alpha.detach().exp()

        critic_loss, q_mean = self._critic_loss_fn(data, idx, alpha)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self._critic_grad_sync is not None:
            self._critic_grad_sync()
        self.critic_opt.step()
        self._project_critic_fn()
        self._ema_target_fn()
        out = {"critic_loss": critic_loss.detach(), "q_mean": q_mean}

        if update_actor:
            with self._critic_frozen():
                actor_loss, alpha_loss, logp, mean_log_std = self._actor_loss_fn(data, idx, alpha)
            self._actor_and_temperature_backward(actor_loss, alpha_loss)
            self.actor_opt.step()
            self._project_actor_fn()
            self.alpha_opt.step()
            out["actor_loss"] = actor_loss.detach()
            out["entropy"] = -logp.detach().mean()
            out["action_std"] = mean_log_std.exp()
        return out

    def _cycle(self) -> Tensor:
        """All steps of one update; returns the metrics stacked in METRICS order."""
        steps = [self._step(update_actor) for update_actor in self.actor_schedule]

        def mean(key: str) -> Tensor:
            return torch.stack([s[key] for s in steps if key in s]).mean()

        return torch.stack([
            mean("critic_loss"), mean("actor_loss"), self.log_alpha.detach().exp(), mean("entropy"),
            mean("q_mean"), mean("action_std"), self.lr.clone(), self.reward_norm.divisor.clone(),
        ])

    # ------------------------------------------------------------------ acting

    def publish_policy(self) -> None:
        if self.on_cuda:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(self._acted)  # don't overwrite weights an in-flight act() is reading
            self.acting.publish_from(self.actor)
            self._published.record(stream)
        else:
            self.acting.publish_from(self.actor)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Deterministic: tanh of the mean. Otherwise every env (row) reuses one noise sample for a random
        number of calls (see `RepeatedNoise`); rows are assumed to be the same envs from call to call."""
        if self.on_cuda:
            torch.cuda.current_stream(self.device).wait_event(self._published)
        noise = None if deterministic else self.noise(obs.shape[0], self.action_dim)
        action = self._act_fn(obs, noise)
        if self.on_cuda:
            self._acted.record(torch.cuda.current_stream(self.device))
        return action

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "reward_norm": self.reward_norm.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "lr_step": self.lr_step.clone(),
            "actor_opt": _without_lr(self.actor_opt.state_dict()),
            "critic_opt": _without_lr(self.critic_opt.state_dict()),
            "alpha_opt": _without_lr(self.alpha_opt.state_dict()),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, sd: dict) -> None:
        # Module loads copy in place, so a captured graph would still see the new weights; the optimisers
        # however get fresh state tensors, so the graph is dropped and re-captured on the next update().
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.critic_target.load_state_dict(sd["critic_target"])
        self.reward_norm.load_state_dict(sd["reward_norm"])
        with torch.no_grad():
            self.log_alpha.copy_(sd["log_alpha"])
            self.lr_step.copy_(sd["lr_step"])
            self.lr.copy_(warmup_cosine(self.lr_step, **self._schedule))
        for name in ("actor_opt", "critic_opt", "alpha_opt"):
            saved = sd[name]
            # A checkpoint written on another device carries its own `capturable` flag; use ours, and point
            # every group back at the shared learning-rate tensor.
            groups = [{**g, "capturable": self.on_cuda, "lr": self.lr} for g in saved["param_groups"]]
            opt = getattr(self, name)
            opt.load_state_dict({**saved, "param_groups": groups})
            for group in opt.param_groups:
                group["lr"] = self.lr
        self.num_updates = int(sd["num_updates"])
        self._graph = None
        self._graph_metrics = None
        self.publish_policy()

    def _onnx_policy(self) -> torch.nn.Module:
        return copy.deepcopy(self.acting)


def _without_lr(opt_state: dict) -> dict:
    """Optimizer state with the learning rate left out: it is the shared schedule tensor, restored from
    `lr_step` on load (saving the live tensor would alias it)."""
    groups = [{k: v for k, v in g.items() if k != "lr"} for g in opt_state["param_groups"]]
    return {**opt_state, "param_groups": groups}
