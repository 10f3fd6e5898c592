"""Run directories under training.run.log_dir, created only after the execution probe passed; a resumed
run reuses its directory and first archives the evidence of the segment before it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from .layout import SEGMENT_FILES, SEGMENTS_DIR


def new_run_dir(log_dir: str, run_name: str | None, algo: str, task: str, suffix: str = "") -> Path:
    """Raises OSError (a log_dir that is a file, or not writable) with a message that names log_dir.
    `suffix` (a sweep job's swept values) extends the default name only, never a given run_name."""
    base = Path(log_dir).expanduser().resolve()
    name = run_name or f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{algo}_{task}{suffix}"
    # mkdir without exist_ok claims the name: two runs started in the same second get _1, _2, ...
    for suffix in ("", *(f"_{i}" for i in range(1, 1000))):
        candidate = base / f"{name}{suffix}"
        missing = [p for p in (candidate, *candidate.parents) if not p.exists()]
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            if not base.is_dir():  # log_dir, or a folder above it, is a file
                raise NotADirectoryError(f"{base} (or a folder above it) is not a directory") from None
            continue
        except OSError as exc:  # read-only, no permission, a file in the path, a name too long
            _remove_empty(missing)  # a refused run leaves nothing behind, not the folders made on the way
            raise type(exc)(exc.errno, f"cannot create {candidate}: {exc.strerror or exc}") from None
    raise FileExistsError(f"{base / name}: too many runs with this name")


def _remove_empty(folders: list[Path]) -> None:
    """Remove those of `folders` (deepest first) that exist and are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def archive_segment(run_dir: Path) -> None:
    """Keep the evidence of earlier segments of a resumed run under segments/<n>/."""
    segments = run_dir / SEGMENTS_DIR
    n = len(list(segments.glob("*"))) if segments.exists() else 0
    target = segments / str(n)
    target.mkdir(parents=True)
    for name in SEGMENT_FILES:
        if (run_dir / name).exists():
            (run_dir / name).replace(target / name)
