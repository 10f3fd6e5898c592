"""Sizes a request asks for that the simulator or the learner's device cannot hold, found while the config is
composed (unilab.config.validation) instead of after the run directory exists.

- The simulator: Warp keeps every array extent, every byte stride and every `wp.tid()` extent in a signed
  32-bit integer (warp.types.check_array_shape, array_t), and MJWarp keeps the contacts of all worlds in one flat
  array of nconmax x num_envs entries. So num_envs x the largest per-world extent that MJWarp flattens over the
  worlds must stay below 2**31, and the dense constraint Jacobian of one world (njmax x nv, padded, float32) must
  fit a 32-bit byte stride. The per-world sizes come from the task's MjModel, compiled from its MjSpec on the CPU
  in milliseconds (no Warp, no kernels).
- The learner's device: the replay (algo.replay_capacity rows) and the ingress slots the collector fills
  (training.loop.ingress_slots chunks of task.num_envs x training.loop.env_steps_per_sync rows) live there, one
  float32 row holding a transition (obs, critic obs, action, reward, next obs, next critic obs, done). What is refused is a
  total above the device's whole memory, which no run could hold whatever else it left room for: NVML's total
  on a CUDA device, the host's physical memory (or the cgroup's limit, where lower) on the CPU, where the
  replay lives in host memory and its pages would run the host out of memory while it fills. A device whose
  memory is not known (a MIG instance, NVML unreadable) is not checked.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from unilab.algos.config import first_update

INT32_LIMIT = 2**31  # extents and byte strides must stay below it
FLOAT_BYTES = 4
# mujoco_warp.io: NXN broadphase below this many candidate geom pairs; above it SAP, which sorts 5 x ngeom
# entries of every world in one flat launch.
_SAP_PAIRS = 250_000
_TILE = 16  # mujoco_warp's TILE_SIZE_JTDAJ: njmax and nv are padded to multiples of it
CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")


def world_extents(model: Any, nconmax: int) -> dict[str, int]:
    """What MJWarp flattens over all worlds, per world: name -> entries."""
    extents = {"contacts (sim.nconmax)": nconmax}
    if model.ngeom * (model.ngeom - 1) // 2 >= _SAP_PAIRS:
        extents["broadphase sweep (5 x ngeom)"] = 5 * model.ngeom
    return extents


def check_simulator_sizes(task: Any, sim: Any, training: Any) -> None:
    """task.num_envs (and training.outputs.play_envs) x every flattened per-world extent < 2**31; one world's dense
    constraint Jacobian within a 32-bit byte stride (sim.njmax)."""
    from unilab.sim.capacity import derive_capacity

    model = task.build_model()
    nconmax, njmax = derive_capacity(model, sim.nconmax, sim.njmax)
    name, per_world = max(world_extents(model, nconmax).items(), key=lambda item: item[1])
    fits = (INT32_LIMIT - 1) // per_world
    for key, envs in (("task.num_envs", task.num_envs), ("training.outputs.play_envs", training.outputs.play_envs)):
        if envs is not None and envs > fits:
            lower = f" (or a lower sim.nconmax={sim.nconmax})" if sim.nconmax is not None else ""
            raise ValueError(f"{key}={envs}: expected at most {fits} envs{lower}: MJWarp keeps the {name} of all "
                             f"worlds in one array, {per_world} per world, and Warp's array sizes are 32-bit (< 2**31)")
    nv_pad = -(-(model.nv + 1) // _TILE) * _TILE  # at most what mujoco_warp pads nv to
    max_njmax = ((INT32_LIMIT - 1) // (FLOAT_BYTES * nv_pad)) // _TILE * _TILE
    if njmax > max_njmax:
        given = f"sim.njmax={njmax}" if sim.njmax is not None else \
            f"sim.njmax (null: {njmax}, derived from sim.nconmax={nconmax})"
        raise ValueError(f"{given}: expected at most {max_njmax} constraint rows per world: one world's constraint "
                         f"Jacobian (njmax x {nv_pad} padded dofs, float32) must fit Warp's 32-bit strides")


def check_first_update(algo: Any, task: Any, training: Any) -> None:
    """The replay can hold what the first update waits for (else the learner never updates)."""
    rows_per_iteration = task.num_envs * training.loop.env_steps_per_sync
    need = first_update(algo, rows_per_iteration).rows
    if need > algo.replay_capacity:
        raise ValueError(
            f"algo.replay_capacity={algo.replay_capacity}: expected at least {need}, the rows the first update waits "
            f"for: algo.batch_size={algo.batch_size}, and algo.learning_starts={algo.learning_starts} iterations of "
            f"task.num_envs={task.num_envs} x training.loop.env_steps_per_sync={training.loop.env_steps_per_sync} "
            "rows; a replay that cannot hold them never starts training")


def row_bytes(task: Any) -> int:
    """Bytes of one stored transition (unilab.runtime.protocol.transition_shapes, float32)."""
    obs, critic_obs, action = task.transition_dims()
    return FLOAT_BYTES * (2 * obs + 2 * critic_obs + action + 2)


def check_device_memory(typed: dict[str, Any], devices: list[str],
                        memory_of: Callable[[str], int | None] | None = None) -> None:
    """Every rank's replay and ingress slots fit its device's whole memory (ranks on the CPU share the host's)."""
    algo, task, training = typed["algo"], typed["task"], typed["training"]
    memory_of = memory_of or device_memory_bytes
    row = row_bytes(task)
    slot_rows = training.loop.ingress_slots * task.num_envs * training.loop.env_steps_per_sync
    for device, ranks in Counter(devices).items():
        total = memory_of(device)
        if total is None:
            continue
        budget = total // ranks  # per rank
        replay, slots = algo.replay_capacity * row, slot_rows * row
        where = f"{device}'s {_gib(total)}" + (f" shared by {ranks} ranks" if ranks > 1 else "")
        if slots >= budget:
            raise ValueError(
                f"training.loop.ingress_slots={training.loop.ingress_slots} x task.num_envs={task.num_envs} x "
                f"training.loop.env_steps_per_sync={training.loop.env_steps_per_sync} rows of {row} bytes take "
                f"{_gib(slots)}, more than {where}: expected at most {budget // row} rows in all")
        if replay + slots > budget:
            raise ValueError(
                f"algo.replay_capacity={algo.replay_capacity}: expected at most {(budget - slots) // row}: rows of "
                f"{row} bytes (the task's transition, float32), with the collector's ingress slots, take "
                f"{_gib(replay + slots)}, more than {where}")


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def device_memory_bytes(device: str) -> int | None:
    """The whole memory of `device` ("cpu", "cuda", "cuda:N"), or None where it is not known."""
    if device == "cpu":
        return host_memory_bytes()
    from unilab.mps.host import HostFacts
    from unilab.mps.nvml import GpuInfo, NvmlUnavailable, visible_devices

    host = HostFacts()
    try:
        visible = visible_devices(host.env.get("CUDA_VISIBLE_DEVICES"), host.nvml.gpus())
        ordinal = int(device.partition(":")[2] or 0)
        gpu = visible[ordinal] if ordinal < len(visible) else None
        if not isinstance(gpu, GpuInfo) or gpu.mig_enabled:  # a MIG instance has a share NVML's total is not
            return None
        return int(host.nvml.memory(gpu.index).total_mib * 2**20)
    except NvmlUnavailable:
        return None


def host_memory_bytes() -> int | None:
    """Physical memory, or the cgroup's memory.max where that is lower (a container's limit)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        limit = CGROUP_MEMORY_MAX.read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total
