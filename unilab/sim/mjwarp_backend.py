"""Batched MuJoCo Warp simulation: one ``mujoco_warp`` model, ``num_envs`` worlds, torch views."""

from __future__ import annotations

import copy
import gc
import math
import os
import time
from contextlib import contextmanager

from unilab.sim.headless import mujoco  # first: mujoco_warp imports mujoco
import mujoco_warp as mjwarp
import numpy as np
import torch
import warp as wp

from unilab.kernel_cache import kernel_cache_env
from unilab.sim.capacity import derive_capacity
from unilab.sim.config import MjWarpSimConfig
from unilab.sim.driver_warning import without_driver_warning


def compile_workers(setting: int | None) -> int:
    """Threads for Warp's module compiles: the setting, or (null) one per core, at most 8."""
    return min(os.cpu_count() or 1, 8) if setting is None else int(setting)


def _setup_warp(verbose: bool, workers: int | None = None, cpu: bool = False) -> None:
    # Warp >= 1.10 gates the greeting and "Module ... load" lines on log_level.
    wp.config.log_level = wp.LOG_INFO if verbose else wp.LOG_WARNING
    for flag, value in (("quiet", not verbose), ("verbose", verbose)):
        if hasattr(wp.config, flag):  # older Warp releases
            setattr(wp.config, flag, value)
    if wp.config.kernel_cache_dir is None:  # one place for every simulating process (unilab.kernel_cache)
        cache = kernel_cache_env().get("WARP_CACHE_PATH")
        if cache:
            wp.config.kernel_cache_dir = cache
    # The first capture loads every imported module (force_module_load): in parallel, not one by one.
    wp.config.load_module_max_workers = compile_workers(workers)
    with without_driver_warning(cpu):  # a CPU process needs no driver (unilab.sim.driver_warning)
        wp.init()


def warp_device(device: str) -> str:
    """torch-style device ("cpu", "cuda", "cuda:N") -> warp device name."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "cuda":
        return f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}"
    raise ValueError(f"unsupported device {device!r}")


@wp.kernel
def _collect_overflow(
    overflow: wp.array(dtype=int),
    mask: int,
    count: wp.array(dtype=int),
    flags: wp.array(dtype=int),
):
    # MJWarp's per-world overflow bits are sticky; fold the capacity bits into our own
    # counter (substeps that overflowed) and a cumulative bitmask, then clear them.
    w = wp.tid()
    bits = overflow[w] & mask
    if bits != 0:
        count[w] = count[w] + 1
        flags[w] = flags[w] | bits
    overflow[w] = 0


@contextmanager
def _launches_noted(found: dict):
    """Inside: Warp launches run no kernel but note (block_dim -> modules) in `found`; graph conditionals
    run their bodies once. For a dry pass of a step (compile_kernels)."""
    saved = {name: getattr(wp, name) for name in ("launch", "launch_tiled", "capture_while", "capture_if")}

    def launch(kernel, dim, *args, block_dim=None, **kwargs):
        if math.prod(dim) if isinstance(dim, (tuple, list)) else dim:  # Warp loads nothing for an empty launch
            found.setdefault(block_dim, set()).add(kernel.module)

    launch_tiled = launch

    def capture_while(condition, while_body, stream=None, **kwargs):
        while_body(**kwargs)

    def capture_if(condition, on_true=None, on_false=None, stream=None, **kwargs):
        for body in (on_true, on_false):
            if callable(body):
                body(**kwargs)

    for name, fn in (("launch", launch), ("launch_tiled", launch_tiled), ("capture_while", capture_while),
                     ("capture_if", capture_if)):
        setattr(wp, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(wp, name, fn)


class SimOverflowError(RuntimeError):
    pass


class MjWarpBackend:
    """``num_envs`` MJWarp worlds of one ``mj_model`` on ``device``, stepped ``decimation`` times per ``step()``.

    State is exposed as zero-copy torch views (shape ``(num_envs, ...)``, float32) that stay
    valid for the backend's lifetime: ``qpos``, ``qvel``, ``ctrl``, ``xpos``, ``xquat`` (w, x, y, z),
    ``cvel`` ([angular, linear] about the subtree CoM), ``subtree_com``, ``site_xpos``,
    ``sensordata``, ``qacc``, ``time``. As in ``mj_step``, after ``step()`` the derived
    quantities (``xpos``, ``cvel``, ``sensordata`` ...) are those of the last substep's start,
    one substep behind ``qpos``; ``forward()`` refreshes poses and body velocities (``cvel``) of all
    worlds (``sensordata`` is only written by ``step()``).

    ``compile_now=False`` leaves the kernels uncompiled and the derived quantities unset until the first
    ``forward()``. The ``mj_model`` is copied; the copy (``self.mj_model``) carries ``cfg.timestep`` and the solver caps
    ``cfg.iterations`` / ``cfg.ls_iterations`` where set.
    """

    def __init__(self, mj_model: mujoco.MjModel, num_envs: int, device: str, cfg: MjWarpSimConfig, *,
                 compile_now: bool = True):
        _setup_warp(cfg.verbose, cfg.compile_workers, cpu=torch.device(device).type == "cpu")
        self.cfg = cfg
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.wp_device = wp.get_device(warp_device(device))
        self.is_cuda = self.wp_device.is_cuda

        self.mj_model = mjm = copy.copy(mj_model)
        mjm.opt.timestep = cfg.timestep
        if cfg.iterations is not None:
            mjm.opt.iterations = cfg.iterations
        if cfg.ls_iterations is not None:
            mjm.opt.ls_iterations = cfg.ls_iterations
        self.nconmax, self.njmax = derive_capacity(mjm, cfg.nconmax, cfg.njmax)

        with wp.ScopedDevice(self.wp_device):
            self.model = mjwarp.put_model(mjm)
            if not cfg.verbose:
                self.model.opt.warn_overflow = 0  # surfaced through overflow_count instead
            self.data = mjwarp.make_data(mjm, nworld=self.num_envs, nconmax=self.nconmax, njmax=self.njmax)
            self._overflow_count = wp.zeros(self.num_envs, dtype=int)
            self._overflow_flags = wp.zeros(self.num_envs, dtype=int)
        self._overflow_mask = int(
            mjwarp.OverflowType.ALL & ~(mjwarp.OverflowType.ITERATIONS | mjwarp.OverflowType.LS_ITERATIONS)
        )

        self._bind_views()
        self._init_state(mjm)

        self._use_graph = self.is_cuda and cfg.cuda_graph and self._graphs_supported()
        if self.is_cuda and not self._use_graph:
            self.model.opt.graph_conditional = False
        self._step_graph = None
        self._kin_graph = None
        self._external_stream = None  # set while a torch.cuda.graph capture records our launches
        self.model_generation = 0  # bumped when a model array is replaced: callers' graphs must recapture
        self._last_physics_ms = 0.0
        if self.is_cuda:
            self._warp_stream_t = wp.stream_to_torch(self.wp_device)  # torch handle on warp's stream
            self._ev_start = wp.Event(self.wp_device, enable_timing=True)
            self._ev_end = wp.Event(self.wp_device, enable_timing=True)
            self._timed = False

        if compile_now:  # else the owner's first forward() compiles them (and derives the initial state)
            self.forward()

    # ----------------------------------------------------------------- views
    def _bind_views(self) -> None:
        d = self.data
        t = wp.to_torch
        self.qpos = t(d.qpos)
        self.qvel = t(d.qvel)
        self.qacc = t(d.qacc)
        self.ctrl = t(d.ctrl)
        self.xpos = t(d.xpos)
        self.xquat = t(d.xquat)
        self.xmat = t(d.xmat)  # (N, nbody, 3, 3) world-from-body rotation matrices, beside xquat
        self.cvel = t(d.cvel)
        self.subtree_com = t(d.subtree_com)
        self.site_xpos = t(d.site_xpos)
        self.sensordata = t(d.sensordata)
        self.time = t(d.time)
        self._qacc_warmstart = t(d.qacc_warmstart)
        self._qfrc_applied = t(d.qfrc_applied)
        self._xfrc_applied = t(d.xfrc_applied)
        self.overflow_count = t(self._overflow_count)  # substeps with a capacity overflow, per world
        self.overflow_flags = t(self._overflow_flags)  # cumulative mujoco_warp.OverflowType bits

    def _init_state(self, mjm: mujoco.MjModel) -> None:
        mjd = mujoco.MjData(mjm)
        if mjm.nkey:
            mujoco.mj_resetDataKeyframe(mjm, mjd, 0)
        self.qpos.copy_(torch.as_tensor(mjd.qpos, dtype=torch.float32, device=self.device))
        self.ctrl.copy_(torch.as_tensor(mjd.ctrl, dtype=torch.float32, device=self.device))

    # ------------------------------------------------------------ compiling
    def compile_kernels(self) -> int:
        """Compile every Warp module the physics step and the kinematics will launch, in parallel
        (`sim.compile_workers`), before their first capture; the number of module variants loaded.

        MJWarp builds many of its kernels on first use (per-model kernel factories), so a first step
        would compile them one at a time as it meets them. A dry pass of the step first walks its
        launches without running a kernel: `wp.launch` / `launch_tiled` only note the kernel's module and
        block size, `capture_while` / `capture_if` run their bodies once, on a scratch copy of the data
        (the real worlds are untouched). Then all noted modules, and every module imported so far, load
        together."""
        found: dict[int | None, set] = {}
        scratch = mjwarp.make_data(self.mj_model, nworld=self.num_envs, nconmax=self.nconmax, njmax=self.njmax)
        with wp.ScopedDevice(self.wp_device), _launches_noted(found):
            mjwarp.step(self.model, scratch)
            mjwarp.fwd_kinematics(self.model, scratch)
            mjwarp.com_vel(self.model, scratch)
        del scratch
        # Threads: wp.config.load_module_max_workers, set from sim.compile_workers by _setup_warp.
        wp.force_load(self.wp_device)  # modules defined at import, default block size
        for block_dim, modules in found.items():
            wp.force_load(self.wp_device, modules=list(modules), block_dim=block_dim)
        return sum(len(m) for m in found.values())

    @property
    def kernel_cache_dir(self) -> str:
        return str(wp.config.kernel_cache_dir)

    @property
    def captures_graphs(self) -> bool:
        """Whether the physics and kinematics run as captured CUDA graphs (the first use captures them)."""
        return self._use_graph

    # ------------------------------------------------------------ execution
    def _graphs_supported(self) -> bool:
        driver = wp.get_cuda_driver_version()
        return bool(wp.is_mempool_enabled(self.wp_device)) and driver is not None and tuple(driver) >= (12, 4)

    @contextmanager
    def recording_into_torch_graph(self):
        """While the caller captures a ``torch.cuda.graph``: our launches (``forward``, ``reset_worlds``)
        go as plain kernels onto the capturing torch stream, registered with Warp as an external
        capture, so that they become nodes of the caller's graph (Warp's own graphs cannot nest)."""
        stream = wp.stream_from_torch(torch.cuda.current_stream(self.device))
        with wp.ScopedDevice(self.wp_device), wp.ScopedStream(stream, sync_enter=False):
            wp.capture_begin(stream=stream, external=True, force_module_load=False)
            self._external_stream = stream
            try:
                yield
            finally:
                self._external_stream = None
                wp.capture_end(stream=stream)

    @contextmanager
    def _on_warp_stream(self):
        """Order warp work after pending torch work on the caller's stream, and vice versa."""
        if self._external_stream is not None:  # recording into the caller's graph, on its stream
            yield
            return
        if not self.is_cuda:
            with wp.ScopedDevice(self.wp_device):
                yield
            return
        torch_stream = torch.cuda.current_stream(self.device)
        self._warp_stream_t.wait_stream(torch_stream)
        with wp.ScopedDevice(self.wp_device):
            yield
        torch_stream.wait_stream(self._warp_stream_t)

    def _physics(self) -> None:
        for _ in range(self.cfg.decimation):
            mjwarp.step(self.model, self.data)
            wp.launch(
                _collect_overflow,
                dim=self.num_envs,
                inputs=[self.data.overflow, self._overflow_mask],
                outputs=[self._overflow_count, self._overflow_flags],
            )

    def _kinematics(self) -> None:
        # Poses and body velocities only: fwd_velocity would add the bias forces (rne) and passive
        # forces, which tasks never read and the next physics step recomputes anyway.
        mjwarp.fwd_kinematics(self.model, self.data)
        mjwarp.com_vel(self.model, self.data)

    def _run(self, fn, graph_attr: str) -> None:
        """Run ``fn``'s launches; on CUDA capture them once (modules load before the
        capture, which records without executing) and replay the graph."""
        if not self._use_graph or self._external_stream is not None:
            fn()
            return
        graph = getattr(self, graph_attr)
        if graph is None:
            gc_was_enabled = gc.isenabled()
            gc.disable()  # a finalizer running inside the capture would corrupt the graph
            try:
                with wp.ScopedCapture(device=self.wp_device, force_module_load=True) as capture:
                    fn()
            finally:
                if gc_was_enabled:
                    gc.enable()
            graph = capture.graph
            setattr(self, graph_attr, graph)
        wp.capture_launch(graph)

    def step(self, ctrl: torch.Tensor | None = None) -> None:
        """Apply ``ctrl`` (optional; else the current ``self.ctrl``) and run ``decimation`` substeps."""
        if ctrl is not None:
            self.ctrl.copy_(ctrl)
        with self._on_warp_stream():
            if self.is_cuda:
                stream = wp.get_stream(self.wp_device)
                stream.record_event(self._ev_start)
                self._run(self._physics, "_step_graph")
                stream.record_event(self._ev_end)
                self._timed = True
            else:
                t0 = time.perf_counter()
                self._run(self._physics, "_step_graph")
                self._last_physics_ms = (time.perf_counter() - t0) * 1e3

    def forward(self) -> None:
        """Recompute poses and body velocities (xpos, xquat, site_xpos, subtree_com, cvel) of all worlds."""
        with self._on_warp_stream():
            self._run(self._kinematics, "_kin_graph")

    def reset_worlds(
        self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, *, forward: bool = True
    ) -> None:
        """Set ``qpos``/``qvel`` (full (N, nq)/(N, nv) tensors; only rows where ``mask``) and clear
        the per-world solver warm start, applied forces and time. ``forward=False`` skips the
        ``forward()`` for callers that run it once per env step before observations anyway."""
        m = mask.to(device=self.device, dtype=torch.bool)
        m1 = m[:, None]
        self.qpos.copy_(torch.where(m1, qpos.to(self.qpos), self.qpos))
        self.qvel.copy_(torch.where(m1, qvel.to(self.qvel), self.qvel))
        self._qacc_warmstart.masked_fill_(m1, 0.0)
        self._qfrc_applied.masked_fill_(m1, 0.0)
        self._xfrc_applied.masked_fill_(m[:, None, None], 0.0)
        self.time.masked_fill_(m, 0.0)
        if forward:
            self.forward()

    # The dynamic state the next step depends on: positions, velocities, controls, time, the solver's
    # warm start and the applied forces.
    _STATE_FIELDS = ("qpos", "qvel", "ctrl", "time", "_qacc_warmstart", "_qfrc_applied", "_xfrc_applied")

    def save_state(self) -> dict[str, torch.Tensor]:
        """A copy of every world's dynamic state, for ``load_state`` (to step one state several ways)."""
        return {name: getattr(self, name).clone() for name in self._STATE_FIELDS}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Put back a ``save_state`` copy, then ``forward()`` for the derived quantities."""
        for name in self._STATE_FIELDS:
            getattr(self, name).copy_(state[name])
        self.forward()

    def set_solver_iterations(self, iterations: int) -> None:
        """Change every world's constraint-solver cap. A captured physics graph holds the cap as a launch
        argument, so the next step captures anew."""
        self.model.opt.iterations = self.mj_model.opt.iterations = int(iterations)
        self._step_graph = None

    def expand_model_field(self, name: str) -> torch.Tensor:
        """Give every world its own copy of the batchable model field ``name`` (e.g.
        ``"geom_friction"``, ``"body_mass"``) and return its (N, ...) torch view, for domain
        randomization. Captured graphs are dropped (they hold the old array's address) and are
        recaptured on next use. Fields derived from it (e.g. ``body_subtreemass``) are the
        caller's business."""
        arr = getattr(self.model, name)
        if arr.shape[0] != self.num_envs:
            if arr.shape[0] != 1:
                raise ValueError(f"model.{name} has leading size {arr.shape[0]}, expected 1 or {self.num_envs}")
            host = np.repeat(arr.numpy(), self.num_envs, axis=0)
            setattr(self.model, name, wp.array(host, dtype=arr.dtype, device=self.wp_device))
            self._step_graph = self._kin_graph = None
            self.model_generation += 1
        return wp.to_torch(getattr(self.model, name))

    # ------------------------------------------------------------- metrics
    @property
    def last_physics_ms(self) -> float:
        """Wall time of the last ``step()``'s physics. On CUDA this waits for that step's end
        event: read it at the metric rate, not every step."""
        if self.is_cuda and self._timed:
            self._last_physics_ms = wp.get_event_elapsed_time(self._ev_start, self._ev_end, synchronize=True)
            self._timed = False
        return self._last_physics_ms

    def overflow_total(self) -> int:
        """Substeps x worlds that overflowed a contact/constraint capacity so far (host sync)."""
        return int(self.overflow_count.sum().item())

    def check_overflow(self) -> int:
        """Host-syncing overflow check, for episode ends / the metric rate. With
        ``overflow="error"`` raises ``SimOverflowError``; else returns the count."""
        total = self.overflow_total()
        if total and self.cfg.overflow == "error":
            bits = int(np.bitwise_or.reduce(self.overflow_flags.cpu().numpy()))
            kinds = [t.name for t in mjwarp.OverflowType if t.value and t.value & bits and t.name != "ALL"]
            raise SimOverflowError(
                f"MJWarp capacity overflow in {total} world-substeps ({', '.join(kinds)}); "
                f"nconmax={self.nconmax}, njmax={self.njmax} per world: raise sim.nconmax / sim.njmax"
            )
        return total

    def reset_overflow(self) -> None:
        self.overflow_count.zero_()
        self.overflow_flags.zero_()
