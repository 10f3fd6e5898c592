"""Shared base of batched tasks: one MJWarp backend, episode bookkeeping, reward
plumbing and on-device auto-reset.

`step` never synchronises with the host: no `.item()`, no boolean indexing, no
Python branches on tensor values. Finished envs are reset with masked writes
every step, whether or not any env finished.

A subclass sets `reward_weights` (name -> weight per second), implements
`_reward_<name>()` for each name (unweighted, shape (N,)) and the hooks below,
then calls `self._finish_init()` at the end of its constructor.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from unilab.sim.headless import mujoco


class _StepTimer:
    """Task time of the last step, read lazily: CUDA events on GPU, perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.recorded = False
        if self.cuda:
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        self.stamps = [0.0] * 4

    def mark(self, i: int) -> None:
        # 0: step start, 1: before physics, 2: after physics, 3: step end.
        if self.cuda:
            self.events[i].record()
        else:
            self.stamps[i] = time.perf_counter()
        self.recorded = True

    def task_ms(self) -> float:
        if not self.recorded:
            return 0.0
        if self.cuda:
            e = self.events
            e[3].synchronize()
            return e[0].elapsed_time(e[1]) + e[2].elapsed_time(e[3])
        s = self.stamps
        return 1e3 * ((s[1] - s[0]) + (s[3] - s[2]))

    def physics_ms(self) -> float:
        if not self.recorded:
            return 0.0
        if self.cuda:
            self.events[2].synchronize()
            return self.events[1].elapsed_time(self.events[2])
        return 1e3 * (self.stamps[2] - self.stamps[1])


@contextmanager
def keep_bindings(obj):
    """Keep every tensor attribute of ``obj`` bound to the same tensor object across the block.

    Task code may rebind state (``self.x = torch.where(mask, new, self.x)``). A captured CUDA graph
    however reads the tensors that existed when it was recorded, so a rebinding would be lost on
    replay. Attributes rebound inside the block are copied back into their original tensors (same
    shape and dtype) and rebound to them: state lives in fixed storage, eager or captured alike."""
    before = {k: v for k, v in vars(obj).items() if isinstance(v, torch.Tensor)}
    yield
    for key, old in before.items():
        new = getattr(obj, key, None)
        if new is old or not isinstance(new, torch.Tensor):
            continue
        if new.shape == old.shape and new.dtype == old.dtype and new.device == old.device:
            old.copy_(new)
            setattr(obj, key, old)


class TaskGraph:
    """The post-physics part of a step as one CUDA graph: a few eager steps (kernels load, lazy state
    exists), then one capture, then replays. Warp launches inside it (forward kinematics of resets
    and of tracking tasks) are recorded into the same graph through the backend."""

    eager_steps = 2

    def __init__(self, env: "TaskEnv"):
        self.env = env
        self.graph = None
        self.outputs = None
        self.steps = 0
        self.generation = None  # the backend's model generation the graph was captured with

    def run(self, fn):
        env = self.env
        if self.graph is not None and self.generation != env.backend.model_generation:
            self.graph = None  # a model array was replaced (domain randomisation): its address changed
        if self.graph is None and self.steps < self.eager_steps:
            self.steps += 1
            with keep_bindings(env):
                return fn()
        if self.graph is None:
            self._capture(fn)
        self.graph.replay()
        return self.outputs

    def _capture(self, fn) -> None:
        import gc

        env = self.env
        graph = torch.cuda.CUDAGraph()
        register = getattr(graph, "register_generator_state", None)
        if register is None:
            raise RuntimeError("sim.task_cuda_graph needs torch >= 2.5 (CUDAGraph.register_generator_state); "
                               "set sim.task_cuda_graph=false")
        register(env.generator)  # the graph advances the env's own RNG on every replay
        stream = torch.cuda.Stream(env.device)
        stream.wait_stream(torch.cuda.current_stream(env.device))
        gc_was_enabled = gc.isenabled()
        gc.disable()  # a finalizer running inside the capture would corrupt the graph
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                with env.backend.recording_into_torch_graph(), keep_bindings(env):
                    self.outputs = fn()
        finally:
            if gc_was_enabled:
                gc.enable()
        self.graph = graph
        self.generation = env.backend.model_generation


# The `on_sized` hook of the env being built (make_env sets it around the constructor, so that task
# constructors need not pass it through).
_ON_SIZED: contextvars.ContextVar = contextvars.ContextVar("unilab_on_sized", default=None)


STILL_EVERY_S = 15.0  # a long stage says it is still going this often
# The `on_stage` hook: told each stage of the build as it ends (a cold build compiles for up to a minute on a CPU).
_ON_STAGE: contextvars.ContextVar = contextvars.ContextVar("unilab_on_stage", default=None)


@contextmanager
def build_hooks(on_sized, on_stage=None):
    tokens = _ON_SIZED.set(on_sized), _ON_STAGE.set(on_stage)
    try:
        yield
    finally:
        _ON_STAGE.reset(tokens[1])
        _ON_SIZED.reset(tokens[0])


class _Stages:
    """The `on_stage` hook with the seconds since the last stage ended (or since the build began)."""

    def __init__(self, hook):
        self.hook = hook
        self.since = time.monotonic()

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        if self.hook is not None:
            self.hook(f"{text} in {now - self.since:.1f} s")
        self.since = now

    @contextmanager
    def ticking(self, text: str, every_s: float = STILL_EVERY_S):
        """Inside, a stage that may last a minute (a cold compile): `text` at once, then every `every_s` the seconds
        so far, from a thread (the stage itself blocks this one)."""
        if self.hook is None:
            yield
            return
        self.hook(text)
        done = threading.Event()

        def tick():
            while not done.wait(every_s):
                self.hook(f"still {text.partition(' (')[0]}: {time.monotonic() - self.since:.0f} s so far")

        thread = threading.Thread(target=tick, name="unilab-stage-ticks", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()


class TaskEnv:
    """Batched env over `num_envs` MJWarp worlds of one robot with PD position actuators."""

    reward_weights: dict[str, float] = {}

    def __init__(self, cfg: Any, sim_cfg: Any, mj_model: mujoco.MjModel, device: str, seed: int):
        from unilab.sim.mjwarp_backend import MjWarpBackend

        self.cfg = cfg
        self.sim_cfg = sim_cfg
        self.device = torch.device(device)
        self.num_envs = int(cfg.num_envs)
        self.mj_model = mj_model
        self._stage = _Stages(_ON_STAGE.get())
        # The kernels compile in _finish_init (compile_kernels), after the sizes are known.
        self.backend = MjWarpBackend(mj_model, self.num_envs, str(self.device), sim_cfg, compile_now=False)
        self._stage(f"model put on {self.device} ({self.num_envs} worlds)")
        self._on_sized = _ON_SIZED.get()
        self.dt = float(sim_cfg.timestep) * int(sim_cfg.decimation)
        # The epsilon keeps 20 s / 0.02 s at 1000 steps despite float rounding.
        self.max_episode_length = int(math.ceil(float(cfg.episode_length_s) / self.dt - 1e-6))
        # A string (e.g. "per_joint") names spans the task sets itself in action_spans() / _apply_actions().
        self.action_scale = math.nan if isinstance(cfg.action_scale, str) else float(cfg.action_scale)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self._noise_spans: dict[tuple, torch.Tensor] = {}  # per-column noise widths (randomization.noisy_concat)

        self._init_indices(mj_model)
        n, f32 = self.num_envs, torch.float32
        self.action_dim = int(mj_model.nu)
        self.actions = torch.zeros(n, self.action_dim, device=self.device, dtype=f32)
        self.last_actions = torch.zeros_like(self.actions)
        self.episode_length = torch.zeros(n, device=self.device, dtype=torch.long)
        self.episode_return = torch.zeros(n, device=self.device, dtype=f32)
        self.terminated = torch.zeros(n, device=self.device, dtype=torch.bool)
        # Steps since construction, same for all envs; a device scalar so that a captured step advances it.
        self.common_step_counter = torch.zeros((), device=self.device, dtype=torch.long)
        self._timer = _StepTimer(self.device)
        use_graph = self.device.type == "cuda" and bool(getattr(sim_cfg, "task_cuda_graph", False))
        self._task_graph = TaskGraph(self) if use_graph else None

    # ---------------------------------------------------------------- setup
    def _init_indices(self, m: mujoco.MjModel) -> None:
        """qpos/qvel addresses of the free root and of the actuated joints (actuator order)."""
        free = np.flatnonzero(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        if len(free) != 1:
            raise ValueError(f"expected exactly one free joint, found {len(free)}")
        self.root_qpos_adr = int(m.jnt_qposadr[free[0]])
        self.root_dof_adr = int(m.jnt_dofadr[free[0]])
        joints = m.actuator_trnid[:, 0]
        self.joint_qpos_adr = m.jnt_qposadr[joints].astype(np.int64)
        self.joint_dof_adr = m.jnt_dofadr[joints].astype(np.int64)
        self.joint_range = torch.as_tensor(m.jnt_range[joints], dtype=torch.float32, device=self.device)
        self._jq = _as_index(self.joint_qpos_adr, self.device)
        self._jd = _as_index(self.joint_dof_adr, self.device)
        # Subclasses overwrite with their stand pose; (nu,) joint position targets at action 0.
        self.default_joint_pos = torch.zeros(m.nu, device=self.device)

    def _finish_init(self) -> None:
        """Size the observation spaces, compile the kernels, reset all envs. Call at the end of the subclass
        init.

        The sizes come first, from the shapes of the observation terms (torch ops on the backend's views: no
        Warp kernel runs, and the generator's state is restored, so nothing is drawn); the `make_env`
        caller's `on_sized` hook then runs while the kernels have yet to compile."""
        state = self.generator.get_state()
        obs, critic_obs = self._compute_observations()
        self.generator.set_state(state)
        self.obs_dim, self.critic_obs_dim = int(obs.shape[-1]), int(critic_obs.shape[-1])
        if self._on_sized is not None:
            self._on_sized(self)
            self._stage.since = time.monotonic()  # the hook's own time is the caller's
        with self._stage.ticking(f"compiling the physics kernels (the first time only: cached in "
                                 f"{self.backend.kernel_cache_dir})"):
            modules = self.backend.compile_kernels()  # all of them, in parallel, before the first capture
        self._stage(f"physics kernels ready ({modules} module variants)")
        self.backend.forward()  # derived quantities of the initial state
        self.reset()
        graph = ", kinematics graph captured" if self.backend.captures_graphs else ""
        self._stage(f"initial state and first reset{graph}")
        sizes = (int(self._compute_obs().shape[-1]), int(self._compute_critic_obs().shape[-1]))
        if sizes != (self.obs_dim, self.critic_obs_dim):
            raise RuntimeError(f"{type(self).__name__}: observation sizes {sizes} after the reset differ from "
                               f"{(self.obs_dim, self.critic_obs_dim)} before it")

    # ------------------------------------------------------ state accessors
    @property
    def qpos(self) -> torch.Tensor:
        return self.backend.qpos

    @property
    def qvel(self) -> torch.Tensor:
        return self.backend.qvel

    @property
    def base_pos(self) -> torch.Tensor:
        return self.qpos[:, self.root_qpos_adr:self.root_qpos_adr + 3]

    @property
    def base_quat(self) -> torch.Tensor:
        return self.qpos[:, self.root_qpos_adr + 3:self.root_qpos_adr + 7]

    @property
    def base_lin_vel_w(self) -> torch.Tensor:
        """World-frame linear velocity of the root (MuJoCo free-joint convention)."""
        return self.qvel[:, self.root_dof_adr:self.root_dof_adr + 3]

    @property
    def base_ang_vel_b(self) -> torch.Tensor:
        """Body-frame angular velocity of the root (MuJoCo free-joint convention)."""
        return self.qvel[:, self.root_dof_adr + 3:self.root_dof_adr + 6]

    @property
    def joint_pos(self) -> torch.Tensor:
        return self.qpos[:, self._jq]

    @property
    def joint_vel(self) -> torch.Tensor:
        return self.qvel[:, self._jd]

    # ------------------------------------------------------------- contract
    def reset(self) -> torch.Tensor:
        with keep_bindings(self):
            self._reset_envs(torch.ones(self.num_envs, device=self.device, dtype=torch.bool))
        return self._compute_obs()

    def critic_obs(self) -> torch.Tensor:
        return self._compute_critic_obs()

    def step(self, actions: torch.Tensor):
        """One control step. On CUDA (``sim.task_cuda_graph``) the tensors returned are those of a
        captured graph and are overwritten by the next step: copy what you keep."""
        self._timer.mark(0)
        self.last_actions.copy_(self.actions)
        self.actions.copy_(actions.to(self.device, torch.float32).clamp(-1.0, 1.0))
        self._apply_actions()
        self._timer.mark(1)
        self.backend.step()
        self._timer.mark(2)
        if self._task_graph is not None:
            out = self._task_graph.run(self._after_physics)
        else:
            with keep_bindings(self):
                out = self._after_physics()
        self._timer.mark(3)
        return out

    def _after_physics(self):
        """Everything of a step after the physics: task state, terminations, rewards, observations and
        the masked resets. Captured as one CUDA graph on CUDA, so: no host reads, no Python branch on
        a tensor, no host-side state that changes from step to step."""
        self.episode_length += 1
        self.common_step_counter += 1
        self._post_physics_step()
        terminated = self._check_terminated()
        self.terminated.copy_(terminated)
        truncated = (self.episode_length >= self.max_episode_length) & ~terminated
        reward, terms = self._compute_reward()
        self.episode_return += reward

        obs, critic_obs = self._compute_observations()
        done = terminated | truncated
        info: dict[str, Any] = {
            "final_obs": obs,
            "final_critic_obs": critic_obs,
            "episode_done": done,
            "episode_return": self.episode_return.clone(),
            "episode_length": self.episode_length.clone(),
        }
        means = terms.mean(dim=0)  # one reduction for all terms: the step is a graph of small kernels
        for i, name in enumerate(self._reward_names):
            info[f"rew/{name}"] = means[i]

        self._reset_envs(done)
        # Envs that did not finish keep exactly the obs above (and their noise sample).
        reset_obs, reset_critic_obs = self._compute_observations()
        obs = torch.where(done[:, None], reset_obs, obs)
        critic_obs = torch.where(done[:, None], reset_critic_obs, critic_obs)
        self._extend_info(info)
        return obs, critic_obs, reward, terminated, truncated, info

    def _extend_info(self, info: dict[str, Any]) -> None:
        """Hook: add task metrics (device tensors) to a step's info."""

    @property
    def timing(self) -> dict[str, float]:
        """Last step's split; may synchronise the device."""
        backend_ms = getattr(self.backend, "last_physics_ms", None)
        if backend_ms is None:
            backend_ms = self._timer.physics_ms()
        return {"backend_ms": float(backend_ms), "task_ms": self._timer.task_ms()}

    # ------------------------------------------------------- policy interface
    def action_spans(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(nu,) radians that actions of -1 and +1 move each joint target from the default pose."""
        span = torch.full_like(self.default_joint_pos, self.action_scale)
        return span, span

    @property
    def action_to_target(self) -> str:
        """How a deployed controller turns an action into PD targets (exported with the policy)."""
        return "default_joint_pos + action * (action_span_high if action >= 0 else action_span_low)"

    def policy_obs_layout(self) -> list[tuple[str, int, float]]:
        """The policy observation's terms in order: (name, size, scale the raw quantity is multiplied by)."""
        return [("obs", int(self.obs_dim), 1.0)]

    def mirror(self) -> Any:
        """The task's left-right mirror of its observations and actions (unilab.algos.symmetry.Mirror), for
        `algo.symmetry`; None: the task has none. A task that has one says so in its config (MIRRORED)."""
        return None

    def deploy_description(self) -> dict:
        """The task's part of the exported metadata (unilab.tasks.common.metadata): each observation term's frame
        and unit (`observation_frames`, by name), `episode_start`, `model_builder` and, where the task has them,
        `gait`, `command`, `motion`. Tasks override it with their own (unilab/tasks/<task>/metadata.py)."""
        return {"observation_frames": {name: "not described by the task" for name, _, _ in self.policy_obs_layout()},
                "episode_start": None, "model_builder": {"builder": None, "kwargs": {}}}

    # ------------------------------------------------------------ plumbing
    def _apply_actions(self) -> None:
        """PD position targets around the default pose."""
        self.backend.ctrl.copy_(self.default_joint_pos + self.action_scale * self.actions)

    def _compute_reward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(N,) total reward and (N, T) weighted terms, column i the term ``_reward_names[i]``."""
        weights = self._term_weights()
        if not self._reward_names:
            return torch.zeros(self.num_envs, device=self.device), torch.zeros(self.num_envs, 0, device=self.device)
        values = torch.stack([getattr(self, f"_reward_{name}")() for name in self._reward_names], dim=1)
        terms = values * weights
        return torch.nan_to_num(terms.sum(dim=1), nan=0.0, posinf=0.0, neginf=0.0), terms

    def _term_weights(self) -> torch.Tensor:
        """(T,) weight * dt of the terms with a non-zero weight, made on first use (before any capture:
        the eager steps make it) and again whenever ``reward_weights`` changes."""
        key = tuple(self.reward_weights.items())
        if getattr(self, "_reward_key", None) != key:
            self._reward_names = [name for name, weight in key if weight != 0.0]
            row = [weight * self.dt for name, weight in key if weight != 0.0]
            self._reward_row = torch.tensor(row, dtype=torch.float32, device=self.device)
            self._reward_key = key
        return self._reward_row

    def _reset_envs(self, mask: torch.Tensor) -> None:
        """Masked reset of the finished envs; a no-op on envs where mask is False."""
        keep = ~mask
        self.episode_length.mul_(keep)
        self.episode_return.mul_(keep)
        self.actions.mul_(keep[:, None])
        self.last_actions.mul_(keep[:, None])
        self._reset_state(mask)

    def _write_state(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Write full (N, nq)/(N, nv) states into the worlds selected by mask."""
        self.backend.reset_worlds(mask, qpos, qvel)

    # Common reward terms.
    def _reward_alive(self) -> torch.Tensor:
        return (~self.terminated).float()

    def _reward_termination(self) -> torch.Tensor:
        return self.terminated.float()

    # Random helpers, all drawn from the env generator so a seed fixes the rollout.
    def _rand(self, *shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        u = torch.rand(shape, device=self.device, generator=self.generator)
        return low + (high - low) * u

    # -------------------------------------------------------------- hooks
    def _reset_state(self, mask: torch.Tensor) -> None:
        """Sample initial states for masked envs (write them via _write_state) and reset task buffers."""
        raise NotImplementedError

    def _post_physics_step(self) -> None:
        """Update task state (commands, contacts, pushes, ...) after the physics step."""

    def _check_terminated(self) -> torch.Tensor:
        raise NotImplementedError

    def _compute_obs(self) -> torch.Tensor:
        raise NotImplementedError

    def _compute_critic_obs(self) -> torch.Tensor:
        raise NotImplementedError

    def _compute_observations(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy and critic observations of the current state; override to share work between them."""
        return self._compute_obs(), self._compute_critic_obs()


def _as_index(adr: np.ndarray, device: torch.device):
    """A slice when the addresses are contiguous (indexing then returns a view), else an index tensor."""
    if len(adr) and np.all(np.diff(adr) == 1):
        return slice(int(adr[0]), int(adr[-1]) + 1)
    return torch.as_tensor(adr, device=device)
