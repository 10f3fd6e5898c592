"""The interface every off-policy learner offers the runtime, and `make_learner`, which builds the one its
config names (members: `unilab.registry`).

Contract shared by all methods: nothing here may synchronise the host with the device (no `.item()`,
no `nonzero`, no Python branch on a tensor value); bookkeeping that the host needs is kept in Python ints.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from unilab.algos.replay import ReplayBuffer

class OffPolicyLearner(ABC):
    """Subclasses build their networks, set `use_graph`, `actor_schedule` (one entry per gradient step of
    a cycle), `metric_names`, and implement `_cycle()` (one update cycle returning stacked metrics)."""

    replay: ReplayBuffer
    metric_names: tuple[str, ...] = ()
    use_graph: bool = False
    _graph: torch.cuda.CUDAGraph | None = None
    _graph_metrics: Tensor | None = None

    def __init__(self, cfg: Any, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        self.cfg = cfg
        self.obs_dim = obs_dim
        self.critic_obs_dim = critic_obs_dim
        self.action_dim = action_dim
        self.device = torch.device(device)
        self.seed = seed

    @abstractmethod
    def add(self, batch: dict[str, Tensor]) -> None:
        """Append transitions (the fields of `unilab.runtime.protocol.TRANSITION_FIELDS`) to the replay and
        update the observation normalisers."""

    def ready(self) -> bool:
        """Whether the replay holds enough samples to start updating (host-side ints only)."""
        return self.replay.size >= max(self.cfg.batch_size, self.cfg.learning_starts * self._chunk)

    def _init_shared_state(self, metric_names: tuple[str, ...]) -> None:
        """After the networks and optimisers exist: data parallelism, the replay, the cycle's schedule.

        Data parallelism (one rank per GPU): start from rank 0's weights and average every gradient across
        ranks before its optimiser step (actor and log_alpha in one collective). None: a single rank.
        """
        from unilab.algos.distributed import GradAllReduce, broadcast_, dp_active
        from unilab.algos.replay import ReplayBuffer
        from unilab.runtime.protocol import transition_shapes

        cfg = self.cfg
        self._critic_grad_sync = None
        self._actor_grad_sync = None
        if dp_active():
            broadcast_(self.actor, self.critic, self.critic_target, self.log_alpha)
            self._critic_grad_sync = GradAllReduce(self.critic.parameters())
            self._actor_grad_sync = GradAllReduce([*self.actor.parameters(), self.log_alpha])
        shapes = transition_shapes(self.obs_dim, self.critic_obs_dim, self.action_dim)
        self.replay = ReplayBuffer(cfg.replay_capacity, {k: (shape, torch.float32) for k, shape in shapes.items()},
                                   self.device)
        self.actor_schedule = [k % cfg.policy_delay == cfg.policy_delay - 1 for k in range(cfg.updates_per_step)]
        self.num_updates = 0  # gradient steps taken, warm-up steps of the graph capture included
        self._chunk = 0  # rows per add(), for ready()
        self.metric_names = metric_names

    @property
    def compiled(self) -> bool:
        """Whether the cycle's functions and acting are compiled: `cfg.compile`, or (null) wherever the
        cycle is a CUDA graph."""
        return self.use_graph if self.cfg.compile is None else bool(self.cfg.compile)

    def _maybe_compiled(self, fn):
        """`fn` compiled by inductor when `self.compiled`, else `fn` itself."""
        return torch.compile(fn, dynamic=False, mode=self.cfg.compile_mode) if self.compiled else fn

    @contextmanager
    def _critic_frozen(self):
        """The critic's weights need no gradient inside (the actor's loss reads the critic)."""
        self.critic.requires_grad_(False)
        try:
            yield
        finally:
            self.critic.requires_grad_(True)

    def _actor_and_temperature_backward(self, actor_loss: Tensor, alpha_loss: Tensor) -> None:
        """Gradients of both losses in one backward pass, then (data parallel) averaged in one collective.
        The actor loss reads alpha detached and the temperature loss reads no actor weight, so each
        optimiser still gets exactly its own loss's gradient."""
        self.actor_opt.zero_grad(set_to_none=True)
        self.alpha_opt.zero_grad(set_to_none=True)
        (actor_loss + alpha_loss).backward()
        if self._actor_grad_sync is not None:
            self._actor_grad_sync()

    def _start_acting(self) -> None:
        """After `self.acting` exists: order publish_policy (learner stream) against act (acting stream).
        Acting is compiled with the cycle: under MPS its kernels queue behind the update's for SMs one by
        one, and it lies on the collector's critical path (env step -> act -> env step)."""
        self._act_fn = self._maybe_compiled(self.acting)
        if self.on_cuda:
            self._published = torch.cuda.Event()
            self._acted = torch.cuda.Event()
        self.publish_policy()

    def _store(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Append a batch of transitions to the replay in its dtypes and shapes; returns the stored rows."""
        n = batch["obs"].shape[0]
        rows = {key: batch[key].to(self.device, dtype).reshape(n, *shape)
                for key, (shape, dtype) in self.replay.spec.items()}
        self.replay.extend(rows)
        self._chunk = n
        return rows

    def _cycle(self) -> Tensor:
        """One cycle of `updates_per_step` gradient steps; returns the stacked `metric_names` scalars."""
        raise NotImplementedError

    def _capture(self) -> None:
        with torch.cuda.device(self.device):
            stream = torch.cuda.current_stream()
            side = torch.cuda.Stream()
            side.wait_stream(stream)
            # Warm-up on a side stream so that lazy state (optimiser moments, cuBLAS workspaces, autocast
            # kernels) exists before capture. These cycles are real updates on real data.
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

    @abstractmethod
    def publish_policy(self) -> None:
        """Copy the trained actor and normaliser statistics into the acting copy used by `act`."""

    @abstractmethod
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Actions in [-1, 1] from the acting copy; safe on a different CUDA stream than `update`."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Networks, targets, optimisers, entropy temperature, normalisers, update counter (not the replay)."""

    @abstractmethod
    def load_state_dict(self, sd: dict) -> None: ...

    @abstractmethod
    def _onnx_policy(self) -> torch.nn.Module:
        """A copy of the policy as a module: obs -> deterministic action in [-1, 1], normaliser included."""

    def export_onnx(self, path: str) -> None:
        """Write the deterministic actor, normaliser included, as an ONNX model."""
        # torch's ONNX exporter (torch.export based since 2.9) needs both packages.
        missing = [pkg for pkg in ("onnx", "onnxscript") if importlib.util.find_spec(pkg) is None]
        if missing:
            raise RuntimeError(
                f"export_onnx needs the Python package(s) {', '.join(missing)}: pip install {' '.join(missing)}"
            )
        policy = self._onnx_policy().cpu().float().eval()
        example = torch.zeros(2, self.obs_dim)  # batch 2: torch.export specialises a batch of 1
        torch.onnx.export(
            policy,
            (example,),
            path,
            input_names=["obs"],
            output_names=["action"],
            dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
            external_data=False,
        )


def make_learner(
    algo_cfg: Any, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device | str, seed: int,
    *, num_envs: int = 0,
) -> OffPolicyLearner:
    """The learner of the typed algo config `algo_cfg` (`unilab.registry.instantiate`).

    num_envs: envs per env step of the rows that `add()` receives (tick-major). A learner whose config has
    a `num_envs` field (FlashSAC's return normaliser splits rows into env steps) gets it there; 0 leaves
    the config's value.
    """
    from unilab.registry import implementation

    if num_envs and "num_envs" in {f.name for f in dataclasses.fields(algo_cfg)}:
        algo_cfg = dataclasses.replace(algo_cfg, num_envs=num_envs)
    cls = implementation("algo", algo_cfg.name)
    return cls(algo_cfg, obs_dim, critic_obs_dim, action_dim, torch.device(device), seed)
