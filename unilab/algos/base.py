"""The SAC skeleton every off-policy learner runs on, and `make_learner`, which builds the one its config
names (members: `unilab.registry`).

Design: one skeleton here; each algorithm supplies its networks, optimisers and losses (and a few hooks,
listed on `OffPolicyLearner`). Chosen over two standalone files read top to bottom (LeanRL style) because
what the learners share is not the textbook SAC update, which is short, but the machinery around it: the
on-device replay, the static policy-delay schedule, compiled losses captured with the whole cycle as one
CUDA graph after eager warm-up cycles, data-parallel gradient averaging, the acting copy ordered across
CUDA streams, checkpoints that drop the graph and keep the optimisers capturable. Each rule of that
machinery (no host sync, what must exist before capture, which stream waits for which) is easy to break
and costly to find; written once, it is fixed once and tested once for both learners.

Contract shared by all methods: nothing here may synchronise the host with the device (no `.item()`,
no `nonzero`, no Python branch on a tensor value); bookkeeping that the host needs is kept in Python ints.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import logging
import math
import os
import tempfile
import warnings
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from unilab.algos.config import first_update, with_renamed_keys
from unilab.algos.distributed import GradAllReduce, broadcast_, dp_active
from unilab.algos.replay import ReplayBuffer
from unilab.algos.transition import transition_shapes


class OffPolicyLearner(ABC):
    """SAC with a categorical critic, a target critic and a learnt entropy temperature.

    One call to `update` is one cycle of `updates_per_step` gradient steps. Each step samples a batch from
    the on-device replay, trains the critic on the algorithm's loss, moves the target critic towards it
    and, on the steps the static policy-delay schedule selects, trains the actor and the temperature
    (log alpha). On CUDA the whole cycle is captured once as a CUDA graph and replayed afterwards.

    An algorithm supplies `metric_names` and
    - `_build_networks`, `_build_optimisers`, `_build_acting`: what it trains and what acts;
    - `_critic_loss`, `_actor_loss`: its losses (compiled with the cycle, see `compiled`);
    - `_onnx_policy`: the exported policy;
    and, where it needs them, overrides the hooks that default to plain SAC: `_update_statistics` (in
    `add`), `_compile_step_functions`, `_actor_schedule`, `_sample_indices`, `_after_critic_step` (the
    target update), `_after_actor_step`, `_actor_metrics`, `_cycle_end_metrics`, `_publish`, `_act`, and
    the checkpoint hooks `_extra_state`, `_load_extra_state`, `_optimiser_state`, `_load_optimiser`,
    `_upgrade_checkpoint`; `gemm_batches`, where its networks see other batches; and
    `policy_before_critic`, the order within a step.
    """

    # What update() returns, in this order: means over the cycle's steps, or `_cycle_end_metrics`.
    metric_names: tuple[str, ...] = ()
    # Order within a gradient step that trains the actor: the critic first (plain SAC), or with True the
    # actor and temperature first, the critic's target then reading the updated policy and temperature.
    policy_before_critic: bool = False
    replay: ReplayBuffer
    _graph: torch.cuda.CUDAGraph | None = None
    _row_mirror: Any = None  # unilab.algos.symmetry.RowMirror, set by use_mirror
    _graph_metrics: Tensor | None = None

    def __init__(self, cfg: Any, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        self.cfg = cfg = with_renamed_keys(cfg)
        self.obs_dim = obs_dim
        self.critic_obs_dim = critic_obs_dim
        self.action_dim = action_dim
        self.device = dev = torch.device(device)
        self.seed = seed
        if cfg.policy_delay < 1 or cfg.updates_per_step < cfg.policy_delay:
            raise ValueError(
                f"{cfg.name}: policy_delay ({cfg.policy_delay}) must be >= 1 and <= updates_per_step "
                f"({cfg.updates_per_step}), or the actor would never be trained"
            )
        torch.manual_seed(seed)
        self.on_cuda = dev.type == "cuda"
        self.use_graph = self.on_cuda and bool(cfg.cuda_graph)
        self.bf16 = self.on_cuda and bool(cfg.bf16)

        self.actor, self.critic = self._build_networks()
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        # The floor is held on log alpha itself after each of its steps, so the temperature never sinks below it.
        self._log_min_alpha = math.log(cfg.min_alpha) if cfg.min_alpha > 0 else None
        self.log_alpha = nn.Parameter(torch.tensor(math.log(max(cfg.init_alpha, cfg.min_alpha)), device=dev))
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms, device=dev)
        self.critic_opt, self.actor_opt, self.alpha_opt = self._build_optimisers()
        self._compile_step_functions()

        # Data parallelism (one rank per GPU): start from rank 0's weights and average every gradient across
        # ranks before its optimiser step (actor and log_alpha in one collective). None: a single rank.
        # Running statistics (normalisers, BatchNorm) stay per rank, each over its own data.
        self._critic_grad_sync = None
        self._actor_grad_sync = None
        if dp_active():
            broadcast_(self.actor, self.critic, self.critic_target, self.log_alpha)
            self._critic_grad_sync = GradAllReduce(self.critic.parameters())
            self._actor_grad_sync = GradAllReduce([*self.actor.parameters(), self.log_alpha])

        shapes = transition_shapes(self.obs_dim, self.critic_obs_dim, self.action_dim)
        self.replay = ReplayBuffer(cfg.replay_capacity, {k: (shape, torch.float32) for k, shape in shapes.items()},
                                   self.device)
        self.actor_schedule = self._actor_schedule()
        self.num_updates = 0  # gradient steps taken, warm-up steps of the graph capture included
        self._chunk = 0  # rows per add(), for ready()

        # Acting runs on a private copy of the policy, refreshed by publish_policy; events order the two
        # (learner stream and acting stream). It is compiled with the cycle: under MPS its kernels queue
        # behind the update's for SMs one by one, and it lies on the collector's critical path.
        self.acting = self._build_acting()
        self._act_fn = self._maybe_compiled(self.acting)
        if self.on_cuda:
            self._published = torch.cuda.Event()
            self._acted = torch.cuda.Event()
        self.publish_policy()

    # ------------------------------------------------------------------ what each algorithm supplies

    @abstractmethod
    def _build_networks(self) -> tuple[nn.Module, nn.Module]:
        """The actor and the critic, on the device (built in that order: the seed's draws depend on it);
        also any normaliser of what they read."""

    @abstractmethod
    def _build_optimisers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer, torch.optim.Optimizer]:
        """Optimisers of the critic, the actor and `log_alpha`, in that order. `capturable` where the cycle
        is a CUDA graph (it keeps the step counters on the device); checkpoint loads keep each one's flag."""

    @abstractmethod
    def _build_acting(self) -> nn.Module:
        """The acting copy of the policy: called as `_act_fn(obs, ...)` by `_act`, refreshed by `_publish`."""

    @abstractmethod
    def _critic_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """The critic's loss on the replay rows `idx` of `data` (gathered inside, see `gather_rows`) and the
        critic's mean expected value (q_mean); `alpha` is the temperature, detached."""

    @abstractmethod
    def _actor_loss(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> tuple[Tensor, ...]:
        """(actor loss, temperature loss, log-probs of the sampled actions, *extras for `_actor_metrics`).
        Called with the critic frozen. The actor loss must read alpha detached and the temperature loss no
        actor weight: one backward pass then gives each optimiser its own loss's gradient."""

    @abstractmethod
    def _onnx_policy(self) -> nn.Module:
        """A copy of the policy as a module: obs -> deterministic action in [-1, 1], normaliser included."""

    # ------------------------------------------------------------------ data

    def use_mirror(self, mirror: Any) -> None:
        """Train on batches whose second half is mirrored with the task's `mirror` (a
        `unilab.algos.symmetry.Mirror`; algo.symmetry). Call before the first update: the losses read it."""
        from unilab.algos.symmetry import RowMirror

        mirror.check(self.obs_dim, self.critic_obs_dim, self.action_dim)
        self._row_mirror = RowMirror(mirror, self.device)

    def _mirrored(self, rows: dict[str, Tensor]) -> dict[str, Tensor]:
        """Gathered replay rows as the losses train on them: half mirrored where `use_mirror` was called."""
        return rows if self._row_mirror is None else self._row_mirror.mirror_half(rows)

    def add(self, batch: dict[str, Tensor]) -> None:
        """Append transitions (the fields of `unilab.algos.transition.TRANSITION_FIELDS`) to the replay and update the algorithm's running statistics with them."""
        n = batch["obs"].shape[0]
        rows = {key: batch[key].to(self.device, dtype).reshape(n, *shape)
                for key, (shape, dtype) in self.replay.spec.items()}
        self.replay.extend(rows)
        self._chunk = n
        self._update_statistics(rows)

    def _update_statistics(self, rows: dict[str, Tensor]) -> None:
        """Running statistics of the stored rows (observation or reward normalisers); none in plain SAC."""

    def ready(self) -> bool:
        """Whether the replay holds enough samples to start updating: the first-update rule's rows, one add() an
        iteration (host-side ints only)."""
        return self.replay.size >= first_update(self.cfg, self._chunk).rows

    def gemm_batches(self, num_envs: int) -> tuple[int, ...]:
        """The row counts the actor's and the critic's matrix products see, for the half-precision self-check
        under an MPS thread share (unilab.mps.gemm_check.weight_products): the update's batch, and acting on
        `num_envs` observations."""
        return (int(self.cfg.batch_size), num_envs)

    # ------------------------------------------------------------------ training

    @property
    def compiled(self) -> bool:
        """Whether the cycle's functions and acting are compiled: `cfg.compile`, or (null) wherever the
        cycle is a CUDA graph."""
        return self.use_graph if self.cfg.compile is None else bool(self.cfg.compile)

    def _maybe_compiled(self, fn):
        """`fn` compiled by inductor when `self.compiled`, else `fn` itself."""
        if not self.compiled:
            return fn
        if not getattr(self.cfg, "combo_kernels", False):
            return torch.compile(fn, dynamic=False, mode=self.cfg.compile_mode)
        # torch.compile takes a mode or options, not both: the mode's options, then ours.
        from torch._inductor import list_mode_options

        options = {**list_mode_options(self.cfg.compile_mode or "default"), "combo_kernels": True}
        return torch.compile(fn, dynamic=False, options=options)

    def _compile_step_functions(self) -> None:
        """The losses as the cycle calls them: compiled by inductor (fusing the networks' norms and
        activations, the softmaxes and the categorical projection, forward and backward) before the cycle
        is captured, or the plain methods."""
        self._critic_loss_fn = self._maybe_compiled(self._critic_loss)
        self._actor_loss_fn = self._maybe_compiled(self._actor_loss)

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False)

    def _expected(self, logits: Tensor) -> Tensor:
        """Expected value of the categorical distributions with these logits, over the support."""
        return (logits.float().softmax(-1) * self.support).sum(-1)

    @contextmanager
    def _critic_frozen(self):
        """The critic's weights need no gradient inside (the actor's loss reads the critic)."""
        self.critic.requires_grad_(False)
        try:
            yield
        finally:
            self.critic.requires_grad_(True)

    def _actor_schedule(self) -> list[bool]:
        """Which gradient steps of a cycle train the actor (static): the last of every `policy_delay`."""
        delay = self.cfg.policy_delay
        return [k % delay == delay - 1 for k in range(self.cfg.updates_per_step)]

    def _sample_indices(self) -> Tensor:
        """The replay rows of one gradient step: `batch_size` of them, drawn uniformly on the device."""
        return self.replay.sample_indices(self.cfg.batch_size)

    def _step(self, update_actor: bool) -> dict[str, Tensor]:
        """One gradient step on one sampled batch: the critic's and, where `update_actor`, the actor's and
        temperature's, after the critic's or (`policy_before_critic`) before it."""
        data, idx = self.replay.storage, self._sample_indices()
        alpha = self.log_alpha.detach().exp()
        out = {}
        if update_actor and self.policy_before_critic:
            out.update(self._actor_step(data, idx, alpha))
            alpha = self.log_alpha.detach().exp()  # the critic's target reads the updated temperature
        out.update(self._critic_step(data, idx, alpha))
        if update_actor and not self.policy_before_critic:
            out.update(self._actor_step(data, idx, alpha))
        return out

    def _critic_step(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> dict[str, Tensor]:
        critic_loss, q_mean = self._critic_loss_fn(data, idx, alpha)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self._critic_grad_sync is not None:
            self._critic_grad_sync()
        self.critic_opt.step()
        self._after_critic_step()
        return {"critic_loss": critic_loss.detach(), "q_mean": q_mean}

    def _actor_step(self, data: dict[str, Tensor], idx: Tensor, alpha: Tensor) -> dict[str, Tensor]:
        with self._critic_frozen():
            actor_loss, alpha_loss, logp, *extras = self._actor_loss_fn(data, idx, alpha)
        # Both losses in one backward pass, then (data parallel) averaged in one collective.
        self.actor_opt.zero_grad(set_to_none=True)
        self.alpha_opt.zero_grad(set_to_none=True)
        (actor_loss + alpha_loss).backward()
        if self._actor_grad_sync is not None:
            self._actor_grad_sync()
        self.actor_opt.step()
        self._after_actor_step()
        self.alpha_opt.step()
        if self._log_min_alpha is not None:
            with torch.no_grad():
                self.log_alpha.clamp_(min=self._log_min_alpha)
        return {"actor_loss": actor_loss.detach(), **self._actor_metrics(logp, *extras)}

    def _after_critic_step(self) -> None:
        """After the critic's optimiser step: move the target critic towards it."""
        self._polyak_target()

    def _polyak_target(self) -> None:
        """target <- target + tau * (critic - target), for every parameter (buffers are not averaged)."""
        with torch.no_grad():
            torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), self.cfg.tau)

    def _after_actor_step(self) -> None:
        """After the actor's optimiser step (before the temperature's); nothing in plain SAC."""

    def _actor_metrics(self, logp: Tensor, *extras: Tensor) -> dict[str, Tensor]:
        """Metrics of an actor step, from the log-probs and the extras `_actor_loss` returned."""
        return {"entropy": -logp.detach().mean()}

    def _cycle_end_metrics(self) -> dict[str, Tensor]:
        """Metrics read once, after the cycle's last step."""
        return {"alpha": self.log_alpha.detach().exp()}

    def _cycle(self) -> Tensor:
        """All steps of one update; returns the `metric_names` scalars, stacked."""
        steps = [self._step(update_actor) for update_actor in self.actor_schedule]
        at_end = self._cycle_end_metrics()

        def value(name: str) -> Tensor:
            return at_end[name] if name in at_end else torch.stack([s[name] for s in steps if name in s]).mean()

        return torch.stack([value(name) for name in self.metric_names])

    def precompile(self) -> bool:
        """Compile the cycle's functions now, and leave the learner exactly as it was.

        The learner process calls it while the collector compiles the simulation's kernels, so that the
        first update only captures the graph. It rehearses one cycle on random rows (`_rehearse_cycle`).
        False, doing nothing, where nothing is compiled or the replay holds rows already."""
        if not self.compiled or self.replay.size:
            return False
        self._rehearse_cycle()
        return True

    def _rehearse_cycle(self) -> None:
        """One cycle on random replay rows; then the weights, optimisers, statistics, update count and
        random state as they were before, and the replay empty again. What remains is what compiling and
        running the cycle leaves in caches (compiled code, cuBLAS workspaces)."""
        saved = copy.deepcopy(self.state_dict())
        cpu_rng = torch.get_rng_state()
        device_rng = torch.cuda.get_rng_state(self.device) if self.on_cuda else None
        rows = min(self.replay.capacity, self.cfg.batch_size)
        fake = {key: torch.randn((rows, *shape), device=self.device).to(dtype).clamp(-1.0, 1.0)
                for key, (shape, dtype) in self.replay.spec.items()}
        self.replay.extend(fake)
        self._cycle()
        if self.on_cuda:
            torch.cuda.synchronize(self.device)
        self.replay.clear()
        self.load_state_dict(saved)
        torch.set_rng_state(cpu_rng)
        if device_rng is not None:
            torch.cuda.set_rng_state(device_rng, self.device)

    def _capture(self) -> None:
        with torch.cuda.device(self.device):
            stream = torch.cuda.current_stream()
            side = torch.cuda.Stream()
            side.wait_stream(stream)
            # Warm-up on a side stream so that lazy state (optimiser moments, cuBLAS workspaces, autocast
            # kernels, compiled code) exists before capture. These cycles are real updates on real data.
            with torch.cuda.stream(side):
                for _ in range(self.cfg.cuda_graph_warmup):
                    self._cycle()
                    self.num_updates += len(self.actor_schedule)
            stream.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: an acting thread may keep issuing CUDA work while this thread captures.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._graph_metrics = self._cycle()
        self._graph = graph

    def update(self) -> dict[str, Tensor]:
        """Run one cycle of `updates_per_step` gradient steps (one captured CUDA graph on the GPU when
        `use_graph`); returns device scalars (critic_loss, actor_loss, alpha, ...). No host sync."""
        if not self.ready():
            raise RuntimeError(f"{self.cfg.name}: update() before ready() (replay holds {self.replay.size} samples)")
        if self.use_graph:
            if self._graph is None:
                self._capture()
            self._graph.replay()
            metrics = self._graph_metrics.clone()  # the graph overwrites its output on the next replay
        else:
            metrics = self._cycle()
        self.num_updates += len(self.actor_schedule)
        return dict(zip(self.metric_names, metrics.unbind()))

    # ------------------------------------------------------------------ acting

    def publish_policy(self) -> None:
        """Copy the trained actor (and what it reads) into the acting copy used by `act`."""
        if self.on_cuda:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(self._acted)  # don't overwrite weights an in-flight act() is reading
            self._publish()
            self._published.record(stream)
        else:
            self._publish()

    def _publish(self) -> None:
        self.acting.publish_from(self.actor)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Actions in [-1, 1] from the acting copy; safe on a different CUDA stream than `update`."""
        if self.on_cuda:
            torch.cuda.current_stream(self.device).wait_event(self._published)
        action = self._act(obs, deterministic)
        if self.on_cuda:
            self._acted.record(torch.cuda.current_stream(self.device))
        return action

    def _act(self, obs: Tensor, deterministic: bool) -> Tensor:
        return self._act_fn(obs, deterministic)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Networks, targets, optimisers, entropy temperature, running statistics, update counter (not the
        replay). Tensors alias the live ones: serialise before training on."""
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            **self._extra_state(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self._optimiser_state(self.actor_opt),
            "critic_opt": self._optimiser_state(self.critic_opt),
            "alpha_opt": self._optimiser_state(self.alpha_opt),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, sd: dict) -> None:
        # Module loads copy in place, so a captured graph would still see the new weights; the optimisers
        # however get fresh state tensors, so the graph is dropped and re-captured on the next update().
        sd = self._upgrade_checkpoint(sd)
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.critic_target.load_state_dict(sd["critic_target"])
        self._load_extra_state(sd)
        with torch.no_grad():
            self.log_alpha.copy_(sd["log_alpha"])
        for name in ("actor_opt", "critic_opt", "alpha_opt"):
            self._load_optimiser(getattr(self, name), sd[name])
        self.num_updates = int(sd["num_updates"])
        self._graph = None
        self._graph_metrics = None
        self.publish_policy()

    def _extra_state(self) -> dict:
        """The algorithm's own checkpoint entries (running statistics, schedules)."""
        return {}

    def _load_extra_state(self, sd: dict) -> None: ...

    def _optimiser_state(self, opt: torch.optim.Optimizer) -> dict:
        return opt.state_dict()

    def _load_optimiser(self, opt: torch.optim.Optimizer, saved: dict) -> None:
        # A checkpoint written on another device or mode carries its own `capturable` flag; use ours.
        capturable = opt.defaults["capturable"]
        groups = [{**g, "capturable": capturable} for g in saved["param_groups"]]
        opt.load_state_dict({**saved, "param_groups": groups})

    def _upgrade_checkpoint(self, sd: dict) -> dict:
        """A checkpoint of an earlier version in today's layout."""
        return sd

    def export_onnx(self, path: str, metadata: dict[str, str] | None = None) -> None:
        """Write the deterministic actor, normaliser included, as an ONNX model, with `metadata` as its
        metadata_props; the file appears whole or not at all."""
        # torch's ONNX exporter (torch.export based) needs both packages.
        missing = [pkg for pkg in ("onnx", "onnxscript") if importlib.util.find_spec(pkg) is None]
        if missing:
            raise RuntimeError(
                f"export_onnx needs the Python package(s) {', '.join(missing)}: pip install {' '.join(missing)}"
            )
        policy = self._onnx_policy().cpu().float().eval()
        example = torch.zeros(2, self.obs_dim)  # batch 2: torch.export specialises a batch of 1
        fd, tmp = tempfile.mkstemp(prefix=".export_", suffix=".onnx", dir=os.path.dirname(os.path.abspath(path)))
        os.close(fd)
        try:
            with _quiet_exporter():
                torch.onnx.export(
                    policy,
                    (example,),
                    tmp,
                    input_names=["obs"],
                    output_names=["action"],
                    dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
                    external_data=False,
                    verbose=False,  # no "[torch.onnx] ..." line per stage of the export
                )
            if metadata:
                import onnx

                model = onnx.load(tmp)
                for key, value in metadata.items():
                    entry = model.metadata_props.add()
                    entry.key, entry.value = str(key), str(value)
                onnx.save(model, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


@contextmanager
def _quiet_exporter():
    """torch's ONNX exporter says what concerns torch, not the user: torchvision's operators it skips (torchvision
    is no dependency) and a FutureWarning of its own internals. Errors still raise."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        registration.setLevel(level)


def make_learner(
    algo_cfg: Any, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device | str, seed: int,
    *, num_envs: int = 0, mirror: Any = None,
) -> OffPolicyLearner:
    """The learner of the typed algo config `algo_cfg` (`unilab.registry.instantiate`).

    num_envs: envs per env step of the rows that `add()` receives (tick-major). A learner whose config has
    a `num_envs` field (FlashSAC's return normaliser splits rows into env steps) gets it there; 0 leaves
    the config's value.
    mirror: the task's `unilab.algos.symmetry.Mirror`, which a config with `symmetry` on needs.
    """
    from unilab.registry import implementation

    if num_envs and "num_envs" in {f.name for f in dataclasses.fields(algo_cfg)}:
        algo_cfg = dataclasses.replace(algo_cfg, num_envs=num_envs)
    cls = implementation("algo", algo_cfg.name)
    learner = cls(algo_cfg, obs_dim, critic_obs_dim, action_dim, torch.device(device), seed)
    if getattr(algo_cfg, "symmetry", False):
        if mirror is None:
            raise ValueError(f"algo.symmetry=true: {algo_cfg.name} needs the task's mirror map, and none was given")
        learner.use_mirror(mirror)
    return learner
