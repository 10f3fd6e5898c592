"""Where MPS daemons live: one directory convention, for `train`'s fixes and for `unilab mps`.

The convention: ``/tmp/unilab-mps-<uid>/<gpu-uuid>/{pipe,log}``, every level a mode-0700 directory
of the user, and beside pipe/ and log/ the state file of a daemon that `unilab mps start` started.
The fix that `train +execution=mps` prints when no daemon answers names exactly the directories
`unilab mps start --gpu <uuid>` uses for the GPU the probe identified (`start_daemon_commands`), so
the two ways of starting a daemon meet in the same place: `unilab mps start` refuses to start a
second daemon where one started from the fix already answers. One directory per GPU lets
independent daemons run side by side (`unilab mps start --gpu N`).

Why /tmp/unilab-mps-<uid> rather than $XDG_RUNTIME_DIR:

- The same path from every shell of the user. $XDG_RUNTIME_DIR exists only inside a login session
  (it is unset under sudo, cron, batch schedulers and most containers), so a default built on it
  moves with the shell: `unilab mps stop|env|status` from another shell would not find the daemon,
  and `train` run there would print a fix naming other directories.
- It outlives the login. logind removes $XDG_RUNTIME_DIR at the user's last logout, taking the
  control socket and the state file (with the compute mode `stop` must restore) from under a daemon
  that keeps running; it is also a size-capped tmpfs, where the daemon's logs would grow.
- It is what the MPS reference's raw commands (docs/en/mps-reference.md, "By hand") and the other docs type.

What /tmp costs is a name another user could create first. `unilab mps start` meets it: it creates
every level 0700 and refuses a symlink or a directory owned by another uid (`ensure_private_dir`).
The printed raw commands create every level with mode 700 but, like any `mkdir -p`, accept a level
that already exists; on a shared host `unilab mps start` is the safer of the two.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from unilab.atomic import write_json_atomic

from .control import CONTROL_BINARY
from .errors import MpsToolError

TMP = Path("/tmp")  # what holds the root; tests substitute a directory of their own
STATE_FILE = "unilab-mps-state.json"  # beside pipe/ and log/, in the pipe directory's parent
ALL_GPUS_DIR = "all-gpus"  # the convention's directory of a daemon for every visible GPU (start --all-gpus)


def default_root(uid: int, tmp: Path = TMP) -> Path:
    return Path(tmp) / f"unilab-mps-{uid}"


def export_lines(pipe_dir: str | os.PathLike, log_dir: str | os.PathLike) -> list[str]:
    return [
        f"export CUDA_MPS_PIPE_DIRECTORY={shlex.quote(str(pipe_dir))}",
        f"export CUDA_MPS_LOG_DIRECTORY={shlex.quote(str(log_dir))}",
    ]


@dataclass(frozen=True)
class Layout:
    pipe_dir: Path
    log_dir: Path
    private_parents: tuple[Path, ...] = ()  # default layout: root and <uuid>/ are ours too

    @property
    def control(self) -> Path:
        return self.pipe_dir / "control"

    @property
    def state_file(self) -> Path:
        return self.pipe_dir.parent / STATE_FILE


def layout_for(root: Path, gpu_uuid: str, pipe_dir: str | None = None, log_dir: str | None = None) -> Layout:
    """The convention's directories for `gpu_uuid` under `root`; --pipe-dir/--log-dir replace them."""
    if pipe_dir:
        pipe = Path(os.path.abspath(pipe_dir))
        return Layout(pipe, Path(os.path.abspath(log_dir)) if log_dir else pipe.parent / "log")
    base = root / gpu_uuid
    return Layout(base / "pipe", Path(os.path.abspath(log_dir)) if log_dir else base / "log", (root, base))


def start_daemon_commands(layout: Layout) -> list[str]:
    """The raw shell commands that start a daemon in these directories (`train`'s fix). Unlike
    `unilab mps start` they check no owner, record nothing and pin no GPU: the daemon serves every
    GPU its shell sees, which one data-parallel launcher needs."""
    dirs = (*layout.private_parents, layout.pipe_dir, layout.log_dir)
    return [
        "mkdir -p -m 700 " + " ".join(shlex.quote(str(d)) for d in dirs),
        *export_lines(layout.pipe_dir, layout.log_dir),
        f"{CONTROL_BINARY} -d",
    ]


def ensure_private_dir(path: Path, uid: int) -> None:
    """A directory owned by `uid`, mode 0700; refuses symlinks and directories of other users."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise MpsToolError(f"unilab mps: {path} exists and is not a directory (a symlink or a file); "
                           "remove it or pass another --pipe-dir/--log-dir")
    if st.st_uid != uid:
        raise MpsToolError(f"unilab mps: {path} belongs to uid {st.st_uid}, not to this user (uid {uid}); "
                           "pass a --pipe-dir/--log-dir this user owns")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


def prepare_dirs(layout: Layout, uid: int) -> None:
    for path in (*layout.private_parents, layout.pipe_dir, layout.log_dir):
        ensure_private_dir(path, uid)


class MpsState(BaseModel):
    """What `unilab mps start` started; `stop` acts only when pid and start time still match."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    gpu_uuid: str
    gpu_index: Optional[int] = None
    gpu_name: Optional[str] = None
    pipe_dir: str
    log_dir: str
    daemon_pid: int
    daemon_start_time: int  # /proc/<pid>/stat field 22: tells a reused pid from our daemon
    foreground: bool = False
    compute_mode_set: bool = False
    previous_compute_mode: Optional[str] = None
    binary: str
    uid: int
    started_at: str

    def write(self, path: Path) -> Path:
        return write_json_atomic(path, self.model_dump(mode="json"))

    def exports(self) -> list[str]:
        return [*export_lines(self.pipe_dir, self.log_dir),
                f"export CUDA_VISIBLE_DEVICES={shlex.quote(self.gpu_uuid)}"]


def read_state(path: Path) -> MpsState | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return MpsState.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise MpsToolError(f"unilab mps: {path} is not a valid state file ({exc.__class__.__name__}); "
                           "remove it if no daemon started by unilab uses that directory") from exc


def known_state_files(root: Path, env: Mapping[str, str]) -> list[Path]:
    """State files under the root, plus the one beside $CUDA_MPS_PIPE_DIRECTORY. Reads only."""
    found = set(root.glob(f"*/{STATE_FILE}"))
    ambient = env.get("CUDA_MPS_PIPE_DIRECTORY")
    if ambient:
        candidate = Path(os.path.abspath(ambient)).parent / STATE_FILE
        if candidate.is_file():
            found.add(candidate)
    return sorted(found)


def select_state(root: Path, env: Mapping[str, str], gpu: str | None, pipe_dir: str | None) -> tuple[Path, MpsState]:
    """The one recorded daemon matching --gpu / --pipe-dir (or the only one recorded)."""
    if pipe_dir:
        pipe = Path(os.path.abspath(pipe_dir))
        path = pipe.parent / STATE_FILE
        state = read_state(path)
        if state is None or Path(state.pipe_dir) != pipe:
            raise MpsToolError(
                f"unilab mps: no daemon started by `unilab mps start` is recorded for {pipe} "
                f"(no {path}).\n  unilab mps stops only daemons it started; one you started yourself stops with:\n"
                f"    echo quit | CUDA_MPS_PIPE_DIRECTORY={shlex.quote(str(pipe))} nvidia-cuda-mps-control")
        return path, state
    candidates = [(p, s) for p in known_state_files(root, env) if (s := read_state(p)) is not None]
    if gpu is not None:
        candidates = [(p, s) for p, s in candidates
                      if (gpu.isdigit() and s.gpu_index == int(gpu)) or s.gpu_uuid.startswith(gpu)
                      or s.gpu_uuid.startswith("GPU-" + gpu)]
    if len(candidates) == 1:
        return candidates[0]
    where = f"for --gpu {gpu} " if gpu is not None else ""
    if not candidates:
        raise MpsToolError(f"unilab mps: no daemon started by `unilab mps start` is recorded {where}"
                           f"(looked under {root}); `unilab mps status` lists what is running")
    listing = "\n".join(f"    {s.gpu_uuid}  {s.pipe_dir}" for _, s in candidates)
    raise MpsToolError(f"unilab mps: several daemons are recorded {where}; pass --gpu or --pipe-dir:\n{listing}")
