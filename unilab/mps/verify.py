"""The launcher's check of one rank once its learner and collector have CUDA contexts (their `Ready`).

Under MPS: both see the probed GPU and both are clients of the probed daemon; only then does the rank's evidence
say `effective: mps`, and a child that is not a client stops the run (`mps_clients_attached`). In null mode with
a reachable daemon: whether the children became its clients anyway (the ambient record). The daemon is asked
`get_server_list` and `get_client_list` only, which never start a server.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping

from .control import Cancelled, ControlBinaryMissing, DaemonNoAnswer, MpsControl, PipeDirectory
from .errors import CudaProcessSharingError, Prerequisite
from .host import HostFacts
from .record import CudaProcessSharingEvidence, MpsClientReport

AMBIENT_ATTACH_TIMEOUT_S = 2.0  # null mode: a child not listed by then is recorded as no client


@dataclass(frozen=True)
class Child:
    """One of a rank's two processes, as its `Ready` reported it."""

    name: str  # as the launcher calls it: `learner`, `collector[1]`
    pid: int
    gpu_uuid: str | None  # the GPU it sees (None on the CPU)


@dataclass(frozen=True)
class RankVerification:
    """What `verify_rank` found for one rank."""

    evidence: CudaProcessSharingEvidence | None = None  # the rank's evidence after the check
    error: CudaProcessSharingError | None = None  # a child sees another GPU or is not a client: the run stops
    cancelled: bool = False  # `cancelled()` ended the daemon queries: nothing was verified
    asked: bool = False  # the daemon was asked about the children: the rank's manifest entry carries `evidence`
    announcement: str | None = None  # the console's line for verified MPS clients

    @property
    def recorded(self) -> CudaProcessSharingEvidence | None:
        """The `cuda_process_sharing` of the rank's manifest entry (None: no daemon was asked)."""
        return self.evidence if self.asked else None


def verify_rank(
    evidence: CudaProcessSharingEvidence,
    learner: Child,
    collector: Child,
    *,
    attach_timeout_s: float,
    role_env: Mapping[str, Mapping[str, str]],
    block_ambient: bool = False,
    cancelled: Callable[[], bool] | None = None,
    host: HostFacts | None = None,
) -> RankVerification:
    """Check one rank against the probe's `evidence`. `role_env`: the CUDA_MPS_* variables each role started with
    (noted in the evidence); `block_ambient`: null mode pointed the children at an empty pipe directory;
    `cancelled()` true (SIGINT/SIGTERM to the launcher) ends the daemon queries at once."""
    if evidence.configured == "mps":
        return _verify_clients(evidence, learner, collector, attach_timeout_s, role_env, cancelled, host)
    if evidence.daemon_reachable:
        return RankVerification(_ambient(evidence, learner, collector, block_ambient, cancelled, host), asked=True)
    return RankVerification(evidence)


def _verify_clients(evidence, learner: Child, collector: Child, timeout_s: float, role_env, cancelled,
                    host) -> RankVerification:
    for child in (learner, collector):
        if child.gpu_uuid is not None and child.gpu_uuid != evidence.gpu_uuid:
            return RankVerification(error=CudaProcessSharingError(
                Prerequisite.SAME_GPU, f"the {child.name} sees a different GPU than the probe resolved",
                found=f"{child.name} {child.gpu_uuid}, probe {evidence.gpu_uuid}", fix=["nvidia-smi -L"],
                before_start=False))
    pids = {learner.pid: learner.name, collector.pid: collector.name}
    report = verify_mps_clients(evidence, list(pids), timeout_s=timeout_s, cancelled=cancelled, host=host)
    if report.error == "cancelled":
        return RankVerification(cancelled=True)
    if not report.all_attached:
        names = ", ".join(f"the {pids[pid]} (pid {pid})" for pid in report.missing())
        return RankVerification(error=CudaProcessSharingError(
            Prerequisite.CLIENTS_ATTACHED,
            f"{names} is not a client of the MPS server: it created its CUDA context without reaching the "
            "daemon (CUDA initialised before CUDA_MPS_PIPE_DIRECTORY was set, another pipe directory, or "
            "another user's daemon)",
            found=f"servers {report.server_pids}, clients {report.clients_by_server}"
            + (f", error: {report.error}" if report.error else ""),
            fix=[f"export CUDA_MPS_PIPE_DIRECTORY={evidence.pipe_directory}",
                 "echo get_server_list | nvidia-cuda-mps-control",
                 "check the MPS log directory (control.log, server.log) for refused clients"],
            before_start=False,
        ))
    server = next((s for s, cs in report.clients_by_server.items() if learner.pid in cs), None)
    notes = [*evidence.notes, *(f"{key}={value} for the {role}" for role, variables in role_env.items()
                                for key, value in variables.items())]
    verified = evidence.model_copy(update={
        "effective": "mps", "clients_verified": True, "notes": notes,
        "client_pids": {name.split("[")[0]: pid for pid, name in pids.items()},
        "server_pids": report.server_pids, "server_pid": server,
    })
    return RankVerification(verified, asked=True, announcement=(
        f"MPS clients verified: learner pid {learner.pid}, collector pid {collector.pid} -> server pid {server}"))


def _ambient(evidence, learner: Child, collector: Child, blocked: bool, cancelled,
             host) -> CudaProcessSharingEvidence:
    """Null mode with a reachable daemon: whether the children ended up as MPS clients anyway."""
    children = {learner.name: learner.pid, collector.name: collector.pid}
    report = verify_mps_clients(evidence, list(children.values()), timeout_s=AMBIENT_ATTACH_TIMEOUT_S,
                                cancelled=cancelled, host=host)
    if not report.all_attached:
        if blocked:
            return evidence.model_copy(update={"notes": [
                *evidence.notes, "training.mps.block_ambient_mps: the children were pointed at an empty pipe "
                "directory; the reachable daemon lists neither of them as a client"]})
        return evidence
    return evidence.model_copy(update={
        "effective": "mps", "clients_verified": True,
        "client_pids": {name.split("[")[0]: pid for name, pid in children.items()},
        "server_pids": report.server_pids,
        "notes": [*evidence.notes, "not requested: the processes reached an ambient MPS daemon "
                  "(CUDA_MPS_PIPE_DIRECTORY or the default pipe directory); unset it for a non-MPS baseline"],
    })


def verify_mps_clients(
    evidence: CudaProcessSharingEvidence,
    pids,
    timeout_s: float = 10.0,
    *,
    host: HostFacts | None = None,
    poll_s: float = 0.2,
    cancelled: Callable[[], bool] | None = None,
) -> MpsClientReport:
    """Ask the probed daemon which of `pids` are clients of its servers, polling until timeout.
    `cancelled` (e.g. the launcher got SIGINT/SIGTERM) is looked at between polls and while a command
    waits for the daemon; once true, the report so far returns at once, with error "cancelled"."""
    host = host or HostFacts()
    pipe = PipeDirectory(evidence.pipe_directory, evidence.pipe_directory_source or "env")
    control = MpsControl(pipe, host.env, timeout_s=max(1.0, min(timeout_s, 5.0)), which=host.which,
                         cancelled=cancelled)
    wanted = [int(p) for p in pids]
    deadline = time.monotonic() + timeout_s
    while True:
        error = None
        clients: dict[int, list[int]] = {}
        try:
            servers = control.server_pids()
            for server in servers:
                clients[server] = control.client_pids(server)
        except Cancelled:
            servers, error = [], "cancelled"
        except (ControlBinaryMissing, DaemonNoAnswer) as exc:
            servers, error = [], str(exc)
        seen = {c for cs in clients.values() for c in cs}
        attached = {pid: pid in seen for pid in wanted}
        stop = error == "cancelled" or (cancelled is not None and cancelled())
        if all(attached.values()) or stop or time.monotonic() >= deadline:
            return MpsClientReport(server_pids=servers, attached=attached, clients_by_server=clients,
                                   error="cancelled" if stop and not all(attached.values()) else error)
        _sleep_unless(cancelled, min(poll_s, max(0.0, deadline - time.monotonic())))


def _sleep_unless(cancelled: Callable[[], bool] | None, seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0 and not (cancelled is not None and cancelled()):
        time.sleep(min(left, 0.05))
