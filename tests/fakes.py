"""Fakes for host facts only: NVML, and an MPS control daemon on a real Unix socket.

The fake daemon listens on `<pipe dir>/control` and writes its pid file like the real one.
A fake `nvidia-cuda-mps-control` executable, put first on PATH, reads commands from stdin
(the real protocol), sends each over the socket and prints the reply.
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path

from unilab.mps.nvml import GpuInfo, GpuMemory, NvmlUnavailable

GPU_A = GpuInfo(index=0, uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", name="Fake H200", mig_enabled=False,
                compute_mode="DEFAULT")
GPU_B = GpuInfo(index=1, uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000", name="Fake H200", mig_enabled=False,
                compute_mode="DEFAULT")


@dataclass
class FakeNvml:
    devices: list[GpuInfo] = field(default_factory=lambda: [GPU_A, GPU_B])
    available: bool = True
    free_mib: float = 140_000.0  # every GPU's free memory, as nvmlDeviceGetMemoryInfo would give it
    total_mib: float = 143_771.0
    process_mib: dict[int, float] = field(default_factory=dict)  # pid -> MiB, as NVML lists compute processes

    def gpus(self) -> list[GpuInfo]:
        if not self.available:
            raise NvmlUnavailable("NVML Shared Library Not Found (fake)")
        return list(self.devices)

    def memory(self, index: int) -> GpuMemory:
        self.gpus()
        return GpuMemory(free_mib=self.free_mib, total_mib=self.total_mib)

    def process_memory(self, index: int) -> dict[int, float]:
        self.gpus()
        return dict(self.process_mib)


class FakeMpsDaemon:
    """Answers get_server_list / get_client_list <pid> like nvidia-cuda-mps-control -d."""

    def __init__(self, pipe_dir: Path, *, silent: bool = False):
        self.pipe_dir = Path(pipe_dir)
        self.silent = silent
        self.servers: dict[int, list[int]] = {}
        # Report every multiprocessing child on this host as a client (as if they had reached the daemon).
        self.clients_from_proc = False
        self.client_env: dict[int, dict[str, str]] = {}  # CUDA_MPS_* variables of the clients it reported
        self.commands: list[str] = []
        self.command_log: Path | None = None  # set: every command is appended there too (seen from outside)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def control(self) -> Path:
        return self.pipe_dir / "control"

    def start(self) -> "FakeMpsDaemon":
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.control))
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        (self.pipe_dir / "nvidia-cuda-mps-control.pid").write_text(f"{os.getpid()}\n")
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        if self._sock:
            self._sock.close()
        self.control.unlink(missing_ok=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(2)
                try:
                    command = conn.makefile().readline().strip()
                except OSError:
                    continue
                self.commands.append(command)
                if self.command_log is not None:
                    with open(self.command_log, "a") as log:
                        log.write(command + "\n")
                if self.silent:
                    self._stop.wait(30)
                    continue
                try:
                    conn.sendall(self._answer(command).encode())
                except OSError:  # the client hung up first (a cancelled query), as the real daemon allows
                    continue

    def _answer(self, command: str) -> str:
        verb, _, arg = command.partition(" ")
        if verb == "get_server_list":
            return "".join(f"{pid}\n" for pid in self.servers)
        if verb == "get_client_list" and arg.strip().isdigit():
            clients = self.servers.get(int(arg), [])
            if self.clients_from_proc:
                children = _spawned_children(self.pipe_dir)
                self.client_env.update(children)
                clients = clients + list(children)
            return "".join(f"{pid}\n" for pid in clients)
        return ""


def _spawned_children(pipe_dir: Path) -> dict[int, dict[str, str]]:
    """multiprocessing children whose environment points at this daemon's pipe directory (a CUDA
    process reaches the daemon of the CUDA_MPS_PIPE_DIRECTORY it started with, none other), with
    their CUDA_MPS_* variables."""
    wanted = f"CUDA_MPS_PIPE_DIRECTORY={pipe_dir}".encode()
    pids = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"spawn_main" not in f.read():
                        continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                if wanted in env:
                    pids[int(entry)] = dict(e.decode().split("=", 1) for e in env if e.startswith(b"CUDA_MPS_"))
            except OSError:
                continue
    return pids


# The client side of a fake nvidia-cuda-mps-control: each stdin line is one command sent over
# `<pipe dir>/control`, the reply goes to stdout. Shared with the fake that also runs daemons
# (fakes_mps_tool.py); inserted into a script by str.format, so its braces are single.
CONTROL_CLIENT = textwrap.dedent(
    """\
    def client():
        path = os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"), "control")
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
            except OSError as exc:
                print(f"Cannot find MPS control daemon process ({exc})", file=sys.stderr)
                sys.exit(1)
            s.sendall((line + "\\n").encode())
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            sys.stdout.write(data.decode())
    """
)

CLIENT_SCRIPT = "#!{python}\nimport os, socket, sys\n{client}\nclient()\n"


def install_fake_control_binary(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-cuda-mps-control"
    exe.write_text(CLIENT_SCRIPT.format(python=sys.executable, client=CONTROL_CLIENT))
    exe.chmod(0o755)
    return exe


def train_under_fake_mps(argv: list[str], root: str) -> None:
    """`train +execution=mps ...` in this process, on a CPU host made to look like an MPS one: the fake
    NVML and a fake daemon under `root` (commands logged to `root`/commands), children on the CPU. For
    tests that signal a real launcher (`python -c "import fakes; fakes.train_under_fake_mps(...)"`)."""
    import unilab.mps.probe as probe_mod
    from unilab.cli.train import main as train_main
    from unilab.mps import HostFacts

    root_dir = Path(root)
    install_fake_control_binary(root_dir / "bin")
    daemon = FakeMpsDaemon(root_dir / "pipe")
    daemon.command_log = root_dir / "commands"
    daemon.start()
    env = {"PATH": f"{root_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(root_dir / "log")}
    os.environ.update(env)
    real_probe = probe_mod.probe_cuda_process_sharing

    def probe_as_if_cuda(requested, learner_device, collector_device, *, backend, host=None, timeout_s=5.0):
        ev = real_probe(requested, "cuda:0", "cuda:0", backend=backend, timeout_s=timeout_s,
                        host=HostFacts(platform="linux", env=env, nvml=FakeNvml()))
        return ev.model_copy(update={"learner_device": learner_device, "collector_device": collector_device})

    probe_mod.probe_cuda_process_sharing = probe_as_if_cuda
    train_main(["+execution=mps", *argv])


def wait_for_go_in_child(go_event, stop_event, timeout_s: float, marker: str) -> None:
    """A launcher's child waiting for the go (as the learner does during MPS client verification);
    `marker` says how the wait ended: stop, parent gone or go."""
    from unilab.runtime.learner import wait_for_go
    from unilab.runtime.messages import ParentGone, StopRequested, become_child

    become_child("learner")
    Path(marker).write_text("waiting")
    try:
        wait_for_go(go_event, timeout_s, stop_event)
        Path(marker).write_text("go")
    except StopRequested:
        Path(marker).write_text("stop")
    except ParentGone:
        Path(marker).write_text("parent gone")
