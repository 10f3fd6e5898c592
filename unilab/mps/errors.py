"""The error types of the package: an unmet prerequisite of a CUDA process-sharing request (with its fix), an
MPS setting of a request that cannot be used, and a failure of `unilab mps` (with its exit status)."""

from __future__ import annotations

from enum import Enum


class Prerequisite(str, Enum):
    """Machine-readable ids, in the order the probe checks them."""

    MODE_VALUE = "mode_value"
    BACKEND = "backend_mjwarp"
    PLATFORM = "platform_linux"
    LEARNER_CUDA = "learner_cuda"
    COLLECTOR_CUDA = "collector_cuda"
    NVML = "nvml_available"
    DEVICE_VISIBLE = "device_visible"
    NO_MIG = "no_mig"
    SAME_GPU = "same_physical_gpu"
    PIPE_DIRECTORY = "mps_pipe_directory"
    CONTROL_PIPE = "mps_control_pipe"
    CONTROL_PIPE_SOCKET = "mps_control_pipe_socket"
    CONTROL_PIPE_ACCESS = "mps_control_pipe_access"
    CONTROL_BINARY = "mps_control_binary"
    DAEMON_ANSWERS = "mps_daemon_answers"
    COMPUTE_MODE = "gpu_compute_mode"
    CLIENTS_ATTACHED = "mps_clients_attached"


class CudaProcessSharingError(RuntimeError):
    """A requested execution mode cannot be honoured; nothing was started."""

    def __init__(
        self, prerequisite: Prerequisite, message: str, *, found: str, fix: list[str], before_start: bool = True
    ):
        self.prerequisite = prerequisite
        self.before_start = before_start
        self.message = message
        self.found = found
        self.fix = list(fix)
        super().__init__(self.render())

    def render(self) -> str:
        lines = [
            f"unilab: training.mps.cuda_process_sharing cannot be honoured (unmet prerequisite '{self.prerequisite.value}')",
            f"  {self.message}",
            f"  found: {self.found}",
            "  fix:",
            *(f"    {cmd}" for cmd in self.fix),
        ]
        if self.before_start:
            lines.append("  No run directory, CUDA context, environment or process was created.")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "prerequisite": self.prerequisite.value,
            "message": self.message,
            "found": self.found,
            "fix": self.fix,
        }


class MpsSettingError(ValueError):
    """A training.mps_* value that cannot be used; the message says what to change (the config's checks
    report it as a ConfigError)."""


class MpsToolError(RuntimeError):
    """A `unilab mps` subcommand failed (exit 1) or refused before it started anything (bad input, or a prerequisite
    the host does not meet: exit 2): a message for the user and the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# The CUDA runtime's MPS errors (codes 805-810 and neighbours): each means the client lost, or never got,
# its MPS server; any of them in a child's exception is the server's fault, not the child's.
MPS_CUDA_ERRORS = (
    "cudaErrorMpsConnectionFailed",
    "cudaErrorMpsRpcFailure",
    "cudaErrorMpsServerNotReady",
    "cudaErrorMpsMaxClientsReached",
    "cudaErrorMpsMaxConnectionsReached",
    "cudaErrorMpsClientTerminated",
)
MPS_SERVER_FAULT = "mps_server_fault"
# The texts the CUDA runtime and the driver API print for the same failures (torch and Warp quote them).
_MPS_ERROR_TEXTS = ("mps client failed to connect to the mps control daemon or the mps server",
                    "the remote procedural call between the mps server and the mps client failed",
                    "mps server is not ready to accept new mps client requests",
                    "hardware resources to connect a new mps client have been exhausted",
                    "the mps client has been terminated by the server",
                    "cuda_error_mps_")


def names_mps_failure(text: str | None) -> bool:
    """True when an exception text is one of the CUDA MPS client/server errors."""
    if not text:
        return False
    lowered = text.lower()
    return any(name.lower() in lowered for name in MPS_CUDA_ERRORS) or any(t in lowered for t in _MPS_ERROR_TEXTS)


def mps_server_fault_fix(log_dir: str | None) -> list[str]:
    """What a user does after the MPS server failed under a run."""
    log = f"{log_dir}/server.log" if log_dir else "<CUDA_MPS_LOG_DIRECTORY>/server.log"
    return [
        f"every client of that server fails with it; the daemon's account is in {log}",
        "restart the daemon: unilab mps stop; unilab mps start  (raw: echo quit | nvidia-cuda-mps-control; "
        "nvidia-cuda-mps-control -d)",
        "check the GPU: unilab mps doctor",
        "then resume the run: train ... training.run.resume=<run directory>",
    ]
