"""From a composed config to a prepared run: probe, snapshot, run directory, evidence files.

Order matters: the probe runs first, so a request that cannot be honoured leaves nothing
behind (no run directory, no CUDA context, no environment, no process).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from unilab.config.schema import EXECUTION_EVIDENCE_INTERPOLATION
from unilab.mps.record import CudaProcessSharingEvidence
from unilab.rundir.create import archive_segment, new_run_dir
from unilab.rundir.layout import is_run_dir
from unilab.rundir.manifest import RuntimeManifest
from unilab.rundir.provenance import source_evidence, version_evidence
from unilab.rundir.run_config import resolved_config, write_run_config


class ConfigError(ValueError):
    """A config that composes but cannot be run as given."""


@dataclass
class PreparedRun:
    run_dir: Path
    config: dict[str, Any]
    manifest: RuntimeManifest
    resume_checkpoint: str | None = None
    rank_devices: list[str] | None = None
    rank_evidence: list[CudaProcessSharingEvidence] | None = None
    role_mps_env: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> CUDA_MPS_* variables
    lock: Any = None  # the RunDirLock on run.lock: held while this object lives (the launcher's life)
    notes: list[str] = field(default_factory=list)  # for run_summary.json (e.g. a corrupt latest.pt passed over)


def execution_evidence(cfg: DictConfig) -> CudaProcessSharingEvidence:
    """Resolve the probe node; raises CudaProcessSharingError when the request cannot be honoured."""
    raw = OmegaConf.to_container(cfg, resolve=False).get("execution_evidence")
    if raw != EXECUTION_EVIDENCE_INTERPOLATION:
        raise ConfigError("execution_evidence is computed by the execution probe and cannot be set")
    node = cfg.execution_evidence
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return CudaProcessSharingEvidence.model_validate(data)


def rank_devices(training: dict) -> list[str]:
    """One device per rank: `training.devices` lists GPU indices (one rank each); on the CPU the
    list only sets the number of ranks."""
    devices = training.get("devices")
    device = str(training["device"])
    if not devices:
        return [device]
    if len(set(devices)) != len(devices):
        raise ConfigError(f"training.devices={devices}: a GPU may appear once (one rank per GPU)")
    if device == "cpu":
        return ["cpu"] * len(devices)
    wanted = f"cuda:{devices[0]}"
    if device not in (wanted, "cuda" if devices[0] == 0 else wanted):
        raise ConfigError(
            f"training.devices={devices} but training.device={device}: "
            f"set training.device={wanted} (rank 0's device) or drop training.devices"
        )
    return [f"cuda:{d}" for d in devices]


def _check_gpus_visible(devices: list[str]) -> None:
    """A CUDA device on a host without a visible NVIDIA GPU fails here, not in the children."""
    if not any(d.startswith("cuda") for d in devices):
        return
    from unilab.mps import probe
    from unilab.mps.nvml import NvmlUnavailable

    try:
        count = len(probe.HostFacts().nvml.gpus())
    except NvmlUnavailable as exc:
        raise ConfigError(
            f"training.device={devices[0]} but no NVIDIA GPU can be used here ({exc}); "
            "train on the CPU with training.device=cpu (e.g. train +preset=cpu_smoke)"
        ) from exc
    if count == 0:
        raise ConfigError(f"training.device={devices[0]} but NVML sees no GPU; use training.device=cpu")


def _rank_evidence(evidence: CudaProcessSharingEvidence, devices: list[str], timeout_s: float):
    """The probe's evidence for every rank: under MPS each further rank's GPU is probed too."""
    from unilab.mps import probe

    out = [evidence]
    for device in devices[1:]:
        if evidence.configured == "mps":
            out.append(probe.probe_cuda_process_sharing("mps", device, device, backend=evidence.backend,
                                                        timeout_s=timeout_s))
        else:
            out.append(evidence.model_copy(update={"learner_device": device, "collector_device": device}))
    return out


@dataclass
class ResumeTarget:
    run_dir: Path
    checkpoint: str
    iteration: int
    notes: list[str]


def _resume_dir(resume: str) -> Path:
    """The run directory a resume continues (the checkpoints are not read yet)."""
    from unilab.rundir.checkpoint import find_checkpoint, run_dir_of

    try:
        run_dir = run_dir_of(find_checkpoint(resume))
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc
    if not is_run_dir(run_dir):
        raise ConfigError(f"training.resume={resume}: {run_dir} is not a unilab run directory")
    return run_dir


def _resume_target(resume: str, config: dict) -> ResumeTarget:
    """Everything a resume needs, checked before the run directory is touched (ConfigError otherwise)."""
    from unilab.rundir.checkpoint import find_intact_checkpoint, run_dir_of
    from unilab.rundir.run_config import load_run_config, structure_diff, structure_of

    try:
        found = find_intact_checkpoint(resume)
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    run_dir = run_dir_of(found.path)
    if not is_run_dir(run_dir):
        raise ConfigError(f"training.resume={resume}: {run_dir} is not a unilab run directory")
    # The checkpoint's own record of what shaped it; a checkpoint from before that record: its run's config.
    try:
        theirs = found.state.get("config") or structure_of(load_run_config(run_dir))
    except ValueError as exc:
        raise ConfigError(f"training.resume={resume}: {exc}") from exc
    differing = structure_diff(theirs, structure_of(config))
    if differing:
        raise ConfigError(f"training.resume={resume}: {found.path.name} was trained with another network or "
                          "task; resume with the checkpoint's values (or start a new run):\n    "
                          + "\n    ".join(differing))
    max_iterations = int(config["algo"]["max_iterations"])
    if max_iterations <= found.iteration:
        raise ConfigError(f"training.resume={resume}: algo.max_iterations={max_iterations} but {found.path.name} "
                          f"is at iteration {found.iteration}: set algo.max_iterations above {found.iteration}")
    _check_metrics(run_dir, resume)
    return ResumeTarget(run_dir, str(found.path), found.iteration, found.notes)


def _check_metrics(run_dir: Path, resume: str) -> None:
    """Every rank's metrics.jsonl reads (a torn last line, from a run killed mid-write, is dropped at the resume)."""
    from unilab.rundir.layout import METRICS_FILE
    from unilab.rundir.metrics import MetricsError, read_metrics

    for metrics in sorted(run_dir.glob(f"**/{METRICS_FILE}")):
        try:
            read_metrics(metrics.parent, torn_tail_ok=True)
        except (MetricsError, OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"training.resume={resume}: {exc}; repair or remove that line to resume") from exc


def _lock(run_dir: Path):
    from unilab.rundir.lock import RunDirLock, RunDirLocked

    try:
        return RunDirLock(run_dir)
    except RunDirLocked as exc:
        raise ConfigError(str(exc)) from exc


def _new_run_dir(cfg: DictConfig, name_suffix: str = "") -> Path:
    """A new run directory; a log_dir that is a file or cannot be written is a usage error (exit 2)."""
    try:
        return new_run_dir(cfg.training.log_dir, cfg.training.run_name, str(cfg.algo.name), str(cfg.task.name),
                           name_suffix)
    except OSError as exc:
        raise ConfigError(f"training.log_dir={cfg.training.log_dir}: {exc.strerror or exc}; "
                          "set training.log_dir to a writable directory") from None


MPS_PRIORITY_LEVEL = {"normal": "0", "below_normal": "1"}  # CUDA_MPS_CLIENT_PRIORITY values


def role_mps_env(training: dict) -> dict[str, dict[str, str]]:
    """role -> the CUDA_MPS_* variables its child starts with, from training.mps_active_thread_percentage
    and training.mps_client_priority (checked)."""
    shares = {role: value for role, value in (training.get("mps_active_thread_percentage") or {}).items()
              if value is not None}
    for role, value in shares.items():
        if not 1 <= int(value) <= 100:
            raise ConfigError(f"training.mps_active_thread_percentage.{role}={value}: expected 1 to 100 (percent "
                              "of the GPU's SMs a role's kernels may use), or null")
    priorities = {role: str(getattr(value, "value", value))
                  for role, value in (training.get("mps_client_priority") or {}).items() if value is not None}
    for role, value in priorities.items():
        if value not in MPS_PRIORITY_LEVEL:
            raise ConfigError(f"training.mps_client_priority.{role}={value}: expected normal, below_normal or null")
    for key, given in (("mps_active_thread_percentage", shares), ("mps_client_priority", priorities)):
        if given and training.get("cuda_process_sharing") != "mps":
            raise ConfigError(f"training.{key} applies to MPS clients only: add +execution=mps or leave it null")
    env: dict[str, dict[str, str]] = {}
    for role, value in shares.items():
        env.setdefault(role, {})["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(int(value))
    for role, value in priorities.items():
        env.setdefault(role, {})["CUDA_MPS_CLIENT_PRIORITY"] = MPS_PRIORITY_LEVEL[value]
    return env


def check_config(config: dict, groups: tuple[str, ...] | None = None) -> None:
    """Every group's own checks on its values (its schema's `__post_init__`: ranges, choices, files), and
    keys the schemas lack (`+training.typo=1` adds one past Hydra), before anything exists: the children
    type the same values again in their processes. `groups`: only these (default: every group)."""
    from omegaconf.errors import ConfigKeyError

    from unilab.config.schema import TrainingConfig
    from unilab.registry import GROUPS, instantiate

    for group in groups or (*GROUPS, "training"):
        try:
            if group == "training":
                OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainingConfig), config[group]))
            else:
                instantiate(group, config[group])
        except ConfigKeyError as exc:
            raise ConfigError(f"{group}.{exc.full_key}: no such key in the {group} schema (a typo? "
                              f"`train --cfg job` lists the keys)") from None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def prepare_run(cfg: DictConfig, name_suffix: str = "") -> PreparedRun:
    """`name_suffix`: appended to the default run name (a sweep job's swept values), not to training.run_name."""
    # training first: the probe waits up to training.mps_probe_timeout_s (checked finite and > 0 there)
    check_config({"training": OmegaConf.to_container(cfg.training, resolve=True)}, groups=("training",))
    evidence = execution_evidence(cfg)
    config = resolved_config(cfg)
    check_config(config)
    mps_env = role_mps_env(config["training"])
    devices = rank_devices(config["training"])
    _check_gpus_visible(devices)
    per_rank = _rank_evidence(evidence, devices, float(config["training"]["mps_probe_timeout_s"]))
    run_dir, lock, target = _claim_run_dir(cfg, config, name_suffix)
    try:
        if target is not None:
            for note in target.notes:
                print(f"unilab: note: {note}", file=sys.stderr)
            archive_segment(run_dir)
        write_run_config(run_dir, config)
        manifest = RuntimeManifest(
            run_dir=str(run_dir),
            algo=str(cfg.algo.name),
            task=str(cfg.task.name),
            backend=str(cfg.sim.backend),
            world_size=len(devices),
            source=source_evidence(),
            versions=version_evidence(),
            cuda_process_sharing=evidence,
        )
        manifest.write(run_dir)
    except BaseException:
        lock.release()
        raise
    return PreparedRun(run_dir=run_dir, config=config, manifest=manifest,
                       resume_checkpoint=target.checkpoint if target else None, rank_devices=devices,
                       rank_evidence=per_rank, role_mps_env=mps_env, lock=lock,
                       notes=list(target.notes) if target else [])


def _claim_run_dir(cfg: DictConfig, config: dict, name_suffix: str = ""):
    """(run dir, its lock, the checked resume target or None). A resume's directory is locked before it is
    read or touched (a run still training there keeps it), then every check runs; the lock is released if
    one fails (an exception's frames would otherwise keep it alive in this process)."""
    resume = config["training"].get("resume")
    if not resume:
        run_dir = _new_run_dir(cfg, name_suffix)
        return run_dir, _lock(run_dir), None
    run_dir = _resume_dir(resume)
    lock = _lock(run_dir)
    try:
        return run_dir, lock, _resume_target(resume, config)
    except BaseException:
        lock.release()
        raise
