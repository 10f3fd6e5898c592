"""The rank-local runtime end to end on the CPU: two real processes, a real (tiny) MJWarp env."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from unilab.rundir.metrics import METRIC_KEYS, read_metrics

pytestmark = pytest.mark.integration

# Play (training.outputs.no_play=false in cpu_smoke) is a fresh process that builds its worlds again: tests that do not
# test it turn it off; those that do say training.outputs.no_play=false (a later override wins).
SMOKE = ["+preset=cpu_smoke", "task.num_envs=16", "training.outputs.logger=[]", "training.outputs.no_play=true"]


def train(log_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={log_dir}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def only_run(log_dir: Path) -> Path:
    (run,) = [p for p in log_dir.iterdir() if p.is_dir()]
    return run


def summary(run: Path) -> dict:
    return json.loads((run / "run_summary.json").read_text())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("e2e")
    done = train(log_dir, "--algo", "fastsac", "--task", "g1_walk_flat", "algo.max_iterations=20",
                 "algo.save_interval=10", "training.outputs.logger=[tensorboard]",
                 "training.outputs.no_play=false", "training.outputs.play_envs=4", "training.outputs.play_steps=12")
    assert done.returncode == 0, done.stderr[-4000:]
    return log_dir, only_run(log_dir), done


def test_fastsac_walk_flat_trains_end_to_end(finished_run):
    _, run, done = finished_run
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == list(range(20))
    for key in METRIC_KEYS:
        assert key in rows[-1]
    trained = [r for r in rows if r["critic_loss"] is not None]
    assert trained, "the learner never updated"
    for row in rows[4:-1]:  # collector timings arrive two chunks late, the backend split after the 2nd chunk
        for key in ("iteration_ms", "env_steps_per_s", "learner_train_ms", "collector_env_step_ms",
                    "collector_backend_step_ms", "collector_replay_write_ms", "collector_wait_for_action_ms"):
            assert row[key] is not None and math.isfinite(row[key]) and row[key] >= 0, (key, row)
    assert rows[-1]["schema_version"] == 1 and rows[-1]["replay_size"] == 20 * 16
    s = summary(run)
    assert s["status"] == "completed" and s["iterations"] == 20 and s["exit_codes"] == {"learner": 0, "collector": 0}
    manifest = json.loads((run / "runtime_manifest.json").read_text())
    (rank,) = manifest["ranks"]
    assert rank["learner_pid"] and rank["collector_pid"] and rank["learner_pid"] != rank["collector_pid"]
    assert manifest["cuda_process_sharing"]["effective"] is None
    assert (run / "run_config.json").exists()
    assert (run / "checkpoints" / "latest.pt").exists() and (run / "checkpoints" / "iter_0000010.pt").exists()
    assert list((run / "tensorboard").glob("events.*"))
    assert "steps/s" in done.stderr  # the console progress line
    assert not pid_alive(rank["learner_pid"]) and not pid_alive(rank["collector_pid"])
    assert_released_each_other(run)


def assert_released_each_other(run: Path) -> None:
    """Both children waited for their own GPU work and told the other before they exited (no release timed out)."""
    for role in ("learner", "collector"):
        log = (run / "logs" / f"{role}.stderr").read_text()
        assert "did not release" not in log, log[-2000:]


def test_the_console_names_each_phase_in_order(finished_run):
    _, run, done = finished_run
    lines = done.stderr.splitlines()

    def at(needle: str) -> int:
        return next(i for i, line in enumerate(lines) if needle in line)

    # The learner builds while the collector compiles (the buffers are shared once the env is sized).
    learner = [at("collector: building the worlds (16 envs of g1_walk_flat)"), at("collector: sized (observations"),
               at("learner: built in"), at("training: 20 iterations of 16 envs")]
    assert learner == sorted(learner), done.stderr
    # A cold build shows where it is: each stage of the worlds' build with its seconds.
    build = [at("collector: building the worlds"), at("collector: model put on cpu (16 worlds) in"),
             at("collector: compiling the physics kernels (the first time only: cached in"),
             at("collector: physics kernels ready ("), at("collector: initial state and first reset in"),
             at("collector: worlds built in")]
    assert build == sorted(build), done.stderr
    order = [at("collector: sized (observations"), at("collector: worlds built in"), at("filling the replay"),
             at("first update: capturing the update cycle"), at("unilab: [it 20/20]"), at("unilab: run completed"),
             at("playing the trained policy"), at("unilab: play:")]
    assert order == sorted(order), done.stderr
    last = lines[at("unilab: [it 20/20]")]
    assert "elapsed, ETA" in last and "env steps" in last and "env-steps/s" in last
    assert "episodes)" in last or "(none yet)" in last
    # Warp's no-driver warning: a CPU process needs no driver, and neither play nor the children print it
    assert "Could not find or load the NVIDIA CUDA driver" not in done.stderr
    assert "Could not find" not in (run / "logs" / "collector.stderr").read_text()
    # A CPU run ends by saying what it was and the commands that come next, after play.
    end = lines[at("tiny CPU smoke run"):]
    assert at("tiny CPU smoke run") > at("unilab: play:") and "not expected to walk" in end[0]
    assert f"unilab play {run} --video walk.mp4" in end[1] and f"unilab eval {run}" in end[2]


def test_play_after_a_completed_run(finished_run):
    """training.outputs.no_play=false: the trained policy plays from a fresh reset; play.json and the summary say how."""
    from unilab.cli.tools import main as tools_main

    _, run, done = finished_run
    report = json.loads((run / "play.json").read_text())
    assert report == summary(run)["play"]
    assert (report["num_envs"], report["steps"], report["iteration"]) == (4, 12, 20)
    assert 0 < report["mean_length"] <= 12 and math.isfinite(report["mean_return"])
    assert 0.0 <= report["terminated_fraction"] <= 1.0 and "unilab: play: 4 envs x 12 steps" in done.stderr
    # the same from the tool, on any run directory and checkpoint: a new report, never over play.json
    end_of_run = (run / "play.json").read_text()
    assert tools_main(["play", str(run), "--envs", "2", "--steps", "3",
                       "--checkpoint", str(run / "checkpoints" / "iter_0000010.pt")]) == 0
    assert (run / "play.json").read_text() == end_of_run
    (written,) = run.glob("play_*.json")
    report = json.loads(written.read_text())
    assert (report["num_envs"], report["steps"], report["iteration"]) == (2, 3, 10)
    assert report["mean_length"] <= 3
    assert tools_main(["play", str(run.parent / "no_such_run")]) == 2


def test_play_tool_out_and_bad_input(finished_run, tmp_path, capsys):
    """`unilab play`: --out takes the report; bad numbers, a directory --out and a corrupt checkpoint are
    usage errors (exit 2, no traceback, no temporary file left)."""
    from unilab.cli.tools import main as tools_main

    _, run, _ = finished_run
    out = tmp_path / "report.json"
    assert tools_main(["play", str(run), "--envs", "2", "--steps", "2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["steps"] == 2
    capsys.readouterr()
    good = (run / "checkpoints" / "iter_0000010.pt").read_bytes()
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "truncated.pt").write_bytes(good[: len(good) // 2])
    cases = {
        ("--steps", "-3"): "--steps -3", ("--envs", "0"): "--envs 0",
        ("--out", str(tmp_path)): "is a directory",
        ("--out", str(tmp_path / "no_dir" / "r.json")): "is not a directory",
        ("--checkpoint", str(tmp_path / "garbage.pt")): "not a readable checkpoint",
        ("--checkpoint", str(tmp_path / "truncated.pt")): "not a readable checkpoint",
    }
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, needle in cases.items():
        assert tools_main(["play", str(run), "--envs", "2", "--steps", "2", *args]) == 2, args
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_resume_continues_iterations_and_logs(finished_run):
    log_dir, run, _ = finished_run
    done = train(log_dir, f"training.run.resume={run}", "algo.max_iterations=40")
    assert done.returncode == 0, done.stderr[-4000:]
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == list(range(40))
    assert summary(run)["iterations"] == 40
    # The refill is capped at half of what 20 iterations collect (not cpu_smoke's 100000-transition replay):
    # the resumed run trains again. The update samples the replay before the phase's chunk is ingested
    # (training.loop.update_before_ingest), so the first update follows the chunk that completes the refill.
    assert [r["critic_loss"] is not None for r in rows[20:]] == [False] * 10 + [True] * 10
    assert "unilab: resume: replay refilled 160/160 (100 %); updates start" in done.stderr
    assert (run / "segments" / "0" / "run_summary.json").exists()
    assert "rew/track_lin_vel_xy" in rows[-1]  # the task's reward terms are forwarded per iteration
    # From an earlier checkpoint: the rows logged after it are replaced, never duplicated.
    done = train(log_dir, f"training.run.resume={run}/checkpoints/iter_0000010.pt", "algo.max_iterations=15")
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["iteration"] for r in read_metrics(run)] == list(range(15))


def test_collector_exception_stops_the_learner(tmp_path):
    # A contact capacity of 1 overflows at once; sim.overflow=error makes the collector raise. A learner left
    # waiting would keep the run going past train()'s timeout.
    done = train(tmp_path, "sim.nconmax=1", "algo.max_iterations=1000")
    assert done.returncode == 1, done.stderr[-4000:]
    s = summary(only_run(tmp_path))
    assert s["status"] == "failed" and s["failed_role"] == "collector"
    assert "SimOverflowError" in s["traceback"]
    # the console names the cause: the exception's last line, with its fix, under the run's status line
    lines = done.stderr.strip().splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("unilab: run failed:")), None)
    assert at is not None and at == len(lines) - 3, done.stderr[-2000:]  # the status line and the cause's two
    last = lines[at:]
    assert last[0].startswith("unilab: run failed: the collector raised an exception"), done.stderr[-2000:]
    assert last[1].strip().startswith("unilab.sim.mjwarp_backend.SimOverflowError: MJWarp capacity overflow")
    assert "raise sim.nconmax / sim.njmax" in last[1] and last[2].strip().endswith("run_summary.json")
    # No "full log" line: on the CPU the collector's stderr stays empty (no Warp CUDA-driver warning there).
    assert "Traceback" not in done.stderr  # the traceback is in run_summary.json, not on the console


def test_a_run_trains_with_a_tmpdir_too_long_for_unix_sockets(tmp_path, short_tmp):
    """The collector passes its CPU buffers to the learner over a Unix socket in the temporary directory; with a
    TMPDIR too long for one (`AF_UNIX path too long`) the run once waited until its timeout. The sockets now go
    under a short directory, and nothing is left in TMPDIR."""
    from unilab.processes import SOCKET_PATH_MAX

    long_tmp = short_tmp / ("t" * (SOCKET_PATH_MAX - len(str(short_tmp))))
    long_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(long_tmp))
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={tmp_path}", "algo.max_iterations=2"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr[-4000:]
    assert summary(only_run(tmp_path))["status"] == "completed"
    assert list(long_tmp.iterdir()) == []


def test_learner_exception_ends_the_collector(tmp_path):
    """The learner raises (its NaN guard trips on a critic whose weights are NaN, resumed from a checkpoint that
    holds them): the run fails naming the learner, and the collector ends too."""
    import torch

    first = train(tmp_path, "algo.max_iterations=4", "algo.save_interval=4")
    assert first.returncode == 0, first.stderr[-4000:]
    run = only_run(tmp_path)
    path = run / "checkpoints" / "iter_0000004.pt"
    state = torch.load(path, weights_only=True)
    for name, value in state["learner"]["critic"].items():
        if value.is_floating_point():
            value.fill_(float("nan"))
    torch.save(state, path)
    done = train(tmp_path, f"training.run.resume={run}", "algo.max_iterations=200", "training.loop.nan_guard.enabled=true")
    assert done.returncode == 1, done.stderr[-4000:]
    s = summary(run)
    assert s["status"] == "failed" and s["failed_role"] == "learner", s
    assert "nan guard" in s["traceback"]
    rank = json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]
    assert not pid_alive(rank["collector_pid"])


def _start(log_dir: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={log_dir}",
           "algo.max_iterations=100000", *args]
    # A session of its own, so a test can signal the whole process group.
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_metrics(log_dir: Path, proc: subprocess.Popen, rows: int = 3, timeout: float = 300) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        runs = [p for p in log_dir.iterdir() if p.is_dir()] if log_dir.exists() else []
        if runs and len(read_metrics(runs[0])) >= rows:
            return runs[0]
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("no metrics in time")


@pytest.mark.parametrize("sig, group", [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)])
def test_signal_stops_both_saves_and_marks_interrupted(tmp_path, sig, group):
    """Signal the launcher alone, or its whole process group (as timeout(1) and Slurm do)."""
    proc = _start(tmp_path)
    try:
        run = _wait_for_metrics(tmp_path, proc)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-4000:]
    s = summary(run)
    assert s["status"] == "interrupted" and sig.name in s["cause"]
    assert s["iterations"] and s["iterations"] >= 3  # the learner saved and reported where it stopped
    assert_stopped_and_saved(run, s)


def assert_stopped_and_saved(run: Path, s: dict) -> None:
    """A run stopped on a signal kept what it learned and left nothing running: its checkpoint, its metric rows up
    to where it stopped (written before the checkpoint, so a resume from it leaves no gap), both children gone."""
    assert (run / "checkpoints" / "latest.pt").exists()
    assert [r["iteration"] for r in read_metrics(run)] == list(range(s["iterations"]))
    rank = json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]
    assert not pid_alive(rank["learner_pid"]) and not pid_alive(rank["collector_pid"])
    assert_released_each_other(run)


def test_a_failed_stop_time_checkpoint_is_recorded(tmp_path):
    proc = _start(tmp_path, "algo.save_interval=100000")
    try:
        run = _wait_for_metrics(tmp_path, proc)
        (run / "checkpoints").write_text("")  # where the checkpoint folder goes: the save fails
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err[-4000:]
    s = summary(run)
    assert s["status"] == "failed", s
    assert s["cause"].startswith("SIGINT received; the stop-time checkpoint") and "FileExistsError" in s["cause"]
    assert "the stop-time checkpoint" in err


def test_children_exit_when_the_launcher_dies(tmp_path):
    proc = _start(tmp_path)
    try:
        run = _wait_for_metrics(tmp_path, proc)
        rank = json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]
        proc.kill()
        proc.wait(timeout=10)
        _gone([rank["learner_pid"], rank["collector_pid"]])
    finally:
        proc.kill()


@pytest.mark.parametrize("victim", ["learner", "collector"])
def test_a_killed_child_ends_the_run(tmp_path, victim):
    """kill -9 of one child: the launcher names it and stops the other. (That the survivor gets DEAD_CHILD_GRACE_S,
    not the grace period of an orderly stop, is checked on the supervisor's own clock in tests/test_console.py.)"""
    proc = _start(tmp_path)
    try:
        run = _wait_for_metrics(tmp_path, proc)
        rank = json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]
        os.kill(rank[f"{victim}_pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err[-4000:]
    s = summary(run)
    assert s["status"] == "failed" and s["failed_role"] == victim
    assert s["cause"] == f"{victim}_died: the {victim} was killed by SIGKILL (exit code -9)", s["cause"]
    assert f"unilab: run failed: {victim}_died" in err and "Traceback" not in err


@pytest.fixture
def mps_on_cpu_children(monkeypatch, mps_env):
    """An MPS run whose children live on this CPU host: the probe is answered as if they were on cuda:0
    (with the fake NVML and daemon), the rest of the launcher runs for real."""
    import unilab.mps.probe as probe_mod
    from fakes import FakeNvml
    from unilab.mps import HostFacts

    real_probe = probe_mod.probe_cuda_process_sharing

    def probe_as_if_cuda(requested, learner_device, collector_device, *, backend, host=None, timeout_s=5.0):
        ev = real_probe(requested, "cuda:0", "cuda:0", backend=backend, timeout_s=timeout_s,
                        host=HostFacts(platform="linux", env=mps_env, nvml=FakeNvml()))
        return ev.model_copy(update={"learner_device": learner_device, "collector_device": collector_device})

    monkeypatch.setattr(probe_mod, "probe_cuda_process_sharing", probe_as_if_cuda)
    for key, value in mps_env.items():
        monkeypatch.setenv(key, value)


def test_mps_attachment_failure_stops_the_run(tmp_path, capsys, mps_on_cpu_children, daemon):
    """The children are not clients of the (fake) daemon: exit 2, both stopped, the process named."""
    from unilab.cli.train import main as train_main

    args = [*SMOKE, f"training.run.log_dir={tmp_path}", "+execution=mps", "training.mps.mps_attach_timeout_s=2"]
    with pytest.raises(SystemExit) as info:
        train_main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "mps_clients_attached" in err and "learner" in err and "collector" in err
    run = only_run(tmp_path)
    s = summary(run)
    assert s["status"] == "failed" and "mps_clients_attached" in s["cause"]
    sharing = json.loads((run / "runtime_manifest.json").read_text())["cuda_process_sharing"]
    assert sharing["effective"] is None and not sharing["clients_verified"]


def test_two_ranks_on_cpu_stay_in_sync(tmp_path):
    """training.run.devices=[0,1] on the CPU: two learner/collector pairs, gradients averaged (gloo)."""
    done = train(tmp_path, "task.num_envs=8", "training.run.devices=[0,1]", "algo.max_iterations=14",
                 "algo.batch_size=64")
    assert done.returncode == 0, done.stderr[-4000:]
    run = only_run(tmp_path)
    manifest = json.loads((run / "runtime_manifest.json").read_text())
    assert manifest["world_size"] == 2
    ranks = manifest["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["learner_pid"] for r in ranks} | {r["collector_pid"] for r in ranks}) == 4
    assert len(read_metrics(run)) == 14 and len(read_metrics(run / "rank_1")) == 14
    s = summary(run)
    assert s["status"] == "completed"
    assert any(r["critic_loss"] is not None for r in read_metrics(run / "rank_1"))
    dp = s["data_parallel"]
    assert dp["world_size"] == 2 and dp["actor_params_equal"] is True, dp
    # each rank's console lines carry its rank; each child has its own log
    for rank in (0, 1):
        assert f"unilab: [rank {rank}] [it 14/14]" in done.stderr and f"unilab: [rank {rank}] learner: built" in done.stderr
    assert {p.name for p in (run / "logs").iterdir()} == {"learner.stderr", "collector.stderr",
                                                         "learner_rank1.stderr", "collector_rank1.stderr"}


@pytest.mark.parametrize("how", ["rank 1's learner killed", "SIGINT to the group"])
def test_rank_0_saves_its_stop_time_checkpoint_when_another_rank_ends(tmp_path, how):
    """training.run.devices=[0,1] on the CPU: rank 1's learner is killed (or Ctrl-C stops both ranks) mid-run. Rank 0,
    waiting in a collective for rank 1 or anywhere else, stops as after a stop request: it writes its pending rows
    and its checkpoint (its weights are whole: a gloo collective raises before the step that would use it)."""
    proc = _start(tmp_path, "task.num_envs=8", "training.run.devices=[0,1]", "algo.batch_size=64",
                  "algo.save_interval=100000")
    try:
        run = _wait_for_metrics(tmp_path, proc, rows=5)
        while len(read_metrics(run / "rank_1")) < 5:
            assert proc.poll() is None
            time.sleep(0.5)
        ranks = json.loads((run / "runtime_manifest.json").read_text())["ranks"]
        if how == "SIGINT to the group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(ranks[1]["learner_pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    s = summary(run)
    if how == "SIGINT to the group":
        assert proc.returncode == 130 and s["status"] == "interrupted", err[-4000:]
    else:
        assert proc.returncode == 1 and s["status"] == "failed", err[-4000:]
        assert s["cause"] == "learner_died: the learner[1] was killed by SIGKILL (exit code -9)", s["cause"]
    assert s["exit_codes"]["learner[0]"] == 0, (s["exit_codes"], err[-4000:])
    iterations = s["iterations"]
    assert iterations and iterations >= 5, s
    checkpoint = run / "checkpoints" / f"iter_{iterations:07d}.pt"
    assert checkpoint.is_file() and (run / "checkpoints" / "latest.pt").resolve() == checkpoint
    assert [r["iteration"] for r in read_metrics(run)] == list(range(iterations))  # a resume leaves no gap


def test_mps_thread_percentage_and_priority_per_role(tmp_path, mps_on_cpu_children, daemon):
    """training.mps.mps_active_thread_percentage / mps_client_priority: each child starts with its own
    CUDA_MPS_* variables; the manifest notes them."""
    from unilab.cli.train import main as train_main

    daemon.servers[4242] = []
    daemon.clients_from_proc = True
    train_main([*SMOKE, f"training.run.log_dir={tmp_path}", "+execution=mps", "algo.max_iterations=3",
                "training.mps.mps_active_thread_percentage.learner=30",
                "training.mps.mps_active_thread_percentage.collector=70",
                "training.mps.mps_client_priority.collector=below_normal"])
    sharing = json.loads((only_run(tmp_path) / "runtime_manifest.json").read_text())["cuda_process_sharing"]
    assert sharing["effective"] == "mps"
    pids = sharing["client_pids"]
    shares = {role: daemon.client_env[pid].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") for role, pid in pids.items()}
    assert shares == {"learner": "30", "collector": "70"}
    priority = {role: daemon.client_env[pid].get("CUDA_MPS_CLIENT_PRIORITY") for role, pid in pids.items()}
    assert priority == {"learner": None, "collector": "1"}
    assert any("PERCENTAGE=30 for the learner" in note for note in sharing["notes"])
    assert any("CUDA_MPS_CLIENT_PRIORITY=1 for the collector" in note for note in sharing["notes"])


def test_a_dead_mps_server_is_named_with_its_fix(tmp_path, capsys, mps_on_cpu_children, daemon, mps_env):
    """The MPS server the children were verified against dies mid-run and the learner aborts (as on an H200 after
    kill -9 of the server): cause mps_server_fault, the fix, the log path; no dump on the console."""
    import threading

    from unilab.cli.train import main as train_main

    server = subprocess.Popen(["sleep", "600"])  # stands for nvidia-cuda-mps-server
    daemon.servers[server.pid] = []
    daemon.clients_from_proc = True
    done = threading.Event()

    def fault():
        runs = []
        while not done.is_set() and not (runs and len(read_metrics(runs[0])) >= 3):
            runs = [p for p in tmp_path.iterdir() if p.is_dir()]
            time.sleep(0.2)
        if done.is_set():
            return
        rank = json.loads((runs[0] / "runtime_manifest.json").read_text())["ranks"][0]
        assert rank["cuda_process_sharing"]["server_pid"] == server.pid
        server.kill()
        server.wait()
        os.kill(rank["learner_pid"], signal.SIGABRT)

    thread = threading.Thread(target=fault, daemon=True)
    thread.start()
    try:
        with pytest.raises(SystemExit) as info:
            train_main([*SMOKE, f"training.run.log_dir={tmp_path}", "+execution=mps", "algo.max_iterations=100000"])
    finally:
        done.set()
        server.kill()
    assert info.value.code == 1
    s = summary(only_run(tmp_path))
    assert s["status"] == "failed" and s["failed_role"] == "learner"
    assert s["cause"] == ("mps_server_fault: the MPS server of this run's daemon is gone; the learner was killed by "
                          "SIGABRT (exit code -6)")
    log_dir = mps_env["CUDA_MPS_LOG_DIRECTORY"]
    assert any(f"{log_dir}/server.log" in line for line in s["fix"]), s["fix"]
    err = capsys.readouterr().err
    assert "unilab: run failed: mps_server_fault" in err and "unilab mps start" in err and "unilab mps doctor" in err
    assert f"the learner's full log: {only_run(tmp_path) / 'logs' / 'learner.stderr'}" in err
    assert "Fatal Python error: Aborted" not in err  # the abort's dump went to the learner's log
    assert "Fatal Python error: Aborted" in (only_run(tmp_path) / "logs" / "learner.stderr").read_text()


def test_null_mode_records_ambient_mps(tmp_path, fake_host, daemon):
    """No mode requested, but a daemon is reachable and the children are its clients: the manifest says so."""
    from unilab.cli.train import main as train_main

    daemon.servers[4242] = []
    daemon.clients_from_proc = True
    train_main([*SMOKE, f"training.run.log_dir={tmp_path}", "algo.max_iterations=3"])  # completes: no SystemExit
    sharing = json.loads((only_run(tmp_path) / "runtime_manifest.json").read_text())["cuda_process_sharing"]
    assert sharing["configured"] is None and sharing["daemon_reachable"] is True
    assert sharing["effective"] == "mps" and set(sharing["client_pids"]) == {"learner", "collector"}
    assert any("ambient" in note for note in sharing["notes"])


def test_null_mode_can_block_an_ambient_daemon(tmp_path, fake_host, daemon):
    """training.mps.block_ambient_mps: the baseline arm of an A/B run cannot become an MPS client."""
    from unilab.cli.train import main as train_main

    daemon.servers[4242] = []
    daemon.clients_from_proc = True
    train_main([*SMOKE, f"training.run.log_dir={tmp_path}", "algo.max_iterations=3", "training.mps.block_ambient_mps=true"])
    run = only_run(tmp_path)
    sharing = json.loads((run / "runtime_manifest.json").read_text())["cuda_process_sharing"]
    assert sharing["configured"] is None and sharing["effective"] is None and not sharing["client_pids"]
    assert any("block_ambient_mps" in note for note in sharing["notes"])
    assert summary(run)["status"] == "completed"


class _ExitedProcess:
    """A child as the launcher's supervisor sees it once it has ended (host fact)."""

    def __init__(self, exitcode: int):
        self.exitcode = exitcode

    def is_alive(self) -> bool:
        return False


class _Spec:
    training = SimpleNamespace(loop=SimpleNamespace(startup_timeout_s=60.0))

    @staticmethod
    def name(role: str) -> str:
        return f"{role}[0]"


@pytest.mark.parametrize("reported", [True, False])
def test_a_learner_killed_in_teardown_after_its_summary_does_not_fail_the_run(reported):
    """Seen with NCCL on two H200s: the learner reports, then hangs in teardown and is killed (-9)."""
    import queue
    import threading

    from unilab.launcher.supervisor import Supervisor
    from unilab.runtime.protocol import Finished

    inbox = queue.Queue()
    if reported:
        inbox.put(Finished("learner[0]", {"status": "completed", "iterations": 5}))
    procs = {"learner[0]": _ExitedProcess(-9), "collector[0]": _ExitedProcess(0)}
    sup = Supervisor([_Spec()], procs, inbox, threading.Event(), threading.Event(), verify=None)
    sup.verified = True
    sup.run()
    if reported:
        assert sup.status == "completed" and sup.learner_summary["iterations"] == 5
        assert any("learner[0]" in note and "-9" in note for note in sup.notes)
    else:
        assert sup.status == "failed" and sup.cause == "learner_died: the learner[0] was killed by SIGKILL (exit code -9)"


def test_a_run_directory_removed_mid_run_is_named(tmp_path):
    """rm -rf of the run directory while it trains: the run fails, named; no traceback on the console."""
    import shutil

    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={tmp_path}", "training.run.run_name=r",
           "algo.max_iterations=100000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "r"
    try:
        deadline = time.monotonic() + 300
        while not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        shutil.rmtree(run)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-4000:]
    assert f"unilab: run failed: the run directory {run} was removed during the run" in err
    assert "Traceback" not in err, err[-4000:]


def test_a_failed_child_on_a_removed_run_directory_names_the_directory(tmp_path):
    """The learner's traceback (FileNotFoundError on a checkpoint) is not the cause: the removal is."""
    import queue
    import threading

    from unilab.launcher.supervisor import Supervisor
    from unilab.runtime.protocol import Failed

    class Spec(_Spec):
        run_dir = str(tmp_path / "gone")

    inbox = queue.Queue()
    inbox.put(Failed("learner[0]", "Traceback ...\nFileNotFoundError: [Errno 2] No such file or directory"))
    procs = {"learner[0]": _ExitedProcess(1), "collector[0]": _ExitedProcess(0)}
    sup = Supervisor([Spec()], procs, inbox, threading.Event(), threading.Event(), verify=None)
    sup.verified = True
    sup.run()
    assert sup.status == "failed" and sup.failed_role == "launcher"
    assert sup.cause == f"the run directory {Spec.run_dir} was removed during the run"
    assert "FileNotFoundError" in sup.traceback  # kept for run_summary.json's reader


class _Console:
    """A launcher started in a session of its own, its stderr read line by line as it comes."""

    def __init__(self, cmd: list[str], **kwargs):
        import threading

        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, **kwargs)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self._reader.start()

    def wait_for(self, needle: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((line for line in list(self.lines) if needle in line), None)
            if hit:
                return hit
            assert self.proc.poll() is None, "".join(self.lines)[-4000:]
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} on the console in time:\n" + "".join(self.lines)[-4000:])

    def wait(self, timeout: float) -> tuple[int, str]:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code, "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _gone(pids: list[int], hang_s: float = 60.0) -> None:
    """Every process of `pids` exits; `hang_s` only bounds a hang (they are asked to stop, or lose their parent, and
    go within a second or two on an idle machine)."""
    deadline = time.monotonic() + hang_s
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in pids), f"{[p for p in pids if pid_alive(p)]} still running {hang_s:g} s later"


def _child_pids(line: str) -> list[int]:
    """The pids on the launcher's `rank 0: learner pid L, collector pid C` line."""
    import re

    return [int(pid) for pid in re.findall(r"pid (\d+)", line)]


@pytest.mark.parametrize("how", ["SIGINT to the group", "SIGTERM", "kill -9"])
def test_a_signal_during_mps_client_verification(short_tmp, tmp_path, how):
    """The children never show up as MPS clients and verification would poll for 300 s: SIGINT/SIGTERM stop
    it at once (exit 130, interrupted); a launcher killed there leaves no child behind."""
    log_dir = tmp_path / "runs"
    argv = [*SMOKE, f"training.run.log_dir={log_dir}", "training.mps.mps_attach_timeout_s=300", "algo.max_iterations=5"]
    tests_dir = str(Path(__file__).parent)
    script = f"import sys; sys.path.insert(0, {tests_dir!r}); import fakes; fakes.train_under_fake_mps({argv!r}, " \
             f"{str(short_tmp)!r})"
    console = _Console([sys.executable, "-c", script])
    try:
        pids = _child_pids(console.wait_for("learner pid"))
        commands = short_tmp / "commands"
        asked = len(commands.read_text().splitlines())
        deadline = time.monotonic() + 300
        while len(commands.read_text().splitlines()) <= asked:  # verification polls the daemon
            assert time.monotonic() < deadline and console.proc.poll() is None, "".join(console.lines)[-4000:]
            time.sleep(0.1)
        time.sleep(2.0)  # the learner is building or waiting for the go by now
        if how == "kill -9":
            console.proc.kill()
            _gone(pids)
            return
        if how == "SIGTERM":
            console.proc.send_signal(signal.SIGTERM)
        else:  # Ctrl-C: the whole foreground process group
            os.killpg(console.proc.pid, signal.SIGINT)
        code, err = console.wait(timeout=120)  # well before the verification's 300 s
        assert code == 130, err[-4000:]
        assert "Traceback" not in err and "mps_clients_attached" not in err, err[-4000:]
        assert "MPS clients verified" not in err, err[-4000:]  # the stopped queries verified nothing
        s = summary(only_run(log_dir))
        assert s["status"] == "interrupted" and ("SIGTERM" if how == "SIGTERM" else "SIGINT") in s["cause"]
        _gone(pids)
    finally:
        console.kill()


@pytest.mark.parametrize("how", ["SIGINT to the group", "SIGTERM", "kill -9", "play killed"])
def test_a_signal_during_play(tmp_path, how):
    """training.outputs.no_play=false with a long play: the summary of the completed training is written before play;
    a signal stops play (exit 130, no traceback), a killed launcher takes play with it, a killed play is
    noticed at once."""
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={tmp_path}", "algo.max_iterations=5",
           "training.outputs.no_play=false", "training.outputs.play_steps=100000"]
    console = _Console(cmd)
    try:
        (play_pid,) = _child_pids(console.wait_for("unilab: play pid"))
        s = summary(only_run(tmp_path))
        assert s["status"] == "completed" and s["play"] == {"status": "started"}
        time.sleep(2.0)  # play is building its env or playing
        if how == "kill -9":
            console.proc.kill()
            _gone([play_pid])
            assert summary(only_run(tmp_path))["status"] == "completed"
            return
        if how == "play killed":
            os.kill(play_pid, signal.SIGKILL)
        elif how == "SIGTERM":
            console.proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(console.proc.pid, signal.SIGINT)
        code, err = console.wait(timeout=120)  # play's 100000 steps would take far longer
        assert "Traceback" not in err, err[-4000:]
        assert not pid_alive(play_pid)
        s = summary(only_run(tmp_path))
        assert s["status"] == "completed" and s["iterations"] == 5
        if how == "play killed":
            assert code == 0 and "exited with code -9" in s["play"]["error"], s["play"]
        else:
            assert code == 130, err[-4000:]
            assert s["play"] == {"interrupted": f"{'SIGTERM' if how == 'SIGTERM' else 'SIGINT'} received"}
    finally:
        console.kill()


@pytest.mark.parametrize("update_first", [True, False])
def test_both_update_orders_train_end_to_end(tmp_path, update_first):
    done = train(tmp_path, "--algo", "fastsac", "--task", "g1_walk_flat", "algo.max_iterations=12",
                 f"training.loop.update_before_ingest={str(update_first).lower()}")
    assert done.returncode == 0, done.stderr[-4000:]
    run = only_run(tmp_path)
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == list(range(12))
    trained = [r for r in rows if r["critic_loss"] is not None]
    assert trained and all(math.isfinite(r["critic_loss"]) and r["learner_train_ms"] >= 0 for r in trained)
    assert rows[-1]["replay_size"] == 12 * 16  # every chunk was ingested (update first: the last one after the last update)
    assert summary(run)["status"] == "completed"
    assert json.loads((run / "run_config.json").read_text())["training"]["loop"]["update_before_ingest"] is update_first


def test_a_closed_terminal_stops_the_run_like_sigterm(tmp_path):
    """The terminal (an ssh connection) closes: the console hangs up, so writes to it fail (EIO), and the shell
    sends SIGHUP to the job's process group. The run stops as interrupted, saves, and writes its summary."""
    import pty
    import select
    import threading

    master, slave = pty.openpty()
    train_argv = ["-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={tmp_path}", "algo.max_iterations=100000"]
    # a session of its own whose controlling terminal is the pty (as a login shell's job has), then `train`
    become_train = (f"import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                    f"os.execv(sys.executable, [sys.executable, *{train_argv!r}])")
    proc = subprocess.Popen([sys.executable, "-c", become_train], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    console: list[bytes] = []
    hang_up = threading.Event()

    def terminal() -> None:
        """Shows what the run prints until it hangs up: then the master side closes (only here, so that its
        descriptor is never read after it is closed)."""
        while not hang_up.is_set():
            if select.select([master], [], [], 0.1)[0]:
                try:
                    data = os.read(master, 4096)
                except OSError:
                    break
                console.append(data)
        os.close(master)

    shown = threading.Thread(target=terminal, daemon=True)
    shown.start()
    try:
        run = _wait_for_metrics(tmp_path, proc)
        hang_up.set()  # the terminal goes away ...
        shown.join(timeout=10)
        os.killpg(proc.pid, signal.SIGHUP)  # ... and the shell hangs up its jobs
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 130, b"".join(console)[-4000:]
    s = summary(run)
    assert s["status"] == "interrupted" and s["cause"] == "SIGHUP received", s
    assert s["iterations"] and s["iterations"] >= 3
    assert_stopped_and_saved(run, s)


def test_a_full_disk_at_a_checkpoint_is_named_and_leaves_the_last_one(tmp_path):
    """The periodic checkpoint's write fails with ENOSPC (its temporary file is /dev/full): the console names the
    file system and the checkpoint, no partial file is left, the summary is written, the last good checkpoint
    and the metric rows stay."""
    from unilab.rundir.checkpoint import mount_point

    first = train(tmp_path, "algo.max_iterations=4", "algo.save_interval=4")
    assert first.returncode == 0, first.stderr[-4000:]
    run = only_run(tmp_path)
    checkpoints = run / "checkpoints"
    # Where the next checkpoint is written first: /dev/full, linked once the resume has cleared what saves cut
    # short left (it would remove a link planted before).
    plant = ("import os, sys\n"
             "import unilab.launcher.prepare as prepare\n"
             "clear = prepare.clear_partial_saves\n"
             "def cleared(target):\n"
             "    notes = clear(target)\n"
             "    os.symlink('/dev/full', os.path.join(target.run_dir, 'checkpoints', 'iter_0000008.tmp'))\n"
             "    return notes\n"
             "prepare.clear_partial_saves = cleared\n"
             "from unilab.cli.train import main\n"
             "main(sys.argv[1:])\n")
    cmd = [sys.executable, "-c", plant, *SMOKE, f"training.run.log_dir={tmp_path}", f"training.run.resume={run}",
           "algo.max_iterations=12", "algo.save_interval=4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-4000:]
    expected = f"no space left on device on {mount_point(checkpoints)}: checkpoint iter_0000008 not written"
    assert expected in done.stderr, done.stderr[-4000:]
    assert "unexpected pos" not in done.stderr
    s = summary(run)
    assert s["status"] == "failed" and s["failed_role"] == "learner" and expected in s["traceback"]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["iter_0000004.pt", "latest.pt"]
    assert (checkpoints / "latest.pt").resolve().name == "iter_0000004.pt"
    rows = [r["iteration"] for r in read_metrics(run)]
    assert rows == list(range(len(rows))) and len(rows) >= 6, rows
