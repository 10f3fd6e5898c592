"""CUDA MPS, everything unilab does with it, in one package.

- probe (`probe_cuda_process_sharing`): the host checked against a requested mode while the config
  is composed; `errors` names each unmet prerequisite and its fix. `verify_mps_clients`: the
  launcher's check that the children are clients of the probed daemon.
- record: the MPS section of the run evidence (`runtime_manifest.json`'s `cuda_process_sharing`).
- nvml, control: GPU identity through NVML and the `nvidia-cuda-mps-control` client; neither
  creates a CUDA context.
- layout: the one directory convention for daemons (the probe's fixes and `unilab mps start`).
- host, daemon, status, cli: `unilab mps start|status|env|stop` (`unilab mps doctor`, which composes a train
  config, is unilab.cli.doctor).
- child_env: the environment the learner and collector start with.
- gemm_check: the half-precision self-check of a process under an MPS thread share (imports torch
  when called; nothing else here does).
"""

from .errors import CudaProcessSharingError, MpsToolError, Prerequisite
from .probe import HostFacts, probe_cuda_process_sharing, verify_mps_clients
from .record import CudaProcessSharingEvidence, MpsClientReport

__all__ = [
    "CudaProcessSharingError",
    "CudaProcessSharingEvidence",
    "HostFacts",
    "MpsClientReport",
    "MpsToolError",
    "Prerequisite",
    "probe_cuda_process_sharing",
    "verify_mps_clients",
]
