"""CUDA MPS, everything unilab does with it, in one package.

- host (`HostFacts`): the one facade over the host that everything below reads and acts through; tests
  substitute fakes there.
- probe (`probe_cuda_process_sharing`): the host checked against a requested mode while the config
  is composed; `errors` names each unmet prerequisite and its fix.
- child_env: the environment the learner and collector start with (the pinned GPU, the pipe directory,
  each role's CUDA_MPS_* variables and their checks).
- verify (`verify_rank`, `verify_mps_clients`): the launcher's check of each rank once its children have CUDA
  contexts: the same GPU, both clients of the probed daemon, the ambient-MPS record.
- record: the MPS section of the run evidence (`runtime_manifest.json`'s `cuda_process_sharing`).
- nvml, control: GPU identity through NVML and the `nvidia-cuda-mps-control` client; neither
  creates a CUDA context.
- layout: the one directory convention for daemons (the probe's fixes and `unilab mps start`).
- daemon, status, cli: `unilab mps start|status|env|stop` (`unilab mps doctor`, which composes a train
  config, is unilab.cli.doctor).
- gemm_check: the half-precision self-check of a process under an MPS thread share (imports torch
  when called; nothing else here does).
"""

from .errors import CudaProcessSharingError, MpsToolError, Prerequisite
from .host import HostFacts
from .probe import probe_cuda_process_sharing
from .record import CudaProcessSharingEvidence, MpsClientReport
from .verify import verify_mps_clients

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
