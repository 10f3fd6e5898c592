"""CUDA process-sharing execution mode: probe, diagnostics, evidence, client verification."""

from .errors import CudaProcessSharingError, Prerequisite
from .evidence import CudaProcessSharingEvidence, MpsClientReport
from .probe import HostFacts, probe_cuda_process_sharing, verify_mps_clients

__all__ = [
    "CudaProcessSharingError",
    "CudaProcessSharingEvidence",
    "HostFacts",
    "MpsClientReport",
    "Prerequisite",
    "probe_cuda_process_sharing",
    "verify_mps_clients",
]
