"""The ranks of a run started by torchrun or srun, gathered in one run directory.

Every rank has its own launcher there. Rank 0 writes the run's files at the top (run_config.json,
runtime_manifest.json, run_summary.json, checkpoints); rank r > 0 writes its own under rank_<r>/ (the
same three files, beside its metrics), and every rank's children their logs under logs/. The top
runtime_manifest.json lists every rank (`ranks`, one entry per global rank):
- with a shared filesystem (all nodes see the same training.run.log_dir) rank 0 gathers the entries at the end
  of the run (`gather_rank_entries`);
- without one each node holds a directory of its own at the same path, and `unilab merge-ranks RANK0_DIR
  OTHER_DIR...` copies the other nodes' rank directories and logs into rank 0's, then gathers
  (`merge_rank_dirs`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .layout import MANIFEST_FILE, RUN_CONFIG_FILE, rank_dir
from .manifest import RuntimeManifest

LOG_DIR = "logs"  # unilab.runtime.child_log.LOG_DIR (not imported: that module redirects file descriptors)
NODE_LOCAL_KEYS = ("training.run.log_dir",)  # may differ between the ranks of one run (each node's own disk)


class MergeError(ValueError):
    """Directories that cannot be merged into one run; the message says why."""


def rank_subdirs(path: Path) -> dict[int, Path]:
    """rank -> its rank_<r>/ directory (r > 0) under `path`, for those holding a rank's manifest."""
    found = {}
    for sub in path.glob("rank_*"):
        suffix = sub.name.removeprefix("rank_")
        if suffix.isdigit() and int(suffix) > 0 and (sub / MANIFEST_FILE).is_file():
            found[int(suffix)] = sub
    return found


def gather_rank_entries(run_dir: str | Path) -> list[int]:
    """Rewrite the top manifest's `ranks` with every rank's entry found under rank_<r>/ (rank 0's own stay);
    the ranks still missing."""
    run_dir = Path(run_dir)
    manifest = RuntimeManifest.read(run_dir)
    entries = {entry.rank: entry for entry in manifest.ranks}
    for _rank, sub in sorted(rank_subdirs(run_dir).items()):
        for entry in RuntimeManifest.read(sub).ranks:
            entries[entry.rank] = entry
    manifest.ranks = [entries[r] for r in sorted(entries)]
    manifest.write(run_dir)
    return [r for r in range(manifest.world_size) if r not in entries]


def merge_rank_dirs(target: str | Path, sources: list[str | Path]) -> list[int]:
    """Copy the rank directories and logs of `sources` (the other nodes' copies of the run directory) into
    `target` (rank 0's), then gather the manifest entries; the ranks still missing. Everything is checked
    before anything is copied (MergeError): a target that is not rank 0's directory of a multi-rank run, a
    source without rank directories, a rank whose config differs from rank 0's, a rank found twice."""
    from .run_config import diff_configs, load_run_config

    target = Path(target)
    if not (target / MANIFEST_FILE).is_file() or not (target / RUN_CONFIG_FILE).is_file():
        raise MergeError(f"{target}: not rank 0's run directory (no {RUN_CONFIG_FILE} and {MANIFEST_FILE} at its top)")
    world_size = RuntimeManifest.read(target).world_size
    if world_size < 2:
        raise MergeError(f"{target}: a run of one rank has nothing to merge")
    config = load_run_config(target)
    copies: dict[int, Path] = {}
    for source in map(Path, sources):
        if not source.is_dir():
            raise MergeError(f"{source}: not a directory")
        found = rank_subdirs(source)
        if not found:
            raise MergeError(f"{source}: no rank directory (rank_<r>/ with its {MANIFEST_FILE}) to merge")
        for rank, sub in found.items():
            if rank >= world_size:
                raise MergeError(f"{sub}: rank {rank}, but {target} is a run of {world_size} ranks")
            if rank in copies or (rank_dir(target, rank) / MANIFEST_FILE).is_file():
                raise MergeError(f"{sub}: rank {rank} is there already ({copies.get(rank) or rank_dir(target, rank)})")
            differing = [key for key, _, _ in diff_configs(config, load_run_config(sub)) if key not in NODE_LOCAL_KEYS]
            if differing:
                raise MergeError(f"{sub}: rank {rank} ran with another config than rank 0 ({', '.join(differing)})")
            copies[rank] = sub
    for rank, sub in sorted(copies.items()):
        shutil.copytree(sub, rank_dir(target, rank), dirs_exist_ok=True)
        _copy_new_logs(sub.parent / LOG_DIR, target / LOG_DIR)
    return gather_rank_entries(target)


def _copy_new_logs(source: Path, target: Path) -> None:
    if not source.is_dir() or source.resolve() == target.resolve():
        return
    target.mkdir(exist_ok=True)
    for log in source.iterdir():
        if log.is_file() and not (target / log.name).exists():
            shutil.copy2(log, target / log.name)
