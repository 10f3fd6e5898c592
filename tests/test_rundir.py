"""The run directory on files written by hand: the metrics reader and its resume truncation, the lock, finding
an intact checkpoint."""

from __future__ import annotations

import json

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
    """LearnerLoop.save hands training.keep_checkpoints to the pruning (the loop around it faked)."""
    from types import SimpleNamespace

    from unilab.runtime.learner import LearnerLoop

    for iteration in (1, 2, 3):
        training = SimpleNamespace(keep_checkpoints=2)
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
