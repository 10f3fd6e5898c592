"""`train -m ... hydra/launcher=unilab_packed`: several jobs of a sweep at once, each its own `train` launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes import GPU_A, FakeNvml
from train_calls import interrupt_real_sweep, run_dirs, run_train
from unilab.jobs.memory_guard import FAIL, START, WAIT, MemoryGuard, cuda_ordinals
from unilab.config.schema import RunSettings
from unilab.cli.packing import OPTIONS, PackedLauncherConf
from unilab.rundir.layout import SUMMARY_FILE

PACKED = ["hydra/launcher=unilab_packed", "hydra.launcher.max_parallel=2"]
QUICK_RUN = ["+preset=cpu_smoke", "task.num_envs=8", "algo.max_iterations=4", "training.outputs.logger=[]",
             "training.outputs.no_play=true"]


def _span(run: Path) -> tuple[float, float]:
    """When a run was prepared (run_config.json written) and when it ended (run_summary.json written)."""
    return (run / "run_config.json").stat().st_mtime, (run / SUMMARY_FILE).stat().st_mtime


@pytest.mark.integration
def test_a_packed_sweep_runs_two_jobs_at_once_and_survives_a_failed_one(tmp_path):
    """Three CPU jobs, two at a time, through the real entry point in a fresh interpreter: jobs 0 and 1 train at
    the same time, job 2 (start-up past its 1 ms timeout: it fails) waits for a free slot; the others complete,
    each run directory whole, the exit status is the failed job's, and this process never imported torch."""
    log_dir = tmp_path / "runs"
    script = ("import sys\nfrom unilab.cli.train import main\n"
              "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
              "print('RESULT', code, 'torch' in sys.modules, 'warp' in sys.modules)\n")
    done = subprocess.run(
        [sys.executable, "-c", script, "-m", *QUICK_RUN, "training.loop.startup_timeout_s=900,901,0.001", *PACKED,
         f"training.run.log_dir={log_dir}"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "no")))
    assert "RESULT 1 False False" in done.stdout, done.stdout + done.stderr[-4000:]
    runs = {r.name.rsplit("_startup_timeout_s-", 1)[1]: r for r in run_dirs(log_dir)}
    assert sorted(runs) == ["0.001", "900", "901"]
    first, second, failing = runs["900"], runs["901"], runs["0.001"]
    (start0, end0), (start1, end1), start2 = _span(first), _span(second), _span(failing)[0]
    assert max(start0, start1) < min(end0, end1), "jobs 0 and 1 did not run at the same time"
    assert start2 >= min(end0, end1), "job 2 started while two jobs were running"
    for run, status in ((first, "completed"), (second, "completed"), (failing, "failed")):
        assert json.loads((run / SUMMARY_FILE).read_text())["status"] == status
        assert json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]["learner_pid"] > 0
        assert (run / "run_config.json").is_file()
    for run in (first, second):
        assert len((run / "metrics.jsonl").read_text().splitlines()) == 4
        assert (run / "checkpoints").is_dir()
    err = done.stderr
    summary = err[err.index("unilab: sweep done: 2 completed, 1 failed"):].splitlines()
    assert summary[1] == f"  #0 training.loop.startup_timeout_s=900 -> completed, {first}"
    assert summary[2] == f"  #1 training.loop.startup_timeout_s=901 -> completed, {second}"
    assert summary[3] == f"  #2 training.loop.startup_timeout_s=0.001 -> failed, {failing}"
    assert "[#0] unilab: run completed" in err and "[#2] unilab: run failed" in err  # each line names its job
    (sweep_dir,) = (log_dir / "multirun").iterdir()
    assert "run completed" in (sweep_dir / "job-1.log").read_text()


@pytest.mark.parametrize("args, needle", [
    (["+execution=default,mps", "+bench=offpolicy_gate"], "+bench=offpolicy_gate: the A/B gate runs its arms one at"),
    (["training.run.seed=1,2", "hydra.launcher.max_parallel=0"], "hydra.launcher.max_parallel=0: expected an integer >= 1"),
    (["training.run.seed=1,2", "hydra.launcher.max_parallel=2,3"], "hydra.launcher.max_parallel='2,3': expected one value"),
    (["training.run.seed=1,2", "hydra.launcher.job_memory_mib=-1"], "job_memory_mib=-1: expected an integer >= 0"),
    (["training.run.seed=1,2", "hydra.launcher.memory_wait_s=inf"], "memory_wait_s=inf: expected a finite number"),
    (["training.run.seed=1,2", "hydra.launcher.slots=4"], "hydra.launcher.slots=4: expected an option of unilab_packed"),
])
def test_packing_refuses_the_gate_and_bad_options_before_anything_exists(tmp_path, spies, capsys, args, needle):
    log_dir = tmp_path / "runs"
    assert run_train("-m", *args, "hydra/launcher=unilab_packed", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


def test_a_launcher_option_without_the_launcher_says_which_launcher(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2", "hydra.launcher.max_parallel=4",
                     f"training.run.log_dir={log_dir}") == 2
    assert "hydra.launcher.max_parallel=4: an option of the packed launcher; add hydra/launcher=unilab_packed" in \
        capsys.readouterr().err
    assert not log_dir.exists() and spies[0].calls == []


def test_a_packed_dry_run_says_how_many_at_once(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2,3", *PACKED, f"training.run.log_dir={log_dir}",
                     "--dry-run") == 0
    assert "3 job(s) would run, up to 2 at once" in capsys.readouterr().out
    assert not log_dir.exists()


def test_a_refused_job_refuses_a_packed_sweep(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "training.run.device=cpu", "task.num_envs=8,0", *PACKED, f"training.run.log_dir={log_dir}") == 2
    assert "job #1 (task.num_envs=0) refused" in capsys.readouterr().err
    assert not log_dir.exists()


# ---------------------------------------------------------------- the memory guard

class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_guard_waits_then_starts_when_memory_frees_up():
    nvml, clock = FakeNvml(free_mib=3000.0), Clock()
    guard = MemoryGuard(hint_mib=4096, wait_s=60, nvml=nvml, clock=clock)
    verdict = guard.verdict(0, [0])
    assert verdict.action == WAIT
    assert verdict.message == (f"cuda:0 ({GPU_A.uuid}) has 3000 MiB free of 143771 MiB; the job needs about 4096 MiB "
                               "(hydra.launcher.job_memory_mib=4096)")
    clock.now += 30
    assert guard.verdict(0, [0]).action == WAIT
    nvml.free_mib = 5000.0
    assert guard.verdict(0, [0]).action == START
    assert guard.verdict(1, []).action == START  # a CPU job is not checked


def test_the_guard_fails_a_job_after_its_wait_with_the_numbers():
    nvml, clock = FakeNvml(free_mib=1200.0), Clock()
    guard = MemoryGuard(hint_mib=4096, wait_s=60, nvml=nvml, clock=clock)
    assert guard.verdict(3, [1]).action == WAIT
    clock.now += 61
    verdict = guard.verdict(3, [1])
    assert verdict.action == FAIL
    assert "cuda:1 (GPU-bbbbbbbb" in verdict.message and "has 1200 MiB free" in verdict.message
    assert "needs about 4096 MiB" in verdict.message and "waited 61 s (hydra.launcher.memory_wait_s=60)" in verdict.message


def test_the_guard_fails_at_once_what_the_gpu_cannot_hold():
    guard = MemoryGuard(hint_mib=200_000, wait_s=600, nvml=FakeNvml(free_mib=100.0), clock=Clock())
    verdict = guard.verdict(0, [0])
    assert verdict.action == FAIL and "more than the GPU holds" in verdict.message


def test_the_estimate_rises_to_the_largest_measured_peak():
    """A job's peak: the most GPU memory NVML showed its process tree holding (here this test's own process)."""
    nvml = FakeNvml(free_mib=7000.0, process_mib={os.getpid(): 6500.0, 1: 99_999.0})  # pid 1 is no job's
    guard = MemoryGuard(hint_mib=4096, wait_s=0, nvml=nvml, clock=Clock())
    guard.measure({5: (os.getpid(), [0])})
    nvml.process_mib[os.getpid()] = 5000.0  # lower later: the peak stays
    guard.measure({5: (os.getpid(), [0])})
    assert guard.estimate_mib() == (6500.0, "the peak measured for job #5")
    assert guard.verdict(6, [0]).action == START
    nvml.free_mib = 6000.0
    verdict = guard.verdict(6, [0])
    assert verdict.action == FAIL and "needs about 6500 MiB (the peak measured for job #5)" in verdict.message


def test_a_guard_that_cannot_read_nvml_fails_the_job():
    verdict = MemoryGuard(4096, 60, nvml=FakeNvml(available=False), clock=Clock()).verdict(0, [0])
    assert verdict.action == FAIL and "NVML Shared Library Not Found" in verdict.message


@pytest.mark.parametrize("run, ordinals", [
    ({"device": "cpu"}, []), ({"device": "cuda"}, [0]), ({"device": "cuda:1"}, [1]),
    ({"device": "cuda:0", "devices": [0, 1]}, [0, 1]), ({"device": "cpu", "devices": [0, 1]}, []),
])
def test_cuda_ordinals_follow_the_rank_devices(run, ordinals):
    assert cuda_ordinals(RunSettings(**run)) == ordinals


def test_a_packed_sweep_fails_jobs_that_do_not_fit_and_starts_none(tmp_path, spies, capsys, fake_host, monkeypatch):
    """CUDA jobs on a (fake) GPU with 1000 MiB free: each waits its second, then fails with the numbers; no job's
    launcher was started, no run directory made, the sweep's status is a failed job's."""
    import unilab.jobs.memory_guard as guard_mod

    monkeypatch.setattr(guard_mod, "SystemNvml", lambda: FakeNvml(free_mib=1000.0))
    log_dir = tmp_path / "runs"
    code = run_train("-m", "training.run.device=cuda:0", "training.run.seed=1,2", *PACKED, "hydra.launcher.memory_wait_s=1",
                     f"training.run.log_dir={log_dir}")
    assert code == 1
    err = capsys.readouterr().err
    assert "job #0 waits for GPU memory: cuda:0" in err and "job #1 waits for GPU memory" in err
    floor = PackedLauncherConf.job_memory_mib  # the default floor, no peak measured yet
    assert err.count(f"has 1000 MiB free of 143771 MiB; the job needs about {floor} MiB") == 4
    assert "job #0 not started" in err and "memory_wait_s=1)" in err
    assert "  #0 training.run.seed=1 -> failed, no run directory" in err
    assert "  #1 training.run.seed=2 -> failed, no run directory" in err
    assert "started (pid" not in err and run_dirs(log_dir) == [] and spies[0].calls == []


@pytest.mark.integration
def test_ctrl_c_stops_every_running_job_of_a_packed_sweep(tmp_path):
    """SIGINT to the sweep's process group (Ctrl-C) while two jobs train: the packed launcher passes it on to each
    (their launchers are in sessions of their own), both runs stop as interrupted, job 2 never starts, exit 130."""
    log_dir = tmp_path / "runs"
    code, err = interrupt_real_sweep([*QUICK_RUN, "algo.max_iterations=100000", "training.run.seed=1,2,3", *PACKED], log_dir,
                                     tmp_path, training=2)
    assert code == 130, err[-4000:]
    runs = run_dirs(log_dir)
    assert len(runs) == 2
    assert [json.loads((r / SUMMARY_FILE).read_text())["status"] for r in runs] == ["interrupted", "interrupted"]
    assert "SIGINT received: stopping 2 running job(s)" in err
    assert "unilab: sweep interrupted: 2 interrupted" in err and "#2 " not in err


def test_the_hydra_plugin_has_the_schemas_defaults():
    """Hydra fills the launcher's options from PackedLauncherConf; the plugin's own defaults (used by Hydra alone,
    hydra.utils.instantiate without them) must not drift from it."""
    import inspect

    from hydra_plugins.unilab_packed_launcher import UnilabPackedLauncher

    params = inspect.signature(UnilabPackedLauncher.__init__).parameters
    assert {name: params[name].default for name in OPTIONS} == {name: getattr(PackedLauncherConf, name)
                                                                for name in OPTIONS}
