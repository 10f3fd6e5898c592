"""`unilab motion split`: a library split into train/ and held_out/ libraries, seeded, refusing bad input before
anything is written."""

from __future__ import annotations

import json

import pytest
from test_motion_library import random_clip

from unilab.motion import save_motion_clip
from unilab.motion.library import load_motion_library
from unilab.motion.split import SPLIT_SCHEMA, SplitError, choose_held_out

NAMES = ["a_walk", "b_jog", "c_turn", "d_kick", "e_squat"]


def _split(*args) -> int:
    from unilab.cli.tools import main

    return main(["motion", "split", *map(str, args)])


@pytest.fixture
def library(tmp_path):
    d = tmp_path / "clips"
    for i, name in enumerate(NAMES):
        save_motion_clip(random_clip(20 + 5 * i, seed=i), d / f"{name}.npz")
    (d / "README.txt").write_text("not a clip")
    return d


def test_a_split_holds_out_k_clips_and_keeps_the_rest_for_training(library, tmp_path, capsys):
    out = tmp_path / "split"
    assert _split(library, "--held-out", 2, "--seed", 3, "--out", out) == 0
    record = json.loads((out / "split.json").read_text())
    assert record["schema"] == SPLIT_SCHEMA and record["seed"] == 3 and len(record["held_out"]) == 2
    assert sorted(record["train"] + record["held_out"]) == NAMES and not set(record["train"]) & set(record["held_out"])
    for part in ("train", "held_out"):
        lib = load_motion_library(out / part)  # each part is a library train and eval read
        assert list(lib.names) == record[part]
    original = load_motion_library(library)
    held = load_motion_library(out / "held_out")
    for name, clip in zip(held.names, held.clips):  # the clips themselves, unchanged
        assert (clip.joint_pos == original.clips[original.names.index(name)].joint_pos).all()
    said = capsys.readouterr().out
    assert f"--motion {out / 'held_out'}" in said and f"task.motion_file={out / 'train'}" in said


def test_the_draw_follows_the_seed_and_named_clips_are_taken_as_named():
    draws = {tuple(choose_held_out(NAMES, 2, seed, None)) for seed in range(20)}
    assert len(draws) > 3  # seeds draw different clips ...
    assert choose_held_out(NAMES, 2, 7, None) == choose_held_out(NAMES, 2, 7, None)  # ... the same seed the same
    assert choose_held_out(NAMES, None, 0, ["d_kick", "a_walk"]) == ["a_walk", "d_kick"]  # library order


def test_bad_input_exits_2_and_writes_nothing(library, tmp_path, capsys):
    def refused(*args, says):
        before = sorted(p.name for p in tmp_path.iterdir())
        assert _split(*args) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no split, no staging folder left behind

    out = tmp_path / "split"
    refused(library, "--held-out", 5, "--out", out, says="between 1 and 4 clips")
    refused(library, "--held-out", 0, "--out", out, says="between 1 and 4 clips")
    refused(library, "--clips", "a_walk,z_fly", "--out", out, says="z_fly: not a clip of the library")
    refused(library, "--clips", ",".join(NAMES), "--out", out, says="leave one at least for training")
    refused(library, "--out", out, says="give --held-out K or --clips")
    refused(library, "--held-out", 1, "--clips", "a_walk", "--out", out, says="one of the two")
    refused(library / "a_walk.npz", "--held-out", 1, "--out", out, says="not a directory of clips")
    refused(library, "--held-out", 1, "--out", tmp_path / "no" / "split", says="is not a directory")
    (tmp_path / "taken").mkdir()
    refused(library, "--held-out", 1, "--out", tmp_path / "taken", says="exists; give a new folder")
    save_motion_clip(random_clip(20, seed=9, fps=30.0), library / "f_fast.npz")  # another rate: not one library
    refused(library, "--held-out", 1, "--out", out, says="differs from 50.0")


def test_a_failed_copy_leaves_no_split(library, tmp_path, monkeypatch):
    import shutil

    from unilab.motion import split

    calls = []

    def copy_then_fail(src, dst):
        calls.append(src)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return shutil.copyfile(src, dst)

    monkeypatch.setattr(split.shutil, "copy2", copy_then_fail)
    with pytest.raises(OSError):
        split.split_library(library, tmp_path / "split", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clips"]
    with pytest.raises(SplitError):
        split.split_library(library, tmp_path / "split", 9)
