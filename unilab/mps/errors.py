"""The two error types of the package: an unmet prerequisite of a CUDA process-sharing request
(with its fix), and a failure of `unilab mps` (with its exit status)."""

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
            f"unilab: training.cuda_process_sharing cannot be honoured (unmet prerequisite '{self.prerequisite.value}')",
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


class MpsToolError(RuntimeError):
    """A `unilab mps` subcommand failed: a message for the user and the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code
