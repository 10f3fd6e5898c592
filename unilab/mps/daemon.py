"""`unilab mps start` / `stop`: a control daemon in user-owned directories, recorded so that only it is stopped."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from unilab.exit_codes import EXIT_USAGE
from unilab.processes import end_child

from .control import (
    CONTROL_BINARY,
    DAEMON_PID_FILE,
    ControlBinaryMissing,
    DaemonNoAnswer,
    PipeDirectory,
    daemon_pid,
    is_socket,
)
from .errors import MpsToolError
from .host import NVIDIA_SMI, HostFacts, resolve_gpu, resolve_visible_gpus
from .layout import ALL_GPUS_DIR, Layout, MpsState, layout_for, prepare_dirs, read_state, select_state

START_LOG = "unilab-mps-start.log"  # output of `nvidia-cuda-mps-control -d` (never a pipe: the daemon may keep it)
POLL_S = 0.1
QUIT_ANSWER_S = 5.0  # how long one `quit` may go unanswered before stop only waits for the exit


@dataclass
class StartOptions:
    gpu: str | None = None
    all_gpus: bool = False  # one daemon for every visible GPU (one node's data-parallel ranks)
    pipe_dir: str | None = None
    log_dir: str | None = None
    foreground: bool = False
    exclusive: bool = False
    timeout_s: float = 10.0


_QUIT_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def start(host: HostFacts, opts: StartOptions) -> int:
    binary = host.find(CONTROL_BINARY)
    if binary is None:
        raise MpsToolError(f"unilab mps: '{CONTROL_BINARY}' is not on PATH (it ships with the NVIDIA driver utilities)",
                           code=EXIT_USAGE)
    if opts.exclusive:
        _check_can_set_compute_mode(host)
    gpus = resolve_visible_gpus(host) if opts.all_gpus else [resolve_gpu(host, opts.gpu)]
    if opts.exclusive and len(gpus) > 1:
        raise MpsToolError("unilab mps: --exclusive with --all-gpus: the compute mode is set per GPU; start one "
                           "daemon per GPU (--gpu N --exclusive), or leave the mode DEFAULT", code=EXIT_USAGE)
    gpu = gpus[0]
    # The daemon sees the GPUs in CUDA's order, so a client's cuda:i under the exports is gpus[i].
    served = ",".join(g.uuid for g in gpus)
    uid = host.euid()
    layout = layout_for(host.root(), gpu.uuid if len(gpus) == 1 else ALL_GPUS_DIR, opts.pipe_dir, opts.log_dir)
    prepare_dirs(layout, uid)
    _refuse_live_or_clean(host, layout)

    mode_set = False
    previous_mode = resolve_gpu(host, gpu.uuid).compute_mode  # after the clean-up, which may have restored it
    if opts.exclusive and previous_mode != "EXCLUSIVE_PROCESS":
        _set_compute_mode(host, gpu.uuid, "EXCLUSIVE_PROCESS")
        mode_set = True
    env = {**host.env, "CUDA_MPS_PIPE_DIRECTORY": str(layout.pipe_dir),
           "CUDA_MPS_LOG_DIRECTORY": str(layout.log_dir), "CUDA_VISIBLE_DEVICES": served}
    try:
        proc, pid, start_time = _launch(host, binary, env, layout, opts)
    except BaseException:
        if mode_set:
            _restore_compute_mode(host, gpu.uuid, previous_mode, quiet=True)
        raise
    state = MpsState(gpu_uuid=served, gpu_index=gpu.index if len(gpus) == 1 else None,
                     gpu_name=gpu.name if len(gpus) == 1 else f"{len(gpus)} GPUs", pipe_dir=str(layout.pipe_dir),
                     log_dir=str(layout.log_dir), daemon_pid=pid, daemon_start_time=start_time,
                     foreground=opts.foreground, compute_mode_set=mode_set,
                     previous_compute_mode=previous_mode if mode_set else None, binary=binary, uid=uid,
                     started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if not opts.foreground:
        _announce(state, layout, opts)
        print("unilab mps: stop it with `unilab mps stop" + _where(opts) + "`", file=sys.stderr)
        return 0
    # Ctrl-C from here on must quit the daemon: held back until _run_foreground waits for it.
    signal.pthread_sigmask(signal.SIG_BLOCK, _QUIT_SIGNALS)
    try:
        _announce(state, layout, opts)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _QUIT_SIGNALS)
        raise
    return _run_foreground(host, proc, layout, state, opts.timeout_s)


def _announce(state: MpsState, layout: Layout, opts: StartOptions) -> None:
    """The state file, then the daemon's line and its exports for the user."""
    state.write(layout.state_file)
    print(f"unilab mps: control daemon pid {state.daemon_pid} for {state.gpu_uuid} ({state.gpu_name}); "
          f"pipe {layout.pipe_dir}, "
          f"log {layout.log_dir}" + ("; compute mode EXCLUSIVE_PROCESS" if opts.exclusive else ""), file=sys.stderr)
    print("\n".join(state.exports()), flush=True)


def _launch(host: HostFacts, binary: str, env: dict, layout: Layout, opts: StartOptions):
    """(foreground child or None, daemon pid, its start time), once the daemon answers get_server_list."""
    proc = None
    try:
        deadline = host.clock() + opts.timeout_s
        if opts.foreground:
            # Own session: Ctrl-C reaches this process only, which then quits the daemon cleanly.
            proc = subprocess.Popen([binary, "-f"], env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        else:
            _daemonize(binary, env, layout, opts.timeout_s)
        pid = _wait_until_answers(host, layout, deadline, proc, opts.timeout_s)
        start_time = host.start_time(pid)
        if start_time is None:
            raise MpsToolError(f"unilab mps: the daemon (pid {pid}) answered but is gone already; see "
                               f"{layout.log_dir}/control.log")
    except BaseException:
        if proc is not None:
            end_child(proc)
        raise
    return proc, pid, start_time


def _where(opts) -> str:
    if opts.pipe_dir:
        return f" --pipe-dir {shlex.quote(opts.pipe_dir)}"
    return f" --gpu {opts.gpu}" if opts.gpu else ""


def _check_can_set_compute_mode(host: HostFacts) -> None:
    if not host.is_root():
        raise MpsToolError("unilab mps: --exclusive sets the GPU's compute mode (nvidia-smi -c EXCLUSIVE_PROCESS), "
                           "which needs root.\n  run it as root (sudo unilab mps start --exclusive ...), "
                           "or start without --exclusive (compute mode DEFAULT works with MPS)", code=EXIT_USAGE)
    if host.find(NVIDIA_SMI) is None:
        raise MpsToolError(f"unilab mps: --exclusive needs '{NVIDIA_SMI}', which is not on PATH", code=EXIT_USAGE)


def _set_compute_mode(host: HostFacts, uuid: str, mode: str) -> None:
    argv = [host.find(NVIDIA_SMI) or NVIDIA_SMI, "-i", uuid, "-c", mode]
    try:
        done = subprocess.run(argv, env=dict(host.env), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MpsToolError(f"unilab mps: `{shlex.join(argv)}` failed: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise MpsToolError(f"unilab mps: `{shlex.join(argv)}` failed: {detail}")


def _restore_compute_mode(host: HostFacts, uuid: str, mode: str | None, quiet: bool = False) -> None:
    try:
        _set_compute_mode(host, uuid, mode or "DEFAULT")
    except MpsToolError:
        if not quiet:
            raise
        print(f"unilab mps: could not restore the compute mode; run: sudo nvidia-smi -i {uuid} -c {mode or 'DEFAULT'}",
              file=sys.stderr)


def _answers(host: HostFacts, pipe_dir: Path, timeout_s: float) -> bool:
    try:
        host.control(pipe_dir, timeout_s).server_pids()
        return True
    except (ControlBinaryMissing, DaemonNoAnswer):
        return False


def _alive(host: HostFacts, state: MpsState) -> bool:
    return host.start_time(state.daemon_pid) == state.daemon_start_time


def _refuse_live_or_clean(host: HostFacts, layout: Layout) -> None:
    state = read_state(layout.state_file)
    if state is not None and _alive(host, state):
        raise MpsToolError(f"unilab mps: a daemon started by unilab mps (pid {state.daemon_pid}) is running at "
                           f"{state.pipe_dir}; stop it first:  unilab mps stop --pipe-dir {shlex.quote(state.pipe_dir)}")
    if os.path.lexists(layout.control):
        if is_socket(str(layout.control)) and _answers(host, layout.pipe_dir, 2.0):
            how = (f"unilab mps stop --pipe-dir {shlex.quote(str(layout.pipe_dir))}" if state is not None else
                   f"echo quit | CUDA_MPS_PIPE_DIRECTORY={shlex.quote(str(layout.pipe_dir))} {CONTROL_BINARY}"
                   "    # not started by unilab mps, so `unilab mps stop` will not stop it")
            raise MpsToolError(f"unilab mps: an MPS control daemon already answers at {layout.pipe_dir}; "
                               f"use it (unilab mps env) or stop it first:\n  {how}")
        print(f"unilab mps: removing the stale control pipe {layout.control} (nothing answers there)", file=sys.stderr)
        layout.control.unlink()
        (layout.pipe_dir / DAEMON_PID_FILE).unlink(missing_ok=True)
    if state is not None:  # its daemon is gone: finish what its stop would have done
        _finish(host, layout.state_file, state)


def _daemonize(binary: str, env: dict, layout: Layout, timeout_s: float) -> None:
    log = layout.log_dir / START_LOG
    with open(log, "ab") as out:
        try:
            done = subprocess.run([binary, "-d"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise MpsToolError(f"unilab mps: `{CONTROL_BINARY} -d` did not return within {timeout_s:g} s; "
                               f"see {log}") from exc
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise MpsToolError(f"unilab mps: `{CONTROL_BINARY} -d` failed (exit status {done.returncode}):\n"
                           + "\n".join(f"  {line}" for line in tail))


def _wait_until_answers(host: HostFacts, layout: Layout, deadline: float, proc, timeout_s: float) -> int:
    last = "no control pipe yet"
    while True:
        if proc is not None and proc.poll() is not None:
            raise MpsToolError(f"unilab mps: `{CONTROL_BINARY} -f` exited with status {proc.returncode}; "
                               f"see {layout.log_dir}/control.log")
        if is_socket(str(layout.control)):
            try:
                host.control(layout.pipe_dir, max(0.5, min(2.0, deadline - host.clock()))).server_pids()
                pid = proc.pid if proc is not None else host.daemon_pid(layout.pipe_dir)
                if pid is not None:
                    return pid
                last = f"it answers but wrote no {DAEMON_PID_FILE}"
            except (ControlBinaryMissing, DaemonNoAnswer) as exc:
                last = str(exc)
        if host.clock() >= deadline:
            raise MpsToolError(f"unilab mps: the control daemon did not answer get_server_list within {timeout_s:g} s "
                               f"({last}); see {layout.log_dir}/control.log (and `unilab mps status`, in case it "
                               "started late)")
        host.sleep(POLL_S)


def _run_foreground(host: HostFacts, proc: subprocess.Popen, layout: Layout, state: MpsState, timeout_s: float) -> int:
    print("unilab mps: running in the foreground; Ctrl-C quits the daemon", file=sys.stderr)
    # SIGINT and SIGTERM quit cleanly, also where SIGINT was inherited as ignored (a shell's background job).
    previous = {}
    for sig in _QUIT_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, signal.default_int_handler)
        except ValueError:  # not the main thread
            pass
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _QUIT_SIGNALS)  # a Ctrl-C held back since start() lands here
        code = proc.wait()
        print(f"unilab mps: the daemon exited by itself (status {code})", file=sys.stderr)
    except KeyboardInterrupt:
        code = None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if code is None:
        try:
            _quit_and_wait(host, state, timeout_s)
        except MpsToolError as exc:
            print(exc, file=sys.stderr)
            end_child(proc)
        proc.wait()
    _finish(host, layout.state_file, state)
    return 0


def stop(host: HostFacts, gpu: str | None, pipe_dir: str | None, timeout_s: float = 10.0) -> int:
    path, state = select_state(host.root(), host.env, gpu, pipe_dir)
    now = host.start_time(state.daemon_pid)
    if now is None:
        print(f"unilab mps: the daemon recorded in {path} (pid {state.daemon_pid}) is not running any more; "
              "removing the record", file=sys.stderr)
        _finish(host, path, state)
        return 0
    if now != state.daemon_start_time:
        raise MpsToolError(
            f"unilab mps: pid {state.daemon_pid} is not the daemon unilab started (its start time differs from the "
            f"one recorded in {path}: the pid was reused); refusing to stop it.\n"
            f"  the recorded daemon is gone: remove the record with  rm {shlex.quote(str(path))}")
    current = daemon_pid(PipeDirectory(state.pipe_dir, "env"))
    if current is not None and current != state.daemon_pid:
        raise MpsToolError(f"unilab mps: {state.pipe_dir} is served by pid {current}, not by the daemon unilab "
                           f"started (pid {state.daemon_pid}); refusing to stop it")
    _quit_and_wait(host, state, timeout_s)
    _finish(host, path, state)
    print(f"unilab mps: stopped the control daemon pid {state.daemon_pid} ({state.pipe_dir})", file=sys.stderr)
    return 0


def _quit_and_wait(host: HostFacts, state: MpsState, timeout_s: float) -> None:
    control = Path(state.pipe_dir) / "control"
    deadline = host.clock() + timeout_s
    unanswered = None
    if is_socket(str(control)):  # absent: a previous quit is in progress, just wait
        try:
            host.control(state.pipe_dir, min(timeout_s, QUIT_ANSWER_S)).ask("quit")
        except ControlBinaryMissing as exc:
            raise MpsToolError(f"unilab mps: the daemon (pid {state.daemon_pid}) did not take `quit`: {exc}") from exc
        except DaemonNoAnswer as exc:
            # A daemon whose clients are still exiting (a run just killed) answers `quit` only once they are
            # gone: wait for it to exit like after an answer, up to the same deadline.
            unanswered = exc
    while _alive(host, state):
        if host.clock() >= deadline:
            if unanswered is not None:
                raise MpsToolError(
                    f"unilab mps: the daemon (pid {state.daemon_pid}) did not take `quit` and is still running "
                    f"{timeout_s:g} s later ({unanswered}); it may be waiting for its MPS clients to exit "
                    f"(`unilab mps status` lists them): stop them and run stop again, with a longer --timeout.\n"
                    f"  if it is wedged: kill {state.daemon_pid}")
            raise MpsToolError(
                f"unilab mps: the daemon (pid {state.daemon_pid}) is still running {timeout_s:g} s after `quit`: it "
                "waits for its MPS clients to exit (`unilab mps status` lists them); stop them and run stop again")
        host.sleep(POLL_S)


def _finish(host: HostFacts, path: Path, state: MpsState) -> None:
    """After the daemon is gone: restore the compute mode we changed, then drop the record."""
    if state.compute_mode_set:
        _restore_compute_mode(host, state.gpu_uuid, state.previous_compute_mode)
    path.unlink(missing_ok=True)
