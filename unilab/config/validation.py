"""Every check a `train` request must pass, in one place, run while the config is composed.

`validate(cfg)` takes a composed config and returns the `ValidatedRequest` the launcher consumes: the
resolved values, the probe's evidence for every rank, the rank devices, the MPS variables per role and, under
torchrun or srun, this process's rank. It reads host facts (NVML, the MPS control daemon, the cluster
launcher's environment) but creates nothing: no directory, no CUDA context, no
process. The first unmet prerequisite or bad value raises `ConfigError` or `CudaProcessSharingError`.

Every entry point reaches it before anything exists:
- `train`, `train --cfg job` and each job of `train -m` call it on the composed config (unilab.cli.train);
- the config's `execution_evidence` node is an interpolation of the resolver registered here
  (`${unilab.validate:}`), so resolving a config composed with Hydra's compose API (`OmegaConf.to_object`,
  `OmegaConf.resolve`, reading the node) runs the same checks and raises `RequestError`, which carries the
  same error. The node is the schema's first field, so the checks run before any other value is converted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from unilab.mps import child_env
from unilab.mps.errors import CudaProcessSharingError, MpsSettingError
from unilab.mps.record import CudaProcessSharingEvidence
from unilab.world import DistributedContext, WorldError, from_environment

from . import sizes
from .nearest import unknown_key
from .run import GROUP_KEYS, RunConfig, typed_group
from .schema import (EXECUTION_EVIDENCE_INTERPOLATION, WANDB_EXTRA_HINT, MpsSettings, RunSettings, TrainConfig,
                     TrainingConfig)

COMPUTED_KEY = "execution_evidence"  # what the probe found: in runtime_manifest.json, not run_config.json


class ConfigError(ValueError):
    """A config that composes but cannot be run as given; the message says what to change."""


class NoGpuError(ConfigError):
    """training.run.device names a CUDA device on a host where no NVIDIA GPU can be used: a run refuses it; a look at
    the config (`train --cfg job`) only notes it."""


class RequestError(InterpolationResolutionError):
    """What resolving a config's `execution_evidence` raises when the request cannot run: `error` is the
    ConfigError or CudaProcessSharingError that `train` prints. An InterpolationResolutionError marked
    initialised, so OmegaConf passes it on unchanged instead of wrapping it in its own."""

    def __init__(self, error: ConfigError | CudaProcessSharingError):
        self.error = error
        self.text = render(error)  # OmegaConf may reset its own `msg` on the way out
        super().__init__(self.text)
        self._initialized = True

    def __str__(self) -> str:
        return self.text


def render(error: ConfigError | CudaProcessSharingError) -> str:
    """The text `train` prints for an error the user can fix."""
    if isinstance(error, CudaProcessSharingError):
        return error.render()
    return f"unilab: invalid configuration\n  {error}"


@dataclass(frozen=True)
class ValidatedRequest:
    """A request every check passed: what the launcher consumes."""

    config: RunConfig  # every group typed, with the resolved values (run_config.json)
    rank_devices: list[str]
    rank_evidence: list[CudaProcessSharingEvidence]  # the probe's, one per rank
    role_mps_env: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> CUDA_MPS_* variables
    # torchrun or srun: the one rank this process launches (its device is rank_devices[0]); None: `train` starts
    # every rank itself (training.run.devices)
    world: DistributedContext | None = None
    notes: tuple[str, ...] = ()  # what a shown (not run) config would be refused for: `train --cfg` prints them

    @property
    def evidence(self) -> CudaProcessSharingEvidence:
        """Rank 0's evidence (runtime_manifest.json's `cuda_process_sharing`)."""
        return self.rank_evidence[0]


def validate(cfg: DictConfig, *, gpu_required: bool = True) -> ValidatedRequest:
    """All checks, in this order: the keys at the top level, the training values (the probe's timeout is
    one), the cluster launcher's rank (torchrun, srun), the execution probe, every group's values and the checks
    across groups, the MPS knobs, the rank devices, a visible GPU, the replay on each device, the probe of every
    further rank. Raises ConfigError or CudaProcessSharingError. `gpu_required=False` (a config shown, not run): a
    CUDA device on a host without a GPU is a note of the request instead of an error; `+execution=mps` still fails
    in its probe."""
    _check_top_level(cfg)
    config = {"training": _resolved(cfg, "training")}
    training = check_config(config, groups=("training",))["training"]
    check_host(training)
    world = cluster_rank(training.run, os.environ)
    timeout_s = training.mps.mps_probe_timeout_s
    config["sim"] = _resolved(cfg, "sim")
    devices = [cluster_rank_device(training.run, world)] if world else rank_devices(training.run)
    evidence = _probe(training.mps.sharing_mode, devices[0], config["sim"].get("backend"), timeout_s)
    config.update({key: _resolved(cfg, key) for key in ("algo", "task")})
    typed = check_config(config)
    mps_env = role_mps_env(training.mps)
    notes = []
    try:
        check_gpus_visible(devices)
        _checked(sizes.check_device_memory, typed, devices)
    except NoGpuError as exc:
        if gpu_required:
            raise
        notes.append(f"a run would refuse this config: {exc}")
    run_config = RunConfig(**typed, values={key: config[key] for key in GROUP_KEYS})
    return ValidatedRequest(config=run_config, rank_devices=devices,
                            rank_evidence=_rank_evidence(evidence, devices, timeout_s), role_mps_env=mps_env,
                            world=world, notes=tuple(notes))


def _check_top_level(cfg: DictConfig) -> None:
    known = {f.name for f in dataclasses.fields(TrainConfig)} | {"hydra"}
    for key in cfg.keys():
        if key not in known:
            raise ConfigError(unknown_key(str(key), TrainConfig, _members(cfg)))
    if OmegaConf.to_container(cfg, resolve=False).get(COMPUTED_KEY) != EXECUTION_EVIDENCE_INTERPOLATION:
        raise ConfigError(f"{COMPUTED_KEY} is computed by the execution probe and cannot be set")


def _members(cfg: DictConfig) -> dict[str, str]:
    """group -> the member the config names (task -> g1_walk_flat), where it names one plainly."""
    from unilab.registry import GROUPS

    found = {}
    for group, spec in GROUPS.items():
        with contextlib.suppress(OmegaConfBaseException):
            name = OmegaConf.select(cfg, f"{group}.{spec.key}", default=None)
            if isinstance(name, str):
                found[group] = name
    return found


def _resolved(cfg: DictConfig, key: str) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(cfg[key], resolve=True, enum_to_str=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(_message(exc)) from None


def _message(exc: Exception) -> str:
    """An exception's text without OmegaConf's type bookkeeping (`object_type=...`), which says nothing a
    user can act on."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return "\n  ".join(line for line in lines if line and not line.startswith(("reference_type=", "object_type=")))


def _probe(requested, device: str, backend, timeout_s: float) -> CudaProcessSharingEvidence:
    from unilab.mps import probe

    # Learner and collector both run on training.run.device (the roles of a rank share it).
    return probe.probe_cuda_process_sharing(requested, device, device, backend=backend, timeout_s=timeout_s)


def check_config(config: dict, groups: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Every group's own checks on its values (its schema's `__post_init__`: ranges, choices, files), and
    keys the schemas lack (`+training.typo=1` adds one past Hydra). `groups`: only these (default: all); with
    all of them, the checks across groups too (`check_across_groups`). Returns each group's dataclass (what the
    run reads)."""
    from omegaconf.errors import ConfigKeyError

    typed: dict[str, Any] = {}
    for group in groups or GROUP_KEYS:
        try:
            typed[group] = typed_group(group, config[group])
        except ConfigKeyError as exc:
            raise ConfigError(unknown_key(f"{group}.{exc.full_key}", exc.object_type)) from None
        except (ValueError, OmegaConfBaseException) as exc:
            raise ConfigError(_message(exc)) from None
    if set(typed) == set(GROUP_KEYS):
        _checked(check_across_groups, typed)
    return typed


def check_across_groups(typed: dict[str, Any]) -> None:
    """What one group's values mean under another's: the task's lengths (episode, clips) in the simulator's control
    steps, the envs against the simulator's array sizes, the replay against what the first update waits for."""
    algo, task, sim, training = (typed[key] for key in GROUP_KEYS)
    if getattr(algo, "symmetry", False) and not getattr(task, "MIRRORED", False):
        raise ValueError(f"algo.symmetry=true: the task {task.name} has no left-right mirror of its observations "
                         "and actions; drop algo.symmetry, or train a task that has one (g1_walk_flat)")
    task.check_with_sim(sim)
    sizes.check_simulator_sizes(task, sim, training)
    sizes.check_first_update(algo, task, training)


def _checked(check, *args) -> None:
    """`check(*args)`, its ValueError a ConfigError."""
    try:
        check(*args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_host(training: TrainingConfig) -> None:
    """What the training settings need of this host, checked before anything exists (the schema checks values
    alone, so that a recorded run_config.json reads back on any host): OpenGL for training clips, the wandb
    package for its logger, a temporary directory short enough for the sockets the roles pass tensors through."""
    from unilab.checks import require
    from unilab.processes import SHORT_TEMP_DIRS, SOCKET_PATH_MAX, SOCKET_TAIL, socket_temp_dir
    from unilab.viz.gl import require_gl_for

    if socket_temp_dir() is None:
        temp_dir = tempfile.gettempdir()
        raise ConfigError(f"TMPDIR={temp_dir}: too long for the Unix sockets through which the learner and the "
                          f"collector pass tensors ({len(os.fsencode(temp_dir)) + SOCKET_TAIL} bytes with "
                          f"multiprocessing's names, at most {SOCKET_PATH_MAX}), and none of "
                          f"{', '.join(SHORT_TEMP_DIRS)} is writable to take them; set TMPDIR to a shorter directory")

    # clips need OpenGL; training does not
    _checked(require_gl_for, "training.outputs.video_interval", training.outputs.video_interval)
    _checked(require, "wandb" not in training.outputs.logger or importlib.util.find_spec("wandb") is not None,
             "training.outputs.logger", list(training.outputs.logger),
             f"loggers whose packages are installed (wandb is not: {WANDB_EXTRA_HINT})")


def role_mps_env(mps: MpsSettings) -> dict[str, dict[str, str]]:
    """role -> the CUDA_MPS_* variables its child starts with (unilab.mps.child_env checks the values)."""
    try:
        return child_env.role_mps_env(dataclasses.asdict(mps.mps_active_thread_percentage),
                                      dataclasses.asdict(mps.mps_client_priority), mps.sharing_mode)
    except MpsSettingError as exc:
        raise ConfigError(str(exc)) from None


def cluster_rank(run: RunSettings, environ) -> DistributedContext | None:
    """The rank torchrun or srun made of this process (None: a plain `train`, or a world of one), checked
    against what the request asks: its own ranks (training.run.devices), a resume, a run name all ranks share."""
    try:
        world = from_environment(environ)
    except WorldError as exc:
        raise ConfigError(str(exc)) from None
    if world is None:
        return None
    launcher = f"{world.launched_by} (rank {world.rank} of {world.world_size})"
    if run.devices:
        raise ConfigError(f"training.run.devices={run.devices} under {launcher}: training.run.devices starts one "
                          f"host's ranks from one train; under {world.launched_by} each worker is one rank on "
                          "cuda:LOCAL_RANK. Drop training.run.devices and set the ranks per node with "
                          "torchrun --nproc-per-node")
    if not world.distributed:
        return None
    if run.resume:
        raise ConfigError(f"training.run.resume under {launcher}: a multi-node run cannot be resumed yet; resume "
                          "it on one host (train training.run.resume=... 'training.run.devices=[...]') or start a new "
                          "run")
    if not run.run_name and not world.run_id:
        raise ConfigError(f"no run name under {launcher}: every rank must derive the same run directory, never "
                          "from its own clock. Set training.run.run_name=NAME (the same on every node) or give "
                          "torchrun --rdzv-id ID (under Slurm the job id is used)")
    return world


def cluster_rank_device(run: RunSettings, world: DistributedContext) -> str:
    """A torchrun or srun rank's device: the CPU, or the GPU of its local rank (cuda:LOCAL_RANK)."""
    device = str(run.device)
    if device == "cpu":
        return device
    if device not in ("cuda", "cuda:0"):
        raise ConfigError(f"training.run.device={device} under {world.launched_by}: each rank takes cuda:LOCAL_RANK "
                          f"(here cuda:{world.local_rank}); leave training.run.device at cuda (or cpu)")
    return f"cuda:{world.local_rank}"


def rank_devices(run: RunSettings) -> list[str]:
    """One device per rank: `training.run.devices` lists GPU indices (one rank each); on the CPU the
    list only sets the number of ranks."""
    devices = list(run.devices or [])
    device = str(run.device)
    if not devices:
        return [device]
    if len(set(devices)) != len(devices):
        raise ConfigError(f"training.run.devices={devices}: a GPU may appear once (one rank per GPU)")
    if device == "cpu":
        return ["cpu"] * len(devices)
    wanted = f"cuda:{devices[0]}"
    if device not in (wanted, "cuda" if devices[0] == 0 else wanted):
        raise ConfigError(
            f"training.run.devices={devices} but training.run.device={device}: "
            f"set training.run.device={wanted} (rank 0's device) or drop training.run.devices"
        )
    return [f"cuda:{d}" for d in devices]


def check_gpus_visible(devices: list[str]) -> None:
    """A CUDA device on a host without a visible NVIDIA GPU fails here, not in the children."""
    if not any(d.startswith("cuda") for d in devices):
        return
    from unilab.mps.host import HostFacts
    from unilab.mps.nvml import NvmlUnavailable

    try:
        count = len(HostFacts().nvml.gpus())
    except NvmlUnavailable as exc:
        raise NoGpuError(
            f"training.run.device={devices[0]} but no NVIDIA GPU can be used here ({exc}); "
            "train on the CPU with training.run.device=cpu (e.g. train +preset=cpu_smoke)"
        ) from exc
    if count == 0:
        raise NoGpuError(f"training.run.device={devices[0]} but NVML sees no GPU; use training.run.device=cpu")


def _rank_evidence(evidence: CudaProcessSharingEvidence, devices: list[str],
                   timeout_s: float) -> list[CudaProcessSharingEvidence]:
    """The probe's evidence for every rank: under MPS each further rank's GPU is probed too."""
    out = [evidence]
    for device in devices[1:]:
        if evidence.configured == "mps":
            out.append(_probe("mps", device, evidence.backend, timeout_s))
        else:
            out.append(evidence.model_copy(update={"learner_device": device, "collector_device": device}))
    return out


def validated_evidence(*, _root_: DictConfig) -> DictConfig:
    """The resolver behind `execution_evidence`: every check of `validate`, then rank 0's evidence."""
    try:
        request = validate(_root_)
    except (ConfigError, CudaProcessSharingError) as exc:
        raise RequestError(exc) from None
    return OmegaConf.create(request.evidence.model_dump(mode="json"))
