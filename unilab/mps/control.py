"""Talking to the MPS control daemon through `nvidia-cuda-mps-control` (commands on stdin)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping

CONTROL_BINARY = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # NVIDIA's default when CUDA_MPS_PIPE_DIRECTORY is unset
DAEMON_PID_FILE = "nvidia-cuda-mps-control.pid"


class ControlBinaryMissing(RuntimeError):
    pass


class DaemonNoAnswer(RuntimeError):
    pass


class Cancelled(RuntimeError):
    """The caller's `cancelled()` turned true while a command was waiting for the daemon."""


CANCEL_POLL_S = 0.1  # how often a waiting command looks at `cancelled`


@dataclass(frozen=True)
class PipeDirectory:
    path: str
    source: str  # "env" (CUDA_MPS_PIPE_DIRECTORY) or "default"

    @property
    def control(self) -> str:
        return os.path.join(self.path, "control")


def pipe_directory(env: Mapping[str, str]) -> PipeDirectory:
    value = env.get("CUDA_MPS_PIPE_DIRECTORY")
    if value:
        return PipeDirectory(value, "env")
    return PipeDirectory(DEFAULT_PIPE_DIRECTORY, "default")


def is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def daemon_pid(pipe: PipeDirectory) -> int | None:
    try:
        with open(os.path.join(pipe.path, DAEMON_PID_FILE)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


@dataclass
class MpsControl:
    """One daemon, reached through its pipe directory. Every call is bounded by timeout_s."""

    pipe: PipeDirectory
    env: Mapping[str, str]
    timeout_s: float = 5.0
    which: Callable[..., str | None] = shutil.which
    cancelled: Callable[[], bool] | None = None  # true: a waiting command is abandoned (Cancelled)

    def binary(self) -> str:
        path = self.which(CONTROL_BINARY, path=self.env.get("PATH", os.defpath))
        if path is None:
            raise ControlBinaryMissing(f"'{CONTROL_BINARY}' is not on PATH")
        return path

    def ask(self, command: str) -> str:
        env = dict(self.env)
        env["CUDA_MPS_PIPE_DIRECTORY"] = self.pipe.path
        if self.cancelled is None:
            try:
                done = subprocess.run([self.binary()], input=command + "\n", capture_output=True, text=True,
                                      env=env, timeout=self.timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise DaemonNoAnswer(f"no answer to '{command}' within {self.timeout_s:g} s") from exc
        else:
            done = self._ask_cancellable(command, env)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
            raise DaemonNoAnswer(f"'{command}' failed: {detail}")
        return done.stdout

    def _ask_cancellable(self, command: str, env: dict) -> subprocess.CompletedProcess:
        proc = subprocess.Popen([self.binary()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + self.timeout_s
        given = command + "\n"
        try:
            while True:
                try:
                    out, err = proc.communicate(given, timeout=min(CANCEL_POLL_S, self.timeout_s))
                    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
                except subprocess.TimeoutExpired:
                    given = None  # sent already: a retry must not send it again
                if self.cancelled():
                    raise Cancelled(f"'{command}' abandoned")
                if time.monotonic() >= deadline:
                    raise DaemonNoAnswer(f"no answer to '{command}' within {self.timeout_s:g} s")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    def server_pids(self) -> list[int]:
        return _pids(self.ask("get_server_list"))

    def client_pids(self, server_pid: int) -> list[int]:
        return _pids(self.ask(f"get_client_list {server_pid}"))


def _pids(text: str) -> list[int]:
    return [int(tok) for tok in text.split() if tok.isdigit()]
