"""From a composed config to a prepared run: probe, snapshot, run directory, evidence files.

Order matters: the probe runs first, so a request that cannot be honoured leaves nothing
behind (no run directory, no CUDA context, no environment, no process).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from unilab.config.schema import EXECUTION_EVIDENCE_INTERPOLATION
from unilab.evidence.manifest import RuntimeManifest
from unilab.evidence.run_config import resolved_config, write_run_config
from unilab.execution.evidence import CudaProcessSharingEvidence

from .run_dir import new_run_dir


class ConfigError(ValueError):
    """A config that composes but cannot be run as given."""


@dataclass
class PreparedRun:
    run_dir: Path
    config: dict[str, Any]
    manifest: RuntimeManifest


def execution_evidence(cfg: DictConfig) -> CudaProcessSharingEvidence:
    """Resolve the probe node; raises CudaProcessSharingError when the request cannot be honoured."""
    raw = OmegaConf.to_container(cfg, resolve=False).get("execution_evidence")
    if raw != EXECUTION_EVIDENCE_INTERPOLATION:
        raise ConfigError("execution_evidence is computed by the execution probe and cannot be set")
    node = cfg.execution_evidence
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return CudaProcessSharingEvidence.model_validate(data)


def prepare_run(cfg: DictConfig) -> PreparedRun:
    evidence = execution_evidence(cfg)
    config = resolved_config(cfg)
    run_dir = new_run_dir(cfg.training.log_dir, cfg.training.run_name, str(cfg.algo.name), str(cfg.task.name))
    write_run_config(run_dir, config)
    manifest = RuntimeManifest(
        run_dir=str(run_dir),
        algo=str(cfg.algo.name),
        task=str(cfg.task.name),
        backend=str(cfg.sim.backend),
        cuda_process_sharing=evidence,
    )
    manifest.write(run_dir)
    return PreparedRun(run_dir=run_dir, config=config, manifest=manifest)
