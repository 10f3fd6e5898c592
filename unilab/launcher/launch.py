"""Starts each rank's learner and collector, verifies MPS attachment, supervises, cleans up.

The launching process never imports torch or Warp: the children are fresh interpreters
(spawn), and their environment (MPS variables included) is fixed before they start.
It starts every rank of `training.run.devices` on this host, or, under torchrun or srun, the one rank the
cluster launcher made of it; either way each rank is described by a DistributedContext (unilab.world).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from unilab.exit_codes import EXIT_COMPLETED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from unilab.kernel_cache import kernel_cache_env
from unilab.mps import CudaProcessSharingError, Prerequisite
from unilab.mps.child_env import child_device_and_env, environ
from unilab.mps.record import CudaProcessSharingEvidence
from unilab.mps.verify import Child, verify_rank
from unilab.rundir.layout import NO_MPS_PIPE_DIR, SUMMARY_FILE
from unilab.rundir.manifest import RankEvidence
from unilab.rundir.summary import RunSummary, mean_env_steps_per_s
from unilab.runtime.child_log import stderr_log_name
from unilab.runtime.protocol import Ready
from unilab.runtime.spec import RoleSpec
from unilab.world import DistributedContext, single_host

from .console import NO_NEXT_STEPS_ENV, Console, after_a_cpu_run, console_may_hang_up
from .prepare import PreparedRun
from .supervisor import STOP_GRACE_S, Supervisor


@dataclass
class _Rank:
    spec: RoleSpec
    env: dict[str, str]  # the children's environment overrides (MPS variables, kernel caches)
    evidence: CudaProcessSharingEvidence
    device: str  # as the launcher names it
    procs: dict[str, mp.Process]  # role -> process
    queues: tuple  # Process.start() drops its args: kept alive until the children have unpickled them


def launch(prepared: PreparedRun, cfg: DictConfig) -> int:
    with console_may_hang_up():
        return _launch(prepared, cfg)


def _launch(prepared: PreparedRun, cfg: DictConfig) -> int:
    training = prepared.config.training
    ctx = mp.get_context("spawn")
    to_launcher = ctx.Queue()
    stop_event, go_event = ctx.Event(), ctx.Event()
    ranks = _create_ranks(prepared, ctx, to_launcher, stop_event, go_event)
    procs = {r.spec.name(role): p for r in ranks for role, p in r.procs.items()}
    console = Console(world_size=ranks[0].spec.world_size)
    under_mps = ranks[0].evidence.configured == "mps"
    supervisor = Supervisor([r.spec for r in ranks], procs, to_launcher, stop_event, go_event,
                            verify=lambda ready: _verify(prepared, ranks, ready, cancelled=interrupted, console=console),
                            mps_server_gone=(lambda: mps_server_gone(prepared)) if under_mps else None,
                            mps_log_dir=mps_log_dir(ranks[0].evidence) if under_mps else None, console=console)

    def interrupted() -> bool:
        return supervisor.interrupted_by is not None

    started = time.monotonic()
    play_interrupted = False
    with supervisor.signals_caught():  # held through play too: a signal there stops play, not the launcher
        try:
            _start(prepared, ranks)
            supervisor.run()
        finally:
            supervisor.stop_all()
        summary = _summary(supervisor, started, prepared.own_dir)
        summary.notes[:0] = prepared.notes  # the resume's (a corrupt latest.pt passed over), a clip that cannot fit
        summary.notes += _gather_ranks(prepared)
        play = (summary.status == "completed" and not training.outputs.no_play and not interrupted()
                and ranks[0].spec.rank == 0)  # one play per run: rank 0's
        if play:
            summary.play = {"status": "started"}  # replaced by the report; stays if the launcher is killed
        written = _write_summary(summary, prepared.own_dir)  # before play: the training is on record
        print(summary.console(prepared.own_dir, written), file=sys.stderr)
        _tell_torchrun(summary, prepared.own_dir)
        if play:
            console.print("playing the trained policy in a fresh process (it builds its worlds first)")
            summary.play = _play(ctx, prepared, ranks[0], training.loop.startup_timeout_s,
                                 lambda: supervisor.interrupted_by)
            play_interrupted = "interrupted" in summary.play
            _write_summary(summary, prepared.own_dir)
        if training.outputs.video_interval:  # the clips whose render the collector stopped at its exit
            from unilab.viz.clip import render_leftovers

            render_leftovers(prepared.run_dir, interrupted, say=console.print)
        if (summary.status == "completed" and training.run.device == "cpu" and ranks[0].spec.rank == 0
                and not interrupted() and not os.environ.get(NO_NEXT_STEPS_ENV)):
            print("unilab: " + "\n".join(_after_a_cpu_run(prepared)), file=sys.stderr)  # commands as they are typed
    cause = supervisor.cause
    if supervisor.failed_role == "launcher" and cause and cause.startswith(Prerequisite.CLIENTS_ATTACHED.value):
        return EXIT_USAGE
    if play_interrupted:
        return EXIT_INTERRUPTED
    return {"completed": EXIT_COMPLETED, "interrupted": EXIT_INTERRUPTED}.get(summary.status, EXIT_FAILED)


def _after_a_cpu_run(prepared: PreparedRun) -> list[str]:
    config = prepared.config
    run_dir = Path(prepared.run_dir)
    try:  # the shortest path that works from here
        run_dir = run_dir.resolve().relative_to(Path.cwd())
    except (ValueError, OSError):  # outside the working directory, or that directory is gone
        pass
    return after_a_cpu_run(str(run_dir), config.algo.name, config.task.name, config.algo.max_iterations,
                           config.task.num_envs)


def _create_ranks(prepared: PreparedRun, ctx, to_launcher, stop_event, go_event) -> list[_Rank]:
    """Each rank's spec, environment and (not yet started) learner and collector processes."""
    from unilab.runtime.collector import collector_main
    from unilab.runtime.learner import learner_main

    training = prepared.config.training
    devices = prepared.rank_devices or [training.run.device]
    evidences = prepared.rank_evidence or [prepared.manifest.cuda_process_sharing]
    if prepared.world:  # torchrun or srun: this launcher starts its own rank only
        worlds = [prepared.world]
    else:
        worlds = single_host(len(devices), _free_port() if len(devices) > 1 else None)
    no_mps_dir = None
    if training.mps.block_ambient_mps and evidences[0].configured != "mps":
        no_mps_dir = prepared.run_dir / NO_MPS_PIPE_DIR  # empty: no daemon answers there
        no_mps_dir.mkdir(exist_ok=True)
    ranks = []
    for world, device, evidence in zip(worlds, devices, evidences, strict=True):
        child_device, env = child_device_and_env(evidence, device, str(no_mps_dir) if no_mps_dir else None)
        env = {**kernel_cache_env(), **env}  # compiled kernels kept in one place between runs
        spec = _role_spec(prepared, child_device, world)
        to_learner, to_collector = ctx.Queue(), ctx.Queue()
        procs = {
            "learner": ctx.Process(target=learner_main, name=f"unilab-{spec.name('learner')}",
                                   args=(spec, to_learner, to_collector, to_launcher, stop_event, go_event)),
            "collector": ctx.Process(target=collector_main, name=f"unilab-{spec.name('collector')}",
                                     args=(spec, to_collector, to_learner, to_launcher, stop_event)),
        }
        ranks.append(_Rank(spec, env, evidence, device, procs, (to_learner, to_collector)))
    return ranks


def _role_spec(prepared: PreparedRun, device: str, world: DistributedContext) -> RoleSpec:
    return RoleSpec(run_dir=str(prepared.run_dir), config=prepared.config, device=device, world=world,
                    resume=prepared.resume)


def _start(prepared: PreparedRun, ranks: list[_Rank]) -> None:
    for r in ranks:
        for role, proc in r.procs.items():
            # fixed before the child's interpreter starts: before any CUDA init
            with environ({**r.env, **prepared.role_mps_env.get(role, {})}):
                proc.start()
        mode = f" (MPS, {r.evidence.gpu_uuid})" if r.evidence.configured == "mps" else ""
        print(f"unilab: rank {r.spec.rank}: learner pid {r.procs['learner'].pid}, collector pid "
              f"{r.procs['collector'].pid} on {r.device}{mode} -> {prepared.run_dir}", file=sys.stderr)


def _summary(supervisor: Supervisor, started: float, own_dir: Path) -> RunSummary:
    """This launcher's summary, for its directory (the run directory, or a torchrun rank's rank_<r>/)."""
    s = supervisor
    cause = s.cause or (f"{s.interrupted_by} received" if s.interrupted_by else None)
    stop_errors = s.learner_summary.get("stop_errors") or []  # the stop-time checkpoint or metric rows failed
    return RunSummary(
        status="failed" if stop_errors else s.status or "failed",
        cause="; ".join([*([cause] if cause else []), *stop_errors]) or None,
        failed_role=s.failed_role or ("learner" if stop_errors else None),
        traceback=s.traceback,
        iterations=s.learner_summary.get("iterations"),
        env_steps=s.learner_summary.get("env_steps"),
        mean_env_steps_per_s=mean_env_steps_per_s(own_dir),
        wall_s=round(time.monotonic() - started, 3),
        exit_codes={name: p.exitcode for name, p in s.procs.items()},
        fix=s.fix,
        stderr_logs={name: _relative_to(own_dir, s.specs[0].run_dir, stderr_log_name(name)) for name in s.procs},
        final_metrics=s.learner_summary.get("final_metrics") or {},
        data_parallel=s.learner_summary.get("data_parallel"),
        notes=s.notes,
    )


def _relative_to(own_dir: Path, run_dir: str, path: str) -> str:
    """A path under the run directory, relative to `own_dir` (a torchrun rank's summary sits in rank_<r>/)."""
    return os.path.relpath(Path(run_dir) / path, own_dir)


def _gather_ranks(prepared: PreparedRun) -> list[str]:
    """Rank 0 of a torchrun or srun run: every rank's entry into the top manifest (a shared filesystem); a note
    naming the ranks it could not find there."""
    world = prepared.world
    if world is None or world.rank != 0:
        return []
    from unilab.rundir.ranks import gather_rank_entries

    try:
        missing = [r for r in gather_rank_entries(prepared.run_dir) if r != 0]  # rank 0's: never verified
    except (OSError, ValueError) as exc:
        return [f"the ranks' manifest entries were not gathered: {exc}"]
    if not missing:
        return []
    return [f"ranks {', '.join(map(str, missing))} are not in this run directory (no shared filesystem?): gather "
            f"the nodes' copies with unilab merge-ranks {prepared.run_dir} <the other nodes' copies>"]


def _tell_torchrun(summary: RunSummary, own_dir: Path) -> None:
    """Under torchrun, a failed rank's cause in its error file: torchrun's closing report ("Root Cause") then
    names it instead of pointing at tracebacks this process does not have."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not error_file or summary.status != "failed":
        return
    text = f"unilab: {summary.cause} (see {own_dir / SUMMARY_FILE})"
    # the layout of torch.distributed.elastic's own error files (its report shows `py_callstack`)
    record = {"message": {"message": text, "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))}}}
    try:
        Path(error_file).write_text(json.dumps(record))
    except OSError:
        pass  # the report then says what torchrun says without it


def _write_summary(summary: RunSummary, run_dir) -> bool:
    try:
        summary.write(run_dir)
        return True
    except OSError as exc:  # the run directory was removed or made read-only during the run
        print(f"unilab: {SUMMARY_FILE} not written: {exc}", file=sys.stderr)
        return False


def _play(ctx, prepared, rank0: _Rank, timeout_s: float, interrupted_by) -> dict:
    """Play the trained policy in a fresh process on rank 0's device and environment (MPS included).

    A supervised child like the learner and collector: it dies with the launcher (PDEATHSIG), its own
    death is noticed at once, the wait is bounded by `timeout_s`, and SIGINT/SIGTERM/SIGHUP to the launcher
    (`interrupted_by()` names it) stop it. Returns the report, {"error": ...} or {"interrupted": ...}."""
    from unilab.runtime.play import describe, play_main
    from unilab.runtime.protocol import PLAY_INBOX, Played, ProtocolError

    def received(msg) -> tuple[str, Any]:
        if not isinstance(msg, PLAY_INBOX):
            raise ProtocolError(f"the launcher got {type(msg).__name__} from the play process")
        return ("ok", msg.report) if isinstance(msg, Played) else ("error", msg.traceback)

    out = ctx.Queue()
    proc = ctx.Process(target=play_main, name="unilab-play", args=(str(prepared.run_dir), prepared.config,
                                                                 rank0.spec.device, out))
    with environ(rank0.env):
        proc.start()
    print(f"unilab: play pid {proc.pid} on {rank0.device}", file=sys.stderr)
    deadline = time.monotonic() + timeout_s
    kind = payload = None
    while kind is None:
        try:
            kind, payload = received(out.get(timeout=0.2))
        except queue.Empty:
            if interrupted_by():
                kind, payload = "interrupted", f"{interrupted_by()} received"
            elif not proc.is_alive():
                try:  # it may have reported just before it ended
                    kind, payload = received(out.get(timeout=0.5))
                except queue.Empty:
                    kind, payload = "error", f"the play process exited with code {proc.exitcode} without a report"
            elif time.monotonic() > deadline:
                kind, payload = "error", f"play did not finish within {timeout_s:g} s"
    _end_play(proc, at_once=kind != "ok")
    if kind == "ok":
        print(f"unilab: {describe(payload)}", file=sys.stderr)
        return payload
    if kind == "interrupted":
        print(f"unilab: play interrupted ({payload}); the training's summary stands", file=sys.stderr)
        return {"interrupted": payload}
    print(f"unilab: play failed:\n{payload}", file=sys.stderr)
    return {"error": payload}


def _end_play(proc, at_once: bool) -> None:
    """Bounded: a play process that reported gets the grace period to exit; one that did not (or is
    interrupted) gets SIGTERM (it ends at once), then SIGKILL."""
    if not at_once:
        proc.join(timeout=STOP_GRACE_S)
    for stop in (proc.terminate, proc.kill):
        if not proc.is_alive():
            break
        stop()
        proc.join(timeout=5)


def mps_server_gone(prepared: PreparedRun) -> bool:
    """The MPS servers the children were verified against: has any exited? False before verification."""
    ranks = prepared.manifest.ranks or []
    pids = [r.cuda_process_sharing.server_pid for r in ranks
            if r.cuda_process_sharing is not None and r.cuda_process_sharing.server_pid]
    return any(not os.path.exists(f"/proc/{pid}") for pid in pids)


def mps_log_dir(evidence: CudaProcessSharingEvidence) -> str | None:
    """Where the daemon writes server.log: CUDA_MPS_LOG_DIRECTORY, else `unilab mps start`'s place beside the
    pipe directory."""
    if os.environ.get("CUDA_MPS_LOG_DIRECTORY"):
        return os.environ["CUDA_MPS_LOG_DIRECTORY"]
    if evidence.pipe_directory:
        return os.path.join(os.path.dirname(evidence.pipe_directory.rstrip("/")), "log")
    return None


def _verify(prepared: PreparedRun, ranks: list[_Rank], ready: dict[str, Ready],
            cancelled=None, console: Console | None = None) -> CudaProcessSharingError | None:
    """Every child has a CUDA context: unilab.mps.verify checks each rank's pair (the GPU it sees and, under MPS,
    that both are clients); this records what it found in the manifest. `cancelled()` true (SIGINT/SIGTERM/SIGHUP)
    ends the daemon queries at once; the caller then stops the run."""
    training = prepared.config.training
    rank_records = []
    evidences = []
    for r in ranks:
        spec = r.spec
        lr, cr = ready[spec.name("learner")], ready[spec.name("collector")]
        outcome = verify_rank(r.evidence, Child(spec.name("learner"), lr.pid, lr.gpu_uuid),
                              Child(spec.name("collector"), cr.pid, cr.gpu_uuid),
                              attach_timeout_s=training.mps.mps_attach_timeout_s,
                              role_env=prepared.role_mps_env, block_ambient=training.mps.block_ambient_mps,
                              cancelled=cancelled)
        if outcome.error is not None or outcome.cancelled:
            return outcome.error  # None when cancelled: nothing was verified, and the caller stops the run
        record = _rank_record(spec, r.device, r.evidence, lr, cr)
        record.cuda_process_sharing = outcome.recorded
        if outcome.announcement and console is not None:
            console.print(outcome.announcement, spec.rank)
        rank_records.append(record)
        evidences.append(outcome.evidence)
    manifest = prepared.manifest.model_copy(update={"cuda_process_sharing": evidences[0], "ranks": rank_records})
    manifest.write(prepared.own_dir)
    prepared.manifest = manifest
    return None


def _rank_record(spec: RoleSpec, device: str, evidence, learner: Ready, collector: Ready) -> RankEvidence:
    """The manifest's entry of one rank: where it ran (host, node, local rank), its processes, its GPU."""
    world = spec.world
    return RankEvidence(rank=spec.rank, hostname=world.hostname or socket.gethostname(), node_rank=world.node_rank,
                        local_rank=world.local_rank, device=device, gpu_uuid=evidence.gpu_uuid,
                        launcher_pid=os.getpid(), learner_pid=learner.pid, collector_pid=collector.pid,
                        learner_gpu_uuid=learner.gpu_uuid, collector_gpu_uuid=collector.gpu_uuid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
