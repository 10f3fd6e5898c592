"""Fakes for `unilab mps`: a control binary that also starts (-d / -f) and quits a daemon, and nvidia-smi.

The fake daemon is a separate process on a real Unix socket `<pipe dir>/control`, writes the pid
file like the real one, logs its start (with CUDA_VISIBLE_DEVICES) and every command to
`<log dir>/control.log`, and answers get_server_list / get_client_list from FAKE_MPS_SERVERS
(JSON {"server pid": [client pids]}). FAKE_MPS_START=nothing makes `-d` start nothing;
FAKE_MPS_START=fail makes it fail like a second instance would. FAKE_MPS_QUIT_DELAY=S (at start) makes the
daemon answer `quit`, and exit, S seconds late, like one whose clients are still exiting.
`Tool` is a host of these fakes behind `unilab mps` (the `tool` fixture of tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

from fakes import CONTROL_CLIENT, GPU_A, FakeNvml

from unilab.mps.host import HostFacts
from unilab.mps.layout import STATE_FILE
from unilab.mps.nvml import GpuInfo

CONTROL_SCRIPT = textwrap.dedent(
    """\
    #!{python}
    import json, os, signal, socket, subprocess, sys, time
    PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    LOG = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
    CONTROL = os.path.join(PIPE, "control")
    PIDFILE = os.path.join(PIPE, "nvidia-cuda-mps-control.pid")

    def log(line):
        with open(os.path.join(LOG, "control.log"), "a") as f:
            f.write(line + "\\n")

    def cleanup(*_):
        for path in (CONTROL, PIDFILE):
            try:
                os.unlink(path)
            except OSError:
                pass
        sys.exit(0)

    def serve():
        servers = json.loads(os.environ.get("FAKE_MPS_SERVERS", "{{}}"))
        with open(PIDFILE, "w") as f:
            f.write(f"{{os.getpid()}}\\n")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(CONTROL)
        sock.listen(8)
        signal.signal(signal.SIGTERM, cleanup)
        log(f"start pid={{os.getpid()}} CUDA_VISIBLE_DEVICES={{os.environ.get('CUDA_VISIBLE_DEVICES')}}")
        while True:
            conn, _ = sock.accept()
            with conn:
                command = conn.makefile().readline().strip()
                log(f"cmd {{command}}")
                verb, _, arg = command.partition(" ")
                if verb == "quit":
                    time.sleep(float(os.environ.get("FAKE_MPS_QUIT_DELAY", "0")))  # clients still exiting
                    conn.sendall(b"")
                    break
                if verb == "get_server_list":
                    reply = "".join(f"{{pid}}\\n" for pid in servers)
                elif verb == "get_client_list":
                    reply = "".join(f"{{pid}}\\n" for pid in servers.get(arg.strip(), []))
                else:
                    reply = ""
                conn.sendall(reply.encode())
        sock.close()
        cleanup()

    {client}
    behaviour = os.environ.get("FAKE_MPS_START", "")
    if sys.argv[1:] == ["-d"]:
        if behaviour == "fail":
            print("An instance of this daemon is already running", file=sys.stderr)
            sys.exit(1)
        if behaviour != "nothing":
            subprocess.Popen([sys.executable, __file__, "--serve"], start_new_session=True, close_fds=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sys.exit(0)
    elif sys.argv[1:] in (["-f"], ["--serve"]):
        serve()
    else:
        client()
    """
)

SMI_SCRIPT = textwrap.dedent(
    """\
    #!/bin/sh
    echo "$@" >> "$FAKE_SMI_LOG"
    exit "${{FAKE_SMI_RC:-0}}"
    """
)


def install_fake_mps_tools(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    control = bin_dir / "nvidia-cuda-mps-control"
    control.write_text(CONTROL_SCRIPT.format(python=sys.executable, client=CONTROL_CLIENT))
    control.chmod(0o755)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI_SCRIPT.format())
    smi.chmod(0o755)
    return bin_dir


_STARTED = re.compile(r"^start pid=(\d+)", re.M)


def started_pids(root: Path) -> list[int]:
    """Every fake daemon started under `root`, from the control.log files."""
    return [int(m) for log in root.rglob("control.log") for m in _STARTED.findall(log.read_text())]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _is_fake_daemon(pid: int) -> bool:
    try:
        return b"nvidia-cuda-mps-control" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def kill_started(root: Path) -> None:
    """Stops every fake daemon a test started (never the test process itself, never a reused pid)."""
    for pid in started_pids(root):
        if pid == os.getpid() or not alive(pid) or not _is_fake_daemon(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


class Tool:
    """A host of fakes behind `unilab mps`; `run(...)` goes through the real `unilab` entry point."""

    def __init__(self, root: Path):
        self.root = root
        bin_dir = install_fake_mps_tools(root / "tbin")
        self.tmp = root / "tmp"  # stands for /tmp
        self.tmp.mkdir()
        self.env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "FAKE_SMI_LOG": str(root / "smi.log")}
        self.nvml = FakeNvml()
        self.root_user = False

    def host(self) -> HostFacts:
        return HostFacts(env=dict(self.env), nvml=self.nvml, is_root=lambda: self.root_user, tmp=self.tmp)

    @property
    def mps_root(self) -> Path:
        return self.tmp / f"unilab-mps-{os.geteuid()}"

    def base(self, gpu: GpuInfo = GPU_A) -> Path:
        return self.mps_root / gpu.uuid

    def state(self, gpu: GpuInfo = GPU_A) -> dict:
        return json.loads((self.base(gpu) / STATE_FILE).read_text())

    def control_log(self, gpu: GpuInfo = GPU_A) -> str:
        path = self.base(gpu) / "log" / "control.log"
        return path.read_text() if path.exists() else ""

    def smi_calls(self) -> list[str]:
        path = self.root / "smi.log"
        return path.read_text().splitlines() if path.exists() else []
