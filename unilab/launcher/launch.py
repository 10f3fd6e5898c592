"""Starts the rank-local learner and collector, verifies MPS attachment, supervises, cleans up.

The launching process never imports torch or Warp: the children are fresh interpreters
(spawn), and their environment (MPS variables included) is fixed before they start.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import sys
import time
from dataclasses import dataclass, field

from omegaconf import DictConfig

from unilab.evidence.manifest import RankEvidence
from unilab.execution import CudaProcessSharingError, Prerequisite, verify_mps_clients

from .child_env import child_device_and_env, environ
from .prepare import PreparedRun
from .summary import RunSummary

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
STOP_GRACE_S = 10.0


@dataclass
class _State:
    ready: dict = field(default_factory=dict)  # role -> (pid, device_type, uuid)
    verified: bool = False
    status: str | None = None
    cause: str | None = None
    failed_role: str | None = None
    traceback: str | None = None
    learner_summary: dict = field(default_factory=dict)
    stop_deadline: float | None = None
    interrupted_by: str | None = None


def launch(prepared: PreparedRun, cfg: DictConfig) -> int:
    from unilab.runtime.collector import collector_main
    from unilab.runtime.learner import learner_main
    from unilab.runtime.spec import RoleSpec

    training = prepared.config["training"]
    evidence = prepared.manifest.cuda_process_sharing
    device, env = child_device_and_env(evidence, str(training["device"]))
    spec = RoleSpec(
        run_dir=str(prepared.run_dir),
        config=prepared.config,
        device=device,
        resume_checkpoint=prepared.resume_checkpoint,
        stall_timeout_s=float(training["stall_timeout_s"]),
        startup_timeout_s=float(training["startup_timeout_s"]),
        replay_slots=int(training["ingress_slots"]),
        extra={"tensorboard": bool(training["tensorboard"])},
    )
    ctx = mp.get_context("spawn")
    to_learner, to_collector, to_launcher = ctx.Queue(), ctx.Queue(), ctx.Queue()
    stop_event, go_event = ctx.Event(), ctx.Event()
    procs = {
        "learner": ctx.Process(target=learner_main, name="unilab-learner",
                               args=(spec, to_learner, to_collector, to_launcher, stop_event, go_event)),
        "collector": ctx.Process(target=collector_main, name="unilab-collector",
                                 args=(spec, to_collector, to_learner, to_launcher, stop_event)),
    }
    state = _State()
    started = time.monotonic()
    previous = _install_signal_handlers(state)
    try:
        with environ(env):
            for proc in procs.values():
                proc.start()
        print(f"unilab: run {prepared.run_dir}  learner pid {procs['learner'].pid}, collector pid "
              f"{procs['collector'].pid} on {device}"
              f"{' (MPS, ' + evidence.gpu_uuid + ')' if evidence.configured == 'mps' else ''}", file=sys.stderr)
        code = _supervise(prepared, spec, procs, to_launcher, stop_event, go_event, state)
    finally:
        _restore_signal_handlers(previous)
        _stop_all(procs)
    summary = RunSummary(
        status=state.status or "failed",
        cause=state.cause,
        failed_role=state.failed_role,
        traceback=state.traceback,
        iterations=state.learner_summary.get("iterations"),
        env_steps=state.learner_summary.get("env_steps"),
        wall_s=round(time.monotonic() - started, 3),
        exit_codes={role: p.exitcode for role, p in procs.items()},
        final_metrics=state.learner_summary.get("final_metrics") or {},
    )
    summary.write(prepared.run_dir)
    print(f"unilab: run {summary.status}{': ' + summary.cause if summary.cause else ''} -> {prepared.run_dir}",
          file=sys.stderr)
    if code == EXIT_USAGE:
        return code
    return {"completed": EXIT_COMPLETED, "interrupted": EXIT_INTERRUPTED}.get(summary.status, EXIT_FAILED)


def _supervise(prepared, spec, procs, to_launcher, stop_event, go_event, state: _State) -> int:
    startup_deadline = time.monotonic() + spec.startup_timeout_s
    while True:
        if state.interrupted_by and not stop_event.is_set():
            _fail(state, "interrupted", f"{state.interrupted_by} received", None, None, stop_event)
        try:
            msg = to_launcher.get(timeout=0.2)
        except queue.Empty:
            msg = None
        if msg is not None:
            kind, role = msg[0], msg[1]
            if kind == "ready":
                state.ready[role] = msg[2:]
                if len(state.ready) == 2 and not state.verified:
                    error = _verify(prepared, state)
                    if error is not None:
                        print(error.render(), file=sys.stderr)
                        _fail(state, "failed", f"{error.prerequisite.value}: {error.message}", "launcher", None,
                              stop_event)
                        return EXIT_USAGE
                    state.verified = True
                    go_event.set()
            elif kind == "error":
                _fail(state, "failed", f"the {role} raised an exception", role, msg[2], stop_event)
            elif kind == "finished":
                state.learner_summary = msg[2] or {}
                if state.status is None:
                    state.status = state.learner_summary.get("status")
        alive = {role: p.is_alive() for role, p in procs.items()}
        if not any(alive.values()):
            _drain(to_launcher, state)
            for role, p in procs.items():
                if p.exitcode not in (0, None) and state.status != "failed":
                    _fail(state, "failed", f"the {role} exited with code {p.exitcode}", role, state.traceback,
                          stop_event)
            if state.status is None:
                state.status, state.cause = "failed", "the processes ended without a summary"
            return EXIT_COMPLETED
        for role, is_alive in alive.items():
            other = "collector" if role == "learner" else "learner"
            if not is_alive and alive[other] and state.stop_deadline is None:
                if procs[role].exitcode not in (0, None) and state.status is None:
                    _fail(state, "failed", f"the {role} exited with code {procs[role].exitcode}", role, None,
                          stop_event)
                else:
                    stop_event.set()
                    state.stop_deadline = time.monotonic() + STOP_GRACE_S
        if not state.verified and time.monotonic() > startup_deadline:
            _fail(state, "failed", f"start-up took longer than {spec.startup_timeout_s:g} s", "launcher", None,
                  stop_event)
        if state.stop_deadline is not None and time.monotonic() > state.stop_deadline:
            for p in procs.values():
                if p.is_alive():
                    p.terminate()
            state.stop_deadline = time.monotonic() + STOP_GRACE_S


def _fail(state: _State, status: str, cause: str, role, tb, stop_event) -> None:
    if state.status in (None, "completed"):
        state.status, state.cause, state.failed_role = status, cause, role
    if tb and not state.traceback:
        state.traceback = tb
    stop_event.set()
    if state.stop_deadline is None:
        state.stop_deadline = time.monotonic() + STOP_GRACE_S


def _drain(to_launcher, state: _State) -> None:
    while True:
        try:
            msg = to_launcher.get_nowait()
        except (queue.Empty, OSError, ValueError):
            return
        if msg[0] == "error" and state.traceback is None:
            state.traceback = msg[2]
            state.failed_role = state.failed_role or msg[1]
        elif msg[0] == "finished":
            state.learner_summary = msg[2] or {}
            if state.status is None:
                state.status = state.learner_summary.get("status")


def _verify(prepared: PreparedRun, state: _State) -> CudaProcessSharingError | None:
    """Both children have a CUDA context: check the GPU they see and, under MPS, that they are clients."""
    evidence = prepared.manifest.cuda_process_sharing
    (l_pid, l_type, l_uuid), (c_pid, c_type, c_uuid) = state.ready["learner"], state.ready["collector"]
    rank = RankEvidence(rank=0, device=str(prepared.config["training"]["device"]), gpu_uuid=evidence.gpu_uuid,
                        learner_pid=l_pid, collector_pid=c_pid, learner_gpu_uuid=l_uuid, collector_gpu_uuid=c_uuid)
    if evidence.configured == "mps":
        for role, uuid in (("learner", l_uuid), ("collector", c_uuid)):
            if uuid is not None and uuid != evidence.gpu_uuid:
                return CudaProcessSharingError(
                    Prerequisite.SAME_GPU, f"the {role} sees a different GPU than the probe resolved",
                    found=f"{role} {uuid}, probe {evidence.gpu_uuid}", fix=["nvidia-smi -L"], before_start=False)
        report = verify_mps_clients(evidence, [l_pid, c_pid],
                                    timeout_s=float(prepared.config["training"]["mps_attach_timeout_s"]))
        if not report.all_attached:
            missing = [("learner" if pid == l_pid else "collector", pid) for pid in report.missing()]
            names = ", ".join(f"the {role} (pid {pid})" for role, pid in missing)
            return CudaProcessSharingError(
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
            )
        servers = report.server_pids
        evidence = evidence.model_copy(update={
            "effective": "mps", "clients_verified": True,
            "client_pids": {"learner": l_pid, "collector": c_pid},
            "server_pids": servers, "server_pid": next((s for s, cs in report.clients_by_server.items()
                                                        if l_pid in cs), servers[0] if servers else None),
        })
        rank.cuda_process_sharing = evidence
    manifest = prepared.manifest.model_copy(update={"cuda_process_sharing": evidence, "ranks": [rank]})
    manifest.write(prepared.run_dir)
    prepared.manifest = manifest
    return None


def _install_signal_handlers(state: _State):
    def handler(signum, _frame):
        state.interrupted_by = signal.Signals(signum).name

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (e.g. embedded use): leave signals alone
            pass
    return previous


def _restore_signal_handlers(previous) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)


def _stop_all(procs) -> None:
    for p in procs.values():
        p.join(timeout=STOP_GRACE_S)
    for p in procs.values():
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
