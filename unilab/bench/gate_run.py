"""`unilab bench gate`: the checks before anything runs, the MPS daemon, the jobs one at a time, the verdict.

Everything that can refuse the gate (its shape, the cases, the overrides, matplotlib, a daemon for the MPS
arm) is checked before the first job, and before anything is created (exit 2). The jobs are `train -m`
subprocesses (unilab.jobs), each in its own session: Ctrl-C (or SIGTERM) reaches the gate only, which passes one
SIGINT to the job in progress (its process group), waits for it to write its summary, stops a daemon it started,
and exits 130.
"""

from __future__ import annotations

import io
import json
import platform
import re
import shlex
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from unilab.atomic import write_json_atomic
from unilab.exit_codes import EXIT_COMPLETED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from unilab.jobs.runner import JobProcess, interrupts, job_status

from .gate import (GateInputError, Job, Plan, Shape, check_overrides, judge, plan_jobs, plot_gate, render, select_cases,
                   unavailable)

INTERRUPT_GRACE_S = 120.0  # a job told to stop may take this long to end its run and write its summary
DAEMON_TIMEOUT_S = 60.0  # a daemon whose last clients are still exiting answers `quit` late
_DEVICE = re.compile(r"^cuda(:\d+)?$")
_HYDRA_SPECIAL = re.compile(r"[\s,=()\[\]{}'\"\\]")
ME = "unilab bench gate"


@dataclass
class Daemon:
    """The daemon the MPS arm runs under: what its jobs' environment gets, and whether the gate started it."""

    env: dict[str, str] = field(default_factory=dict)
    pipe_dir: str | None = None
    started: bool = False
    gpu_uuid: str | None = None
    gpu_name: str | None = None


def _say(text: str) -> None:
    print(f"{ME}: {text}", file=sys.stderr, flush=True)


# ---- the daemon ---------------------------------------------------------------------------------------


def _gpu_uuid(host, device: str) -> str:
    """The physical GPU that `device` names in this environment (NVML, no CUDA context)."""
    from unilab.mps.nvml import MigEntry, NvmlUnavailable, visible_devices

    index = int(device.partition(":")[2] or 0)
    try:
        gpus = host.nvml.gpus()
    except NvmlUnavailable as exc:
        raise GateInputError(f"NVML cannot be read, so the GPU of {device} is unknown: {exc}") from exc
    visible = visible_devices(host.env.get("CUDA_VISIBLE_DEVICES"), gpus)
    if index >= len(visible) or isinstance(visible[index], MigEntry):
        raise GateInputError(f"{device} names no visible GPU (CUDA_VISIBLE_DEVICES="
                             f"{host.env.get('CUDA_VISIBLE_DEVICES')!r}; NVML sees {len(gpus)})")
    return visible[index].uuid


def _recorded(host, uuid: str):
    """The live daemon `unilab mps start --gpu` recorded for this GPU, or None."""
    from unilab.mps.layout import layout_for, read_state

    state = read_state(layout_for(host.root(), uuid).state_file)
    return state if state is not None and host.start_time(state.daemon_pid) == state.daemon_start_time else None


def _start(host, uuid: str):
    from unilab.mps.daemon import StartOptions, start

    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):  # its exports: the jobs get them
        start(host, StartOptions(gpu=uuid))
    return _recorded(host, uuid)


def prepare_daemon(host, device: str, start: bool) -> Daemon:
    """A daemon for `device` that `train`'s probe accepts: one the gate starts (--start-daemon), else the one of
    $CUDA_MPS_PIPE_DIRECTORY, else the one `unilab mps start` recorded for the GPU. GateInputError: none."""
    from unilab.mps import MpsToolError

    daemon = Daemon()
    try:
        if start:
            state = _start(host, _gpu_uuid(host, device))
            daemon.started = state is not None
        elif not host.env.get("CUDA_MPS_PIPE_DIRECTORY"):
            try:
                state = _recorded(host, _gpu_uuid(host, device))
            except GateInputError:
                state = None  # the probe names what is wrong with the device
        else:
            state = None
    except MpsToolError as exc:
        raise GateInputError(f"{exc}\n  (without --start-daemon the gate uses a daemon that is running)") from exc
    if state is not None:
        daemon.env = {"CUDA_MPS_PIPE_DIRECTORY": state.pipe_dir, "CUDA_MPS_LOG_DIRECTORY": state.log_dir}
        daemon.pipe_dir = state.pipe_dir
    try:
        _probe(host, device, daemon, start)
    except BaseException:
        stop_daemon(host, daemon)
        raise
    return daemon


def _probe(host, device: str, daemon: Daemon, started: bool) -> None:
    """`train`'s probe for the MPS arm, in the environment its jobs get."""
    from unilab.mps import CudaProcessSharingError, probe_cuda_process_sharing

    try:
        evidence = probe_cuda_process_sharing("mps", device, device, backend="mjwarp", host=host.with_env(daemon.env))
    except CudaProcessSharingError as exc:
        hint = "" if started else ("\n\nor let the gate start a daemon for this GPU and stop it at its end:\n"
                                   f"  {ME} --start-daemon ...")
        raise GateInputError(f"the MPS arm cannot run:\n{exc.render()}{hint}") from exc
    daemon.pipe_dir, daemon.gpu_uuid, daemon.gpu_name = evidence.pipe_directory, evidence.gpu_uuid, evidence.gpu_name


def stop_daemon(host, daemon: Daemon) -> None:
    """Stops the daemon the gate started (never another one)."""
    if not daemon.started:
        return
    from unilab.mps import MpsToolError
    from unilab.mps.daemon import stop

    daemon.started = False
    try:
        stop(host, None, daemon.pipe_dir, DAEMON_TIMEOUT_S)
    except MpsToolError as exc:
        _say(f"could not stop the daemon it started: {exc}")


# ---- the jobs ------------------------------------------------------------------------------------------


def run_job(job: Job, env: dict[str, str]) -> None:
    """One `train -m` job in its own session (unilab.jobs); on KeyboardInterrupt it is stopped (SIGINT, then a
    grace period, then killed) before the interrupt goes on."""
    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    process = JobProcess(job.argv, env=env, log=Path(job.log), grace_s=INTERRUPT_GRACE_S)
    try:
        with process:
            process.wait()
    finally:
        job.code, job.duration_s = process.returncode, time.monotonic() - t0
        job.status = job_status(job.run_dir, job.code)


def check_commands(plan: Plan, env: dict[str, str]) -> None:
    """`train -m ... --dry-run` of each case's default-arm job (the MPS arm's differs in the mode only, and its
    daemon may not run yet: `prepare_daemon` probes it): a key or a value that `train` refuses stops the gate
    here, not in every one of its jobs."""
    for case in plan.cases:
        job = next(j for j in plan.jobs if j.case == case.name and j.arm == "default")
        try:
            done = subprocess.run([*job.argv, "--dry-run"], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GateInputError(f"`{job.command()} --dry-run` did not run: {exc}") from exc
        if done.returncode != 0:
            raise GateInputError(f"train refuses the jobs of {case.name}:\n{(done.stderr or done.stdout).strip()}\n"
                                 f"  (checked with: {job.command()} --dry-run)")


def _environment(daemon: Daemon, host) -> dict[str, Any]:
    """The host, the source and the versions (as a run's manifest records them), the GPU and the daemon."""
    from unilab import __version__
    from unilab.rundir.provenance import source_evidence, version_evidence

    return {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "unilab": __version__, "source": source_evidence().model_dump(),
            "versions": version_evidence(host.nvml).model_dump(),
            "gpu": {"uuid": daemon.gpu_uuid, "name": daemon.gpu_name},
            "daemon": {"pipe_dir": daemon.pipe_dir, "started_by_gate": daemon.started}}


def _run_all(plan: Plan, daemon: Daemon, base_env: dict[str, str], record) -> bool:
    """Every job, one at a time; False when interrupted (the job in progress stopped, the rest not run)."""
    total = len(plan.jobs)
    with interrupts():  # SIGTERM stops the gate as Ctrl-C does
        for i, job in enumerate(plan.jobs, 1):
            env = {**base_env, **(daemon.env if job.arm == "mps" else {})}
            try:
                _say(f"[{i}/{total}] {job.label}: started (log {job.log})")
                run_job(job, env)
            except KeyboardInterrupt:
                ran = f"{job.status} after {job.duration_s:.0f} s" if job.duration_s is not None else "not started"
                _say(f"[{i}/{total}] {job.label}: {ran}; interrupted, the jobs after it do not run")
                return False
            finally:
                record()
            _say(f"[{i}/{total}] {job.label}: {job.status} in {job.duration_s:.0f} s (exit {job.code})")
        return True


# ---- the command ---------------------------------------------------------------------------------------


def _dry_run(plan: Plan, missing: list[str]) -> str:
    shape = plan.shape
    lines = [f"{ME} --dry-run: {len(plan.jobs)} jobs, one at a time, into {plan.out} (nothing was created)",
             f"shape: {shape.iterations} iterations per run, the last {shape.last} reported after the first "
             f"{shape.skip_first}, {shape.repeats} repeat{'s' if shape.repeats != 1 else ''} per arm"]
    if shape.shortfalls():
        lines.append("SHORT: " + "; ".join(shape.shortfalls()))
    lines += [f"  {c.name}: threshold +{c.threshold_pct:g} %, {c.envs} envs" for c in plan.cases]
    for i, job in enumerate(plan.jobs, 1):
        lines += [f"#{i} {job.label}", f"  {job.command()}"]
    lines.append(f"the mps jobs run under the MPS daemon of {plan.device}'s GPU: --start-daemon starts one and "
                 "stops it at the end, else one must be running (checked before the first job)")
    lines += [f"note: {m} is not available in this build: a run refuses it (--cases leaves it out)" for m in missing]
    return "\n".join(lines)


def gate_command(plan: Plan, args) -> str:
    """The command that runs this gate again (every default spelled out)."""
    words = ["unilab", "bench", "gate", "--cases", ",".join(c.name for c in plan.cases),
             "--iterations", str(plan.shape.iterations), "--skip-first", str(plan.shape.skip_first),
             "--last", str(plan.shape.last), "--repeats", str(plan.shape.repeats)]
    for case in plan.cases:
        words += ["--threshold", f"{case.name}={case.threshold_pct:g}", "--envs", f"{case.name}={case.envs}"]
    words += ["--device", plan.device, "--out", plan.out]
    words += [flag for flag, on in (("--start-daemon", args.start_daemon), ("--allow-short", args.allow_short),
                                    ("--no-plot", args.no_plot)) if on]
    return shlex.join(words + (["--", *plan.overrides] if plan.overrides else []))


def run_gate(args) -> int:
    from unilab.mps import cli as mps_cli

    from unilab.rundir.renamed import upgrade_overrides

    from .plot import PlotUnavailable, require_matplotlib

    try:
        shape = Shape(args.iterations, args.skip_first, args.last, args.repeats)
        shape.check(args.allow_short)
        cases = select_cases(args.cases, args.threshold, args.envs)
        args.overrides = upgrade_overrides(args.overrides)  # an old key spelled as the gate's own is refused too
        check_overrides(args.overrides)
        if not _DEVICE.match(args.device):
            raise GateInputError(f"--device {args.device}: the MPS arm needs a CUDA device, cuda or cuda:N")
        out = Path(args.out or Path("runs", "gate", datetime.now().strftime("%Y-%m-%d_%H-%M-%S")))
        plan = plan_jobs(cases, shape, args.device, out, args.overrides)
        missing = unavailable(cases)
        if args.dry_run:
            print(_dry_run(plan, missing))
            return EXIT_COMPLETED
        if missing:
            raise GateInputError(f"{'; '.join(missing)}: not available in this build (`unilab list`); "
                                 "--cases leaves a case out")
        if _HYDRA_SPECIAL.search(str(out)):
            raise GateInputError(f"--out {out}: it goes into a train override (training.run.log_dir), where spaces, "
                                 "quotes, brackets, ',' and '=' mean something else; choose a plainer path")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise GateInputError(f"--out {out}: exists and is not an empty folder (each gate gets its own)")
        if not args.no_plot:
            require_matplotlib(f"{ME} (gate.png; --no-plot goes without)")
        host = mps_cli.make_host()
        check_commands(plan, dict(host.env))
        daemon = prepare_daemon(host, args.device, args.start_daemon)
    except (GateInputError, PlotUnavailable) as exc:
        print(f"{ME}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        out.mkdir(parents=True, exist_ok=True)
        head = {"command": gate_command(plan, args), "environment": _environment(daemon, host)}

        def record(**more) -> None:
            write_json_atomic(out / "gate.json", {**head, **plan.as_dict(), "passed": None, **more})

        record()
        if daemon.started:
            _say(f"started an MPS daemon for {daemon.gpu_uuid} ({daemon.pipe_dir}); it stops at the end (should "
                 f"the gate be killed: unilab mps stop --pipe-dir {shlex.quote(daemon.pipe_dir)})")
        if not _run_all(plan, daemon, dict(host.env), record):
            record(interrupted=True)
            _say(f"interrupted: no verdict; the runs so far are in {out}")
            return EXIT_INTERRUPTED
    finally:
        stop_daemon(host, daemon)
    verdict = {**head, **judge(plan)}
    write_json_atomic(out / "gate.json", verdict)
    table = render(verdict)
    (out / "gate.md").write_text(table + "\n")
    print(json.dumps(verdict, indent=2) if args.json else table)
    png = None if args.no_plot else plot_gate(verdict, out / "gate.png")
    _say(f"wrote {out / 'gate.json'}, {out / 'gate.md'}" + (f", {png}" if png else ""))
    return EXIT_COMPLETED if verdict["passed"] else EXIT_FAILED
