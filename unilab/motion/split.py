"""`unilab motion split LIBRARY --held-out K --out DIR`: a library split in two for a held-out evaluation.

K clips of the library, drawn with `--seed` (or named with `--clips`), go to DIR/held_out/, the others to
DIR/train/, each a library that `train task.motion_file=...` and `unilab eval --motion ...` read; DIR/split.json
names both. Train on DIR/train, then evaluate the run on its own clips and on the held-out ones:

    unilab eval RUN --suite nominal                            # the training clips
    unilab eval RUN --suite nominal --motion DIR/held_out      # clips the policy never saw

Every clip is loaded first (the rate and bodies of a library must agree); bad input exits 2 and writes nothing.
DIR is filled beside itself and renamed into place, so a failure leaves no half-written split.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import sys
from pathlib import Path

from unilab.exit_codes import EXIT_USAGE
from unilab.motion.clip import MotionClipError
from unilab.motion.library import load_motion_library, motion_files

SPLIT_FILE = "split.json"
SPLIT_SCHEMA = "unilab.motion_split/1"


class SplitError(ValueError):
    """Bad input to `unilab motion split`: exit 2, nothing written."""


def choose_held_out(names: list[str], k: int | None, seed: int, named: list[str] | None) -> list[str]:
    """The held-out clip names, in library order: `named` as given (each a clip of the library), else `k` of
    `names` drawn with `seed`. At least one clip stays for training."""
    if named:
        unknown = [n for n in named if n not in names]
        if unknown:
            raise SplitError(f"--clips {','.join(unknown)}: not a clip of the library (its clips: {', '.join(names)})")
        chosen = set(named)
    else:
        if k is None or not 1 <= k < len(names):
            raise SplitError(f"--held-out {k}: give between 1 and {len(names) - 1} clips (the library has "
                             f"{len(names)}, and one at least stays for training)")
        chosen = set(random.Random(seed).sample(names, k))
    if len(chosen) >= len(names):
        raise SplitError(f"--clips: all {len(names)} clips held out; leave one at least for training")
    return [n for n in names if n in chosen]


def split_library(library: Path, out: Path, k: int | None, seed: int = 0, named: list[str] | None = None) -> dict:
    """Write the split (see the module doc) and return what split.json holds. SplitError for bad input."""
    if not library.is_dir():
        raise SplitError(f"{library}: not a directory of clips (a library to split)")
    if out.exists():
        raise SplitError(f"--out {out}: exists; give a new folder (a split never overwrites one)")
    if not out.parent.is_dir():
        raise SplitError(f"--out {out}: {out.parent} is not a directory")
    try:
        files = motion_files(library)
        names = list(load_motion_library(library).names)  # every clip readable, one rate, one set of bodies
    except MotionClipError as exc:
        raise SplitError(str(exc)) from None
    held_out = choose_held_out(names, k, seed, named)
    record = {"schema": SPLIT_SCHEMA, "library": str(library.resolve()), "seed": None if named else seed,
              "held_out": held_out, "train": [n for n in names if n not in held_out]}
    # Beside DIR (one file system: the rename is atomic); mkdir, not mkdtemp's 0700, so DIR gets the umask's mode.
    staging = out.parent / f".{out.name}.{secrets.token_hex(8)}"
    staging.mkdir()
    try:
        for part in ("train", "held_out"):
            (staging / part).mkdir()
        for f in files:
            shutil.copy2(f, staging / ("held_out" if f.stem in held_out else "train") / f.name)
        (staging / SPLIT_FILE).write_text(json.dumps(record, indent=1) + "\n")
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


def add_parser(motsub) -> None:
    p = motsub.add_parser("split", help="split a clip library into train/ and held_out/ libraries for a held-out "
                                        "evaluation (unilab motion split --help)")
    p.add_argument("library", type=Path, help="a directory of clips (.npz)")
    p.add_argument("--held-out", type=int, help="how many clips to hold out, drawn with --seed")
    p.add_argument("--clips", help="the clips to hold out, by name (file stems, comma-separated) instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    p.add_argument("--out", required=True, type=Path, help="a new folder: OUT/train, OUT/held_out, OUT/split.json")
    p.set_defaults(func=main)


def main(args) -> int:
    if (args.held_out is None) == (args.clips is None):
        print("unilab motion split: give --held-out K or --clips NAME,NAME (one of the two)", file=sys.stderr)
        return EXIT_USAGE
    named = [n.strip() for n in args.clips.split(",") if n.strip()] if args.clips is not None else None
    try:
        record = split_library(args.library, args.out, args.held_out, args.seed, named)
    except SplitError as exc:
        print(f"unilab motion split: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {args.out}: {len(record['train'])} clips in train/, {len(record['held_out'])} in held_out/ "
          f"({', '.join(record['held_out'])})")
    print(f"train: train ... task.motion_file={args.out / 'train'}")
    print(f"held-out evaluation: unilab eval RUN --suite nominal --motion {args.out / 'held_out'}")
    return 0
