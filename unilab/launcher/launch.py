"""Starts each rank's learner and collector, verifies MPS attachment, supervises, cleans up.

The launching process never imports torch or Warp: the children are fresh interpreters
(spawn), and their environment (MPS variables included) is fixed before they start.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

from omegaconf import DictConfig

from unilab.evidence.manifest import RankEvidence
from unilab.mps import CudaProcessSharingError, Prerequisite, verify_mps_clients
from unilab.mps.child_env import child_device_and_env, environ

from .prepare import PreparedRun
from .summary import RunSummary

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
STOP_GRACE_S = 10.0


@dataclass
class _State:
    ready: dict = field(default_factory=dict)  # process name -> (pid, device_type, uuid)
    verified: bool = False
    status: str | None = None
    cause: str | None = None
    failed_role: str | None = None
    traceback: str | None = None
    learner_summary: dict = field(default_factory=dict)
    stop_deadline: float | None = None
    interrupted_by: str | None = None
    terminated: bool = False
    finished: set = field(default_factory=set)  # learners that delivered their summary
    notes: list = field(default_factory=list)


def launch(prepared: PreparedRun, cfg: DictConfig) -> int:
    from unilab.runtime.collector import collector_main
    from unilab.runtime.learner import learner_main
    from unilab.runtime.spec import RoleSpec

    training = prepared.config["training"]
    devices = prepared.rank_devices or [str(training["device"])]
    evidences = prepared.rank_evidence or [prepared.manifest.cuda_process_sharing]
    world_size = len(devices)
    ctx = mp.get_context("spawn")
    to_launcher = ctx.Queue()
    stop_event, go_event = ctx.Event(), ctx.Event()
    dist_port = _free_port() if world_size > 1 else None
    procs: dict[str, mp.Process] = {}
    queues: list = []
    ranks = []
    no_mps_dir = None
    if training.get("block_ambient_mps") and evidences[0].configured != "mps":
        no_mps_dir = prepared.run_dir / "no_mps_pipe"  # empty: no daemon answers there
        no_mps_dir.mkdir(exist_ok=True)
    for rank, (device, evidence) in enumerate(zip(devices, evidences)):
        child_device, env = child_device_and_env(evidence, device, str(no_mps_dir) if no_mps_dir else None)
        spec = RoleSpec(
            run_dir=str(prepared.run_dir),
            config=prepared.config,
            device=child_device,
            rank=rank,
            world_size=world_size,
            resume_checkpoint=prepared.resume_checkpoint,
            stall_timeout_s=float(training["stall_timeout_s"]),
            startup_timeout_s=float(training["startup_timeout_s"]),
            replay_slots=int(training["ingress_slots"]),
            dist_port=dist_port,
            extra={"tensorboard": bool(training["tensorboard"])},
        )
        to_learner, to_collector = ctx.Queue(), ctx.Queue()
        # Process.start() drops its args: keep the queues alive until the children have unpickled them.
        queues.extend([to_learner, to_collector])
        learner = ctx.Process(target=learner_main, name=f"unilab-{spec.name('learner')}",
                              args=(spec, to_learner, to_collector, to_launcher, stop_event, go_event))
        collector = ctx.Process(target=collector_main, name=f"unilab-{spec.name('collector')}",
                                args=(spec, to_collector, to_learner, to_launcher, stop_event))
        procs[spec.name("learner")], procs[spec.name("collector")] = learner, collector
        ranks.append((spec, env, evidence, device))

    state = _State()
    started = time.monotonic()
    previous = _install_signal_handlers(state)
    try:
        for spec, env, evidence, device in ranks:
            for role in ("learner", "collector"):
                # fixed before the child's interpreter starts: before any CUDA init
                with environ({**env, **prepared.role_mps_env.get(role, {})}):
                    procs[spec.name(role)].start()
            mode = f" (MPS, {evidence.gpu_uuid})" if evidence.configured == "mps" else ""
            print(f"unilab: rank {spec.rank}: learner pid {procs[spec.name('learner')].pid}, collector pid "
                  f"{procs[spec.name('collector')].pid} on {device}{mode} -> {prepared.run_dir}", file=sys.stderr)
        _supervise(prepared, ranks, procs, to_launcher, stop_event, go_event, state)
    finally:
        _restore_signal_handlers(previous)
        _stop_all(procs)
    summary = RunSummary(
        status=state.status or "failed",
        cause=state.cause or (f"{state.interrupted_by} received" if state.interrupted_by else None),
        failed_role=state.failed_role,
        traceback=state.traceback,
        iterations=state.learner_summary.get("iterations"),
        env_steps=state.learner_summary.get("env_steps"),
        wall_s=round(time.monotonic() - started, 3),
        exit_codes={name: p.exitcode for name, p in procs.items()},
        final_metrics=state.learner_summary.get("final_metrics") or {},
        data_parallel=state.learner_summary.get("data_parallel"),
        notes=state.notes,
    )
    if summary.status == "completed" and not training.get("no_play", True):
        summary.play = _play(ctx, prepared, ranks[0], float(training["startup_timeout_s"]))
    summary.write(prepared.run_dir)
    print(f"unilab: run {summary.status}{': ' + summary.cause if summary.cause else ''} -> {prepared.run_dir}",
          file=sys.stderr)
    if state.failed_role == "launcher" and state.cause and state.cause.startswith(Prerequisite.CLIENTS_ATTACHED.value):
        return EXIT_USAGE
    return {"completed": EXIT_COMPLETED, "interrupted": EXIT_INTERRUPTED}.get(summary.status, EXIT_FAILED)


def _play(ctx, prepared, rank0, timeout_s: float) -> dict:
    """Play the trained policy in a fresh process on rank 0's device and environment (MPS included)."""
    from unilab.runtime.play import describe, play_main

    spec, env, _evidence, _device = rank0
    out = ctx.Queue()
    proc = ctx.Process(target=play_main, name="unilab-play", args=(str(prepared.run_dir), prepared.config,
                                                                 spec.device, out))
    with environ(env):
        proc.start()
    try:
        kind, payload = out.get(timeout=timeout_s)
    except queue.Empty:
        kind, payload = "error", f"play did not finish within {timeout_s:g} s"
    proc.join(timeout=STOP_GRACE_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if kind == "ok":
        print(f"unilab: {describe(payload)}", file=sys.stderr)
        return payload
    print(f"unilab: play failed:\n{payload}", file=sys.stderr)
    return {"error": payload}


def _supervise(prepared, ranks, procs, to_launcher, stop_event, go_event, state: _State) -> None:
    spec0 = ranks[0][0]
    startup_deadline = time.monotonic() + spec0.startup_timeout_s
    while True:
        if state.interrupted_by and not stop_event.is_set():
            _fail(state, "interrupted", f"{state.interrupted_by} received", None, None, stop_event)
        try:
            msg = to_launcher.get(timeout=0.2)
        except queue.Empty:
            msg = None
        if msg is not None:
            _handle(msg, prepared, ranks, state, stop_event, go_event, spec0)
        alive = {name: p.is_alive() for name, p in procs.items()}
        if not any(alive.values()):
            _drain(to_launcher, state, spec0)
            for name, p in procs.items():
                if p.exitcode in (0, None):
                    continue
                if name in state.finished:  # its work and summary were in; only its teardown hung
                    state.notes.append(f"the {name} had reported its summary but did not exit; it was stopped "
                                       f"(exit code {p.exitcode})")
                elif state.status != "failed":
                    _fail(state, "failed", f"the {name} exited with code {p.exitcode}", name, None, stop_event)
            if state.status is None:
                state.status, state.cause = "failed", "the processes ended without a summary"
            return
        dead = [name for name, is_alive in alive.items() if not is_alive]
        if dead and state.stop_deadline is None:
            crashed = [n for n in dead if procs[n].exitcode not in (0, None) and n not in state.finished]
            if crashed and state.status is None:
                _fail(state, "failed", f"the {crashed[0]} exited with code {procs[crashed[0]].exitcode}",
                      crashed[0], None, stop_event)
            elif not crashed and all(not alive[n] for n in procs if n.startswith("learner")):
                # every learner finished: the collectors were told to stop; give them the grace period
                state.stop_deadline = time.monotonic() + STOP_GRACE_S
            elif crashed or any(n.startswith("collector") for n in dead):
                stop_event.set()
                state.stop_deadline = time.monotonic() + STOP_GRACE_S
        if not state.verified and time.monotonic() > startup_deadline:
            _fail(state, "failed", f"start-up took longer than {spec0.startup_timeout_s:g} s", "launcher", None,
                  stop_event)
        if state.stop_deadline is not None and time.monotonic() > state.stop_deadline:
            # First SIGTERM (the children save and stop), then SIGKILL for one stuck in native code.
            for p in procs.values():
                if p.is_alive():
                    p.kill() if state.terminated else p.terminate()
            state.terminated = True
            state.stop_deadline = time.monotonic() + STOP_GRACE_S


def _handle(msg, prepared, ranks, state: _State, stop_event, go_event, spec0) -> None:
    kind, name = msg[0], msg[1]
    if kind == "ready":
        state.ready[name] = msg[2:]
        if len(state.ready) == 2 * len(ranks) and not state.verified:
            error = _verify(prepared, ranks, state)
            if error is not None:
                print(error.render(), file=sys.stderr)
                _fail(state, "failed", f"{error.prerequisite.value}: {error.message}", "launcher", None, stop_event)
                return
            state.verified = True
            go_event.set()
    elif kind == "error":
        _fail(state, "failed", f"the {name} raised an exception", name, msg[2], stop_event)
    elif kind == "finished":
        _record_finished(state, name, msg[2], spec0)


def _record_finished(state: _State, name: str, summary, spec0) -> None:
    """A child delivered its summary; rank 0's learner summary sets the run's status."""
    state.finished.add(name)
    if name == spec0.name("learner"):
        state.learner_summary = summary or {}
        if state.status is None:
            state.status = state.learner_summary.get("status")


def _fail(state: _State, status: str, cause: str, role, tb, stop_event) -> None:
    # The first cause wins; a status reported by the learner itself ("interrupted") gets its cause here.
    if state.status in (None, "completed") or state.cause is None:
        state.status, state.cause, state.failed_role = status, cause, role
    if tb and not state.traceback:
        state.traceback = tb
    stop_event.set()
    if state.stop_deadline is None:
        state.stop_deadline = time.monotonic() + STOP_GRACE_S


def _drain(to_launcher, state: _State, spec0) -> None:
    while True:
        try:
            msg = to_launcher.get_nowait()
        except (queue.Empty, OSError, ValueError):
            return
        if msg[0] == "error" and state.traceback is None:
            state.traceback = msg[2]
            state.failed_role = state.failed_role or msg[1]
        elif msg[0] == "finished":
            _record_finished(state, msg[1], msg[2], spec0)


def _verify(prepared: PreparedRun, ranks, state: _State) -> CudaProcessSharingError | None:
    """Every child has a CUDA context: check the GPU it sees and, under MPS, that it is a client."""
    rank_records = []
    evidences = []
    for spec, _env, evidence, device in ranks:
        learner, collector = spec.name("learner"), spec.name("collector")
        (l_pid, _, l_uuid), (c_pid, _, c_uuid) = state.ready[learner], state.ready[collector]
        record = RankEvidence(rank=spec.rank, device=device, gpu_uuid=evidence.gpu_uuid, learner_pid=l_pid,
                              collector_pid=c_pid, learner_gpu_uuid=l_uuid, collector_gpu_uuid=c_uuid)
        if evidence.configured == "mps":
            error, evidence = _verify_mps(prepared, evidence, {learner: (l_pid, l_uuid), collector: (c_pid, c_uuid)})
            if error is not None:
                return error
            record.cuda_process_sharing = evidence
        elif evidence.daemon_reachable:
            evidence = _ambient_mps(evidence, {learner: l_pid, collector: c_pid},
                                    blocked=bool(prepared.config["training"].get("block_ambient_mps")))
            record.cuda_process_sharing = evidence
        rank_records.append(record)
        evidences.append(evidence)
    manifest = prepared.manifest.model_copy(update={"cuda_process_sharing": evidences[0], "ranks": rank_records})
    manifest.write(prepared.run_dir)
    prepared.manifest = manifest
    return None


def _verify_mps(prepared, evidence, children: dict):
    for name, (_pid, uuid) in children.items():
        if uuid is not None and uuid != evidence.gpu_uuid:
            return CudaProcessSharingError(
                Prerequisite.SAME_GPU, f"the {name} sees a different GPU than the probe resolved",
                found=f"{name} {uuid}, probe {evidence.gpu_uuid}", fix=["nvidia-smi -L"], before_start=False), None
    pids = {pid: name for name, (pid, _uuid) in children.items()}
    report = verify_mps_clients(evidence, list(pids),
                                timeout_s=float(prepared.config["training"]["mps_attach_timeout_s"]))
    if not report.all_attached:
        names = ", ".join(f"the {pids[pid]} (pid {pid})" for pid in report.missing())
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
        ), None
    learner_pid = next(pid for pid, name in pids.items() if name.startswith("learner"))
    servers = report.server_pids
    server = next((s for s, cs in report.clients_by_server.items() if learner_pid in cs), None)
    notes = [*evidence.notes, *(f"{key}={value} for the {role}" for role, variables in prepared.role_mps_env.items()
                                for key, value in variables.items())]
    return None, evidence.model_copy(update={
        "effective": "mps", "clients_verified": True, "notes": notes,
        "client_pids": {name.split("[")[0]: pid for pid, name in pids.items()},
        "server_pids": servers, "server_pid": server,
    })


def _ambient_mps(evidence, children: dict, blocked: bool = False):
    """null mode with a reachable daemon: record whether the children ended up as MPS clients anyway."""
    report = verify_mps_clients(evidence, list(children.values()), timeout_s=2.0)
    if not report.all_attached:
        if blocked:
            return evidence.model_copy(update={"notes": [
                *evidence.notes, "training.block_ambient_mps: the children were pointed at an empty pipe "
                "directory; the reachable daemon lists neither of them as a client"]})
        return evidence
    return evidence.model_copy(update={
        "effective": "mps", "clients_verified": True,
        "client_pids": {name.split("[")[0]: pid for name, pid in children.items()},
        "server_pids": report.server_pids,
        "notes": [*evidence.notes, "not requested: the processes reached an ambient MPS daemon "
                  "(CUDA_MPS_PIPE_DIRECTORY or the default pipe directory); unset it for a non-MPS baseline"],
    })


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs.values():
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs.values():
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
