"""The run directory on files written by hand: the metrics reader and its resume truncation, the lock, finding
an intact checkpoint."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from unilab.rundir.layout import METRICS_FILE, rank_dir
from unilab.rundir.metrics import MetricsError, MetricsWriter, read_metrics


def write_rows(run, *iterations, tail=""):
    run.mkdir(exist_ok=True)
    lines = [json.dumps({"iteration": i, "env_steps": 10 * i, "tag": f"{i}@{n}"}) for n, i in enumerate(iterations)]
    (run / METRICS_FILE).write_text("".join(line + "\n" for line in lines) + tail)


def test_rows_in_file_order_or_latest_per_iteration(tmp_path):
    assert read_metrics(tmp_path / "nothing_yet") == []
    write_rows(tmp_path, 0, 1, 2, 1, 2)  # iterations 1 and 2 logged again
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1, 2, 1, 2]
    rows = read_metrics(tmp_path, latest_per_iteration=True)
    assert [r["tag"] for r in rows] == ["0@0", "1@3", "2@4"]


def test_a_torn_last_line_is_an_error_unless_tolerated(tmp_path):
    write_rows(tmp_path, 0, 1, tail='{"iteration": 2, "env_st')
    with pytest.raises(MetricsError, match=f"{METRICS_FILE}:3: not a metrics row"):
        read_metrics(tmp_path)
    assert [r["iteration"] for r in read_metrics(tmp_path, torn_tail_ok=True)] == [0, 1]
    (tmp_path / METRICS_FILE).write_text('{"iteration": 0}\nnot json\n{"iteration": 2}\n')
    with pytest.raises(MetricsError, match=":2: not a metrics row"):  # only the last line may be torn
        read_metrics(tmp_path, torn_tail_ok=True)


def test_a_resumed_writer_drops_the_rows_it_redoes(tmp_path):
    write_rows(tmp_path, 0, 1, 2, 3)
    kept = (tmp_path / METRICS_FILE).read_text().splitlines()[:2]
    writer = MetricsWriter(tmp_path, start_iteration=2, tensorboard=False, console_every_s=1e9)
    writer.write(2, 20, {}, max_iterations=3)
    writer.close()
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert lines[:2] == kept  # untouched, byte for byte
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1, 2]


def test_rank_dirs(tmp_path):
    assert rank_dir(tmp_path, 0) == tmp_path and rank_dir(tmp_path, 2) == tmp_path / "rank_2"


def test_tracking_metrics_are_logged_against_env_steps_too(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = MetricsWriter(tmp_path, tensorboard=True, console_every_s=1e9)
    for it in range(3):
        writer.write(it, 4096 * (it + 1), {"metrics/lin_vel_error": 0.5 - 0.1 * it, "episode_length": 10.0 * it},
                     max_iterations=3)
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard" / "by_env_steps")).Reload()
    lin = acc.Scalars("metrics/lin_vel_error")
    assert [e.step for e in lin] == [4096, 8192, 12288]
    assert [round(e.value, 3) for e in lin] == [0.5, 0.4, 0.3]
    assert [e.step for e in acc.Scalars("episode/length")] == [4096, 8192, 12288]
    by_iteration = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert [e.step for e in by_iteration.Scalars("metrics/lin_vel_error")] == [0, 1, 2]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_evidence_files_follow_the_umask(tmp_path, umask):
    """run_config.json, runtime_manifest.json, run_summary.json are written atomically (mkstemp, 0600):
    they take the umask's mode like metrics and checkpoints, so another user can read them."""
    import os
    import stat

    from unilab.atomic import write_json_atomic
    from unilab.rundir.summary import RunSummary

    old = os.umask(umask)
    try:
        paths = [write_json_atomic(tmp_path / "run_config.json", {"a": 1}),
                 RunSummary(status="completed", wall_s=1.0).write(tmp_path)]
        (tmp_path / "metrics.jsonl").write_text("")
    finally:
        os.umask(old)
    want = stat.S_IMODE((tmp_path / "metrics.jsonl").stat().st_mode)
    assert want == 0o666 & ~umask
    assert [stat.S_IMODE(p.stat().st_mode) for p in paths] == [want, want]
    assert os.umask(old) == old  # the umask is left as it was


@pytest.mark.parametrize("proc", ["/proc", "a fake /proc", "no /proc"])
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o027])
def test_the_umask_is_read_without_being_changed(tmp_path, monkeypatch, proc, umask):
    """Changing the umask to read it would give a file another thread creates meanwhile the wrong mode: it is
    read from /proc/self/status, else from a probe file's mode; the process umask never changes on the way."""
    import unilab.atomic as atomic

    expected = umask
    if proc == "a fake /proc":  # what it says is what counts (here unlike the real umask, to tell them apart)
        status, expected = tmp_path / "status", 0o007
        status.write_text(f"Name:\tpython\nUmask:\t{expected:04o}\nState:\tR (running)\n")
        monkeypatch.setattr(atomic, "PROC_STATUS", str(status))
    elif proc == "no /proc":
        monkeypatch.setattr(atomic, "PROC_STATUS", str(tmp_path / "absent" / "status"))
    old = os.umask(umask)
    real_umask, seen = os.umask, []

    def umask_seen_by_other_threads(mask):  # every value the process umask takes while the file is written
        seen.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(os, "umask", umask_seen_by_other_threads)
    try:
        written = atomic.write_json_atomic(tmp_path / "run_config.json", {"a": 1})
    finally:
        monkeypatch.setattr(os, "umask", real_umask)
        os.umask(old)
    assert all(mask == umask for mask in seen), [oct(m) for m in seen]
    assert (written.stat().st_mode & 0o777) == 0o666 & ~expected
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "status") == ["run_config.json"]


def test_the_console_line_of_a_failed_run_names_the_exception_and_its_fix(tmp_path):
    from unilab.rundir.summary import RunSummary

    tb = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
          "unilab.sim.mjwarp_backend.SimOverflowError: MJWarp capacity overflow; raise sim.nconmax / sim.njmax\n")
    failed = RunSummary(status="failed", cause="the collector[0] raised an exception", failed_role="collector[0]",
                        traceback=tb, wall_s=1.0)
    lines = failed.console(tmp_path).splitlines()
    assert lines == [f"unilab: run failed: the collector[0] raised an exception -> {tmp_path}",
                     "  unilab.sim.mjwarp_backend.SimOverflowError: MJWarp capacity overflow; raise sim.nconmax / "
                     "sim.njmax",
                     f"  the full traceback: {tmp_path / 'run_summary.json'}"]
    assert failed.console(tmp_path, written=False).splitlines() == lines[:2]
    done = RunSummary(status="completed", wall_s=1.0)
    assert done.console(tmp_path) == f"unilab: run completed -> {tmp_path}"


def test_a_resumed_writer_drops_a_torn_last_line(tmp_path):
    """A run killed mid-write leaves half a row: the resume drops it instead of refusing (or appending to it)."""
    write_rows(tmp_path, 0, 1, 2, tail='{"iteration": 3, "env_st')
    writer = MetricsWriter(tmp_path, start_iteration=2, tensorboard=False, console_every_s=1e9)
    writer.write(2, 20, {}, max_iterations=3)
    writer.close()
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1, 2]


def test_the_run_dir_lock_is_exclusive_and_names_its_holder(tmp_path):
    import os

    from unilab.rundir.layout import LOCK_FILE
    from unilab.rundir.lock import RunDirLock, RunDirLocked

    held = RunDirLock(tmp_path)
    with pytest.raises(RunDirLocked, match=f"in use by pid {os.getpid()}"):
        RunDirLock(tmp_path)
    held.release()
    again = RunDirLock(tmp_path)  # released: free again (the kernel also drops it when the holder exits)
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    again.release()


def save_fake(run, iteration):
    from unilab.rundir.checkpoint import save_checkpoint

    return save_checkpoint(run, iteration, 16 * iteration, {"w": iteration})


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    from unilab.rundir.checkpoint import prune_checkpoints

    def save(iteration, keep):
        prune_checkpoints(tmp_path, keep, save_fake(tmp_path, iteration))

    def kept():
        return sorted(int(p.stem[5:]) for p in (tmp_path / "checkpoints").glob("iter_*.pt"))

    for iteration in range(10, 80, 10):
        save(iteration, 3)
    assert kept() == [50, 60, 70] and (tmp_path / "checkpoints" / "latest.pt").resolve().name == "iter_0000070.pt"
    (tmp_path / "checkpoints" / "notes.txt").write_text("a file of the user's")
    # Resumed from iteration 50: the later files stay until the resumed run saves over them; none is taken for
    # one of the newest three while it is ahead of latest.pt.
    save(60, 3)
    assert kept() == [50, 60, 70]
    save(80, 3)
    assert kept() == [60, 70, 80] and (tmp_path / "checkpoints" / "notes.txt").exists()
    save(90, 1)
    assert kept() == [90]
    save(100, None)  # null: every one
    save(110, None)
    assert kept() == [90, 100, 110]


def test_the_learner_prunes_with_training_keep_checkpoints(tmp_path):
    """LearnerLoop.save hands training.outputs.keep_checkpoints to the pruning (the loop around it faked)."""
    from types import SimpleNamespace

    from unilab.runtime.learner import LearnerLoop

    for iteration in (1, 2, 3):
        training = SimpleNamespace(outputs=SimpleNamespace(keep_checkpoints=2))
        loop = SimpleNamespace(spec=SimpleNamespace(rank=0, run_dir=tmp_path, training=training),
                               device=SimpleNamespace(type="cpu"), iteration=iteration, env_steps=8 * iteration,
                               learner=SimpleNamespace(state_dict=lambda: {"w": 1}), weights_record={})
        LearnerLoop.save(loop)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("iter_*.pt")) == ["iter_0000002.pt", "iter_0000003.pt"]


def test_a_corrupt_latest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path):
    from unilab.rundir.checkpoint import find_intact_checkpoint

    save_fake(tmp_path, 10)
    save_fake(tmp_path, 20)
    found = find_intact_checkpoint(str(tmp_path))
    assert found.iteration == 20 and found.path.name == "iter_0000020.pt" and not found.notes
    latest = tmp_path / "checkpoints" / "iter_0000020.pt"
    latest.write_bytes(latest.read_bytes()[:100])  # torn
    found = find_intact_checkpoint(str(tmp_path))
    assert found.iteration == 10 and found.path.name == "iter_0000010.pt"
    (note,) = found.notes
    assert "iter_0000020.pt: unreadable checkpoint" in note and "resuming from iter_0000010.pt instead" in note
    with pytest.raises(ValueError, match="unreadable checkpoint"):  # a file named explicitly does not fall back
        find_intact_checkpoint(str(latest))
    (tmp_path / "checkpoints" / "iter_0000010.pt").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no intact checkpoint"):
        find_intact_checkpoint(str(tmp_path))


def _failing_save(error: BaseException):
    """torch.save as a full disk fails it: part of the file written, then the error."""

    def save(obj, f):
        out = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f  # noqa: SIM115 (left open, as at a crash)
        out.write(b"PK\x03\x04" + b"\0" * 4096)
        out.flush()
        raise error

    return save


@pytest.mark.parametrize("error, fs_error", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
])
def test_a_checkpoint_save_without_room_names_the_file_system_and_leaves_no_partial_file(
        tmp_path, monkeypatch, error, fs_error):
    import torch

    from unilab.rundir.checkpoint import CheckpointNotWritten, find_intact_checkpoint, mount_point

    save_fake(tmp_path, 10)
    before = (tmp_path / "checkpoints" / "iter_0000010.pt").read_bytes()
    monkeypatch.setattr(torch, "save", _failing_save(error))
    with pytest.raises(CheckpointNotWritten) as info:
        save_fake(tmp_path, 20)
    assert str(info.value) == f"{fs_error} on {mount_point(tmp_path)}: checkpoint iter_0000020 not written"
    assert info.value.errno == error.errno
    # no partial file holds the room the summary needs; the last good checkpoint is as it was
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_0000010.pt", "latest.pt"]
    assert (tmp_path / "checkpoints" / "iter_0000010.pt").read_bytes() == before
    monkeypatch.undo()
    assert find_intact_checkpoint(str(tmp_path)).iteration == 10


def test_torchs_own_write_error_is_traced_to_the_full_disk(tmp_path, monkeypatch):
    """torch's zip writer raises its RuntimeError ("unexpected pos") while the OSError under it says why."""
    import torch

    from unilab.rundir.checkpoint import CheckpointNotWritten

    def save(obj, f):
        try:
            (open(f, "wb") if isinstance(f, (str, os.PathLike)) else f).write(b"PK")  # noqa: SIM115
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(CheckpointNotWritten, match="no space left on device on .*: checkpoint iter_0000005 not"):
        save_fake(tmp_path, 5)
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_a_failed_checkpoint_save_for_another_reason_keeps_its_error_and_leaves_no_partial_file(
        tmp_path, monkeypatch):
    import torch

    save_fake(tmp_path, 10)
    monkeypatch.setattr(torch, "save", _failing_save(RuntimeError("cannot pickle 'generator' object")))
    with pytest.raises(RuntimeError, match="cannot pickle"):
        save_fake(tmp_path, 20)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_0000010.pt", "latest.pt"]


def test_the_mount_point_of_a_path(tmp_path):
    from unilab.rundir.checkpoint import mount_point

    assert mount_point(Path("/")) == Path("/")
    found = mount_point(tmp_path)
    assert os.path.ismount(found) and tmp_path.resolve().is_relative_to(found)


def test_the_resume_refill_is_capped_by_what_the_remaining_iterations_collect():
    from unilab.rundir.resume import refill_target

    assert refill_target(100_000, 1.0, collectable=20 * 16) == 160  # cpu_smoke resumed for 20 more iterations
    assert refill_target(100_000, 0.25, collectable=10**9) == 25_000
    assert refill_target(100_000, 0.0, collectable=10**9) == 0


def test_a_checkpoint_of_other_observation_sizes_is_refused_not_padded():
    from unilab.rundir.resume import check_dims

    state = {"dims": {"obs_dim": 45, "critic_obs_dim": 48, "action_dim": 12}}
    check_dims(state, {"obs_dim": 45, "critic_obs_dim": 48, "action_dim": 12}, "iter_0000010.pt")
    with pytest.raises(ValueError, match="obs_dim: checkpoint 45, now 47"):
        check_dims(state, {"obs_dim": 47, "critic_obs_dim": 48, "action_dim": 12}, "iter_0000010.pt")


def test_a_checkpoint_records_what_shaped_it_and_restores_only_into_those_sizes(tmp_path):
    """weights_record is what every checkpoint carries for a resume's checks; restore refuses other sizes before
    it loads anything."""
    from types import SimpleNamespace

    from unilab.rundir.checkpoint import save_checkpoint
    from unilab.rundir.resume import ResumePoint, restore, weights_record

    dims = SimpleNamespace(num_envs=16, ticks_per_slot=1, obs_dim=45, critic_obs_dim=48, action_dim=12)
    config = {"algo": {"name": "fastsac", "critic_hidden_dim": 64, "lr": 3e-4}, "task": {"name": "g1_walk_flat"}}
    record = weights_record(config, dims)
    assert record == {"config": {"algo.name": "fastsac", "algo.critic_hidden_dim": 64, "task.name": "g1_walk_flat"},
                      "dims": {"obs_dim": 45, "critic_obs_dim": 48, "action_dim": 12}}
    point = ResumePoint(str(save_checkpoint(tmp_path, 10, 160, {"w": 1}, meta=record)), 10)
    loaded: list[dict] = []
    learner = SimpleNamespace(load_state_dict=loaded.append)
    with pytest.raises(ValueError, match="obs_dim: checkpoint 45, now 47"):
        restore(learner, point, "cpu", {**record["dims"], "obs_dim": 47})
    assert loaded == []
    assert restore(learner, point, "cpu", record["dims"]) == (10, 160) and loaded == [{"w": 1}]


def test_the_summary_holds_the_mean_env_steps_per_s(tmp_path):
    """run_summary.json: the mean over the iterations that have a rate (the last has none), the latest row of a
    redone iteration counting."""
    from types import SimpleNamespace

    from unilab.launcher.launch import _summary

    rows = [{"iteration": 0, "env_steps_per_s": None}, {"iteration": 1, "env_steps_per_s": 1000.0},
            {"iteration": 2, "env_steps_per_s": 5000.0}, {"iteration": 2, "env_steps_per_s": 2000.0},
            {"iteration": 3, "env_steps_per_s": None}]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 4, "env')
    supervisor = SimpleNamespace(cause=None, interrupted_by=None, learner_summary={"iterations": 4}, status="completed",
                                 failed_role=None, traceback=None, procs={}, notes=[], fix=[])
    summary = _summary(supervisor, 0.0, tmp_path)
    assert summary.mean_env_steps_per_s == 1500.0
    summary.write(tmp_path)
    assert json.loads((tmp_path / "run_summary.json").read_text())["mean_env_steps_per_s"] == 1500.0
    (tmp_path / METRICS_FILE).unlink()
    assert _summary(supervisor, 0.0, tmp_path).mean_env_steps_per_s is None


# ---------------------------------------------------------------- the tools on what is not a run directory


def _tool(capsys, *args) -> tuple[int, str]:
    from unilab.cli.tools import main as tools_main

    code = tools_main([str(a) for a in args])
    return code, capsys.readouterr().err


def _bare_run(path: Path) -> Path:
    """A run directory as train leaves it before its first checkpoint."""
    path.mkdir(parents=True)
    (path / "run_config.json").write_text(json.dumps({"training": {"run": {"device": "cpu", "seed": 1}},
                                                      "task": {"name": "g1_walk_flat"}, "algo": {"name": "fastsac"}}))
    return path


@pytest.mark.parametrize("content", [b"PK\x03\x04\x80\x81binary", b'{"iteration": 3}\n'])
def test_play_of_a_file_says_it_is_not_a_run_directory(tmp_path, capsys, content):
    given = tmp_path / "policy.pt"
    given.write_bytes(content)
    code, err = _tool(capsys, "play", given)
    assert code == 2
    assert err == (f"unilab play: {given}: not a run directory; pass the run directory or --checkpoint "
                   "(unilab play RUN --checkpoint FILE)\n")


def test_play_of_a_checkpoint_file_names_the_command_that_plays_it(tmp_path, capsys):
    run = _bare_run(tmp_path / "runs" / "r")
    (run / "checkpoints").mkdir()
    ckpt = run / "checkpoints" / "iter_0000010.pt"
    ckpt.write_bytes(b"PK\x03\x04")
    code, err = _tool(capsys, "play", ckpt)
    assert code == 2 and f"(unilab play {run} --checkpoint {ckpt})" in err, err


def test_play_of_a_run_without_checkpoints_speaks_of_plays_options(tmp_path, capsys):
    run = _bare_run(tmp_path / "r")
    code, err = _tool(capsys, "play", run)
    assert code == 2 and "training.run.resume" not in err, err
    assert err.startswith(f"unilab play: {run}: no checkpoint in {run / 'checkpoints'} yet")
    assert "--checkpoint FILE" in err and "--agent zero or random" in err
    code, err = _tool(capsys, "play", run, "--checkpoint", tmp_path / "nope.pt")
    assert code == 2 and err == f"unilab play: --checkpoint {tmp_path / 'nope.pt'}: no such file\n"
    assert sorted(p.name for p in run.iterdir()) == ["run_config.json"]  # no report written


def test_export_of_a_lone_file_names_the_file_not_the_folder_above_its_folder(tmp_path, capsys):
    stray = tmp_path / "downloads" / "policy.pt"
    stray.parent.mkdir()
    stray.write_bytes(b"PK\x03\x04")
    code, err = _tool(capsys, "export", stray)
    assert code == 2, err
    assert err.startswith(f"unilab export: {stray}: not a run directory, nor a checkpoint in one's checkpoints/")
    assert f"(unilab export RUN --checkpoint {stray})" in err
    assert f"{tmp_path} " not in err and f"{tmp_path}/run_config.json" not in err


def test_config_diff_of_a_binary_file_names_it(tmp_path, capsys):
    run = _bare_run(tmp_path / "r")
    binary = tmp_path / "iter_0000010.pt"
    binary.write_bytes(b"PK\x03\x04\x80\x81\xfe")
    code, err = _tool(capsys, "config", "diff", binary, run)
    assert code == 2
    assert err == f"unilab config diff: {binary}: not a run_config.json (a binary file, not JSON text)\n"
