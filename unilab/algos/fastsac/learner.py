"""FastSAC: SAC with twin distributional (C51) critics, large batches and CUDA-graph updates.

One call to `update` is one cycle of `updates_per_step` gradient steps. Each step samples a fresh batch
from the on-device replay, trains both critics against a projected distributional target, Polyak-updates
the target critics and, on the steps the static policy-delay pattern selects, trains the actor and the
entropy temperature. On CUDA the whole cycle is captured once as a CUDA graph and replayed afterwards.

Choices worth knowing:
- target entropy is -action_dim * (1 - target_entropy_ratio) (ratio 0: SAC's usual -|A|);
- clipped double-Q in the target: per sample, the target critic whose expected value is smaller provides
  the whole next-state distribution;
- the actor maximises the mean of the two critics' expected values (the min is already in the target);
- log_alpha uses AdamW without weight decay (decay would drag alpha towards 1).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor

from unilab.algos.base import OffPolicyLearner
from unilab.algos.fastsac.networks import ActingPolicy, Actor, TwinDistributionalCritic
from unilab.algos.normalizer import RunningNormalizer
from unilab.algos.replay import gather_rows

METRICS = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean")


def project_distribution(probs: Tensor, target_atoms: Tensor, support: Tensor) -> Tensor:
    """C51 projection: the mass `probs[b, i]` sitting at `target_atoms[b, i]` is split linearly between
    the two neighbouring atoms of the fixed, evenly spaced `support` (values outside are clamped to it)."""
    num_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    pos = (target_atoms.clamp(v_min, v_max) - v_min) / delta  # fractional atom index in [0, A-1]
    # A non-finite target must not become an out-of-range index (a device-side assert on the GPU,
    # fatal to every MPS client); its NaN still reaches the loss through upper_weight, for the NaN guard.
    lower = torch.nan_to_num(pos, nan=0.0).floor().clamp(0, num_atoms - 1)
    upper_weight = pos - lower
    lower_idx = lower.long()
    # At the top atom, pos == lower and the (clamped) upper neighbour receives zero mass.
    upper_idx = (lower_idx + 1).clamp(max=num_atoms - 1)
    out = torch.zeros_like(probs)
    out.scatter_add_(-1, lower_idx, probs * (1.0 - upper_weight))
    out.scatter_add_(-1, upper_idx, probs * upper_weight)
    return out


class FastSACLearner(OffPolicyLearner):
    def __init__(self, cfg, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        super().__init__(cfg, obs_dim, critic_obs_dim, action_dim, device, seed)
        if cfg.policy_delay < 1 or cfg.updates_per_step < cfg.policy_delay:
            raise ValueError(
                f"fastsac: policy_delay ({cfg.policy_delay}) must be >= 1 and <= updates_per_step "
                f"({cfg.updates_per_step}), or the actor would never be trained"
            )
        torch.manual_seed(seed)
        dev = self.device
        self.on_cuda = dev.type == "cuda"
        self.use_graph = self.on_cuda and bool(cfg.cuda_graph)
        self.bf16 = self.on_cuda and bool(cfg.bf16)

        self.actor = Actor(obs_dim, action_dim, cfg.actor_hidden_dim, cfg.log_std_min, cfg.log_std_max).to(dev)
        self.critic = TwinDistributionalCritic(critic_obs_dim, action_dim, cfg.critic_hidden_dim, cfg.num_atoms).to(dev)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.obs_norm = RunningNormalizer(obs_dim, cfg.obs_clip, enabled=cfg.obs_normalization).to(dev)
        self.critic_obs_norm = RunningNormalizer(critic_obs_dim, cfg.obs_clip, enabled=cfg.obs_normalization).to(dev)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=dev))
        self.target_entropy = -action_dim * (1.0 - cfg.target_entropy_ratio)
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms, device=dev)

        # capturable keeps the optimiser's step counters on the device, as graph capture requires.
        # fused: one kernel per optimiser step instead of one per tensor (the cycle is launch-bound).
        adamw = dict(weight_decay=cfg.weight_decay, capturable=self.use_graph, fused=self.on_cuda)
        self.critic_opt = torch.optim.AdamW(self.critic.parameters(), cfg.critic_lr, **adamw)
        self.actor_opt = torch.optim.AdamW(self.actor.parameters(), cfg.actor_lr, **adamw)
        self.alpha_opt = torch.optim.AdamW([self.log_alpha], cfg.alpha_lr, **{**adamw, "weight_decay": 0.0})

        # The losses as the cycle calls them: compiled by inductor (fuses LayerNorm, softmaxes and the C51
        # projection, forward and backward) before the cycle is captured, or plain eager kernels.
        self._critic_loss_fn = self._maybe_compiled(self._critic_loss)
        self._actor_loss_fn = self._maybe_compiled(self._actor_loss)

        self._init_shared_state(METRICS)

        self.acting = ActingPolicy(copy.deepcopy(self.actor), self.obs_norm)
        self._start_acting()

    # ------------------------------------------------------------------ data

    def add(self, batch: dict[str, Tensor]) -> None:
        rows = self._store(batch)
        self.obs_norm.update(rows["obs"])
        self.critic_obs_norm.update(rows["critic_obs"])

    # ------------------------------------------------------------------ training

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False)

    def _expected(self, logits: Tensor) -> Tensor:
        return (logits.float().softmax(-1) * self.support).sum(-1)

    def _critic_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-entropy of both critics against the projected target distribution (summed over the
        twins) on the replay rows `idx`, and the online critics' mean expected value."""
        cfg = self.cfg
        b = gather_rows(data, idx)
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
            target = project_distribution(next_probs, target_atoms, self.support)

        with self._autocast():
            logits = self.critic(critic_obs, b["action"])
        log_probs = logits.float().log_softmax(-1)
        loss = -(target * log_probs).sum(-1).mean(-1).sum()
        q_mean = (log_probs.detach().exp() * self.support).sum(-1).mean()
        return loss, q_mean

    def _actor_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """SAC actor loss on the mean of the twins' expected values (replay rows `idx`), the temperature's
        loss and the log-probs of the actions. Call with the critic frozen, so that no critic weight
        gradient is computed."""
        b = gather_rows(data, idx, ("obs", "critic_obs"))
        obs, critic_obs = self.obs_norm(b["obs"]), self.critic_obs_norm(b["critic_obs"])
        with self._autocast():
            action, logp = self.actor.sample(obs)
            q = self._expected(self.critic(critic_obs, action)).mean(0)
        alpha_loss = (self.log_alpha.exp() * (-logp.detach() - self.target_entropy)).mean()
        return (alpha * logp - q).mean(), alpha_loss, logp

    def _step(self, update_actor: bool) -> dict[str, Tensor]:
        cfg = self.cfg
        data, idx = self.replay.storage, self.replay.sample_indices(cfg.batch_size)
        alpha = self.log_alpha.detach().exp()

        critic_loss, q_mean = self._critic_loss_fn(data, idx, alpha)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self._critic_grad_sync is not None:
            self._critic_grad_sync()
        self.critic_opt.step()
        with torch.no_grad():
            target_params = list(self.critic_target.parameters())
            torch._foreach_lerp_(target_params, list(self.critic.parameters()), cfg.tau)
        out = {"critic_loss": critic_loss.detach(), "q_mean": q_mean}

        if update_actor:
            with self._critic_frozen():
                actor_loss, alpha_loss, logp = self._actor_loss_fn(data, idx, alpha)
            self._actor_and_temperature_backward(actor_loss, alpha_loss)
            self.actor_opt.step()
            self.alpha_opt.step()
            out["actor_loss"] = actor_loss.detach()
            out["entropy"] = -logp.detach().mean()
        return out

    def _cycle(self) -> Tensor:
        """All steps of one update; returns the metrics stacked in METRICS order."""
        steps = [self._step(update_actor) for update_actor in self.actor_schedule]

        def mean(key: str) -> Tensor:
            return torch.stack([s[key] for s in steps if key in s]).mean()

        alpha = self.log_alpha.detach().exp()
        return torch.stack([mean("critic_loss"), mean("actor_loss"), alpha, mean("entropy"), mean("q_mean")])

    # ------------------------------------------------------------------ acting

    def publish_policy(self) -> None:
        if self.on_cuda:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(self._acted)  # don't overwrite weights an in-flight act() is reading
            self.acting.publish_from(self.actor, self.obs_norm)
            self._published.record(stream)
        else:
            self.acting.publish_from(self.actor, self.obs_norm)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        if not self.on_cuda:
            return self._act_fn(obs, deterministic)
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(self._published)
        action = self._act_fn(obs, deterministic)
        self._acted.record(stream)
        return action

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "obs_norm": self.obs_norm.state_dict(),
            "critic_obs_norm": self.critic_obs_norm.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, sd: dict) -> None:
        # Module loads copy in place, so a captured graph would still see the new weights; the optimisers
        # however get fresh state tensors, so the graph is dropped and re-captured on the next update().
        sd = _with_aligned_widths(sd, self)
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.critic_target.load_state_dict(sd["critic_target"])
        self.obs_norm.load_state_dict(sd["obs_norm"])
        self.critic_obs_norm.load_state_dict(sd["critic_obs_norm"])
        with torch.no_grad():
            self.log_alpha.copy_(sd["log_alpha"])
        for name in ("actor_opt", "critic_opt", "alpha_opt"):
            saved = sd[name]
            # A checkpoint written on another device/mode carries its own `capturable` flag; use ours.
            groups = [{**g, "capturable": self.use_graph} for g in saved["param_groups"]]
            getattr(self, name).load_state_dict({**saved, "param_groups": groups})
        self.num_updates = int(sd["num_updates"])
        self._graph = None
        self._graph_metrics = None
        self.publish_policy()

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
