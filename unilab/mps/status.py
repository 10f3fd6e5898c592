"""`unilab mps status`: strictly read-only.

It reads state and pid files, and asks a daemon only `get_server_list` / `get_client_list`, which never
start a server; it creates no file and no CUDA context, and asks nothing where no control socket exists.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .control import ControlBinaryMissing, DaemonNoAnswer, PipeDirectory, daemon_pid, is_socket
from .control import pipe_directory as ambient_pipe
from .host import HostFacts
from .layout import MpsState, known_state_files, read_state


def collect(host: HostFacts, timeout_s: float = 2.0) -> list[dict]:
    entries: list[dict] = []
    for path in known_state_files(host.root(), host.env):
        state = read_state(path)
        if state is not None:
            entries.append(_describe(host, Path(state.pipe_dir), "unilab", timeout_s, state, path))
    ambient = ambient_pipe(host.env)
    pipe = Path(os.path.abspath(ambient.path))
    for entry in entries:
        if entry["pipe_directory"] == str(pipe):
            entry["source"] = f"unilab, ${'CUDA_MPS_PIPE_DIRECTORY' if ambient.source == 'env' else 'default'}"
            break
    else:
        entries.append(_describe(host, pipe, "$CUDA_MPS_PIPE_DIRECTORY" if ambient.source == "env"
                                 else "NVIDIA default", timeout_s))
    return entries


def _describe(host: HostFacts, pipe: Path, source: str, timeout_s: float,
              state: MpsState | None = None, state_file: Path | None = None) -> dict:
    control = pipe / "control"
    entry: dict = {
        "pipe_directory": str(pipe),
        "source": source,
        "started_by_unilab": state is not None,
        "state_file": str(state_file) if state_file else None,
        "gpu_uuid": state.gpu_uuid if state else None,
        "log_directory": state.log_dir if state else None,
        "recorded_daemon_pid": state.daemon_pid if state else None,
        "recorded_daemon_alive": (host.start_time(state.daemon_pid) == state.daemon_start_time) if state else None,
        "directory_exists": pipe.is_dir(),
        "not_a_directory": not_a_directory(pipe),
        "control_socket": is_socket(str(control)),
        "answers": False,
        "daemon_pid": daemon_pid(PipeDirectory(str(pipe), "env")),
        "server_pids": [],
        "clients": {},
        "error": None,
    }
    if not entry["control_socket"]:
        return entry
    ask = host.control(pipe, timeout_s)
    try:
        servers = ask.server_pids()
        entry["answers"] = True
        entry["server_pids"] = servers
        entry["clients"] = {str(server): ask.client_pids(server) for server in servers}
    except (ControlBinaryMissing, DaemonNoAnswer) as exc:
        entry["error"] = str(exc)
    return entry


_FILE_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a named pipe"),
               (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def not_a_directory(path: Path) -> str | None:
    """What `path` is when it is not a directory (None when it is one): a pipe directory set to a file or to a
    broken link is a mistake to name, not one to call missing."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop, not a directory"
        if exc.errno == errno.ENOTDIR:
            return "not a directory: a folder above it is a file"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return "not accessible (permission denied on a folder above it)"
        if os.path.islink(path):
            return f"a dangling symlink (to {os.readlink(path)}), not a directory"
        return "no such directory"
    if stat.S_ISDIR(mode):
        return None
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
    via = f"a symlink to {kind}" if os.path.islink(path) else kind
    return f"{via}, not a directory"


def render(entries: list[dict]) -> str:
    lines = []
    for e in entries:
        head = f"{e['pipe_directory']}  [{e['source']}]"
        if e["started_by_unilab"]:
            alive = "alive" if e["recorded_daemon_alive"] else "NOT running"
            head += f"  gpu {e['gpu_uuid']}, started pid {e['recorded_daemon_pid']} ({alive}), log {e['log_directory']}"
        lines.append(head)
        if not e["directory_exists"]:
            lines.append(f"  {e.get('not_a_directory') or 'no such directory'}")
            continue
        answers = "yes" if e["answers"] else f"no ({e['error']})" if e["error"] else "no"
        lines.append(f"  control socket: {'yes' if e['control_socket'] else 'no'}"
                     + (f", answers: {answers}" if e["control_socket"] else "")
                     + (f", daemon pid {e['daemon_pid']}" if e["daemon_pid"] is not None else ""))
        if e["answers"]:
            if not e["server_pids"]:
                lines.append("  no MPS server running (one starts when the first client connects)")
            for server, clients in e["clients"].items():
                lines.append(f"  server {server}: clients {', '.join(map(str, clients)) or 'none'}")
    return "\n".join(lines)
