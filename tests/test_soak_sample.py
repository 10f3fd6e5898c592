"""benchmarks/soak_sample.py: per-process memory of a run over time, and the growth report."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("soak_sample", ROOT / "benchmarks" / "soak_sample.py")
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

MIB = 1024 * 1024


class FakeNvml:
    """Two GPUs as NVML reports them (host facts): compute processes on one, MPS clients on the other."""

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(1000 if h == 0 else 3000) * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=11, usedGpuMemory=500 * MIB)] if h == 0 else []

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h):
        if h == 0:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [SimpleNamespace(pid=11, usedGpuMemory=100 * MIB), SimpleNamespace(pid=12, usedGpuMemory=None),
                SimpleNamespace(pid=13, usedGpuMemory=2000 * MIB)]


def test_gpu_memory_per_process_from_compute_and_mps_lists():
    per_pid, total = soak.gpu_memory(FakeNvml())
    assert per_pid == {11: 600.0, 13: 2000.0} and total == 4000.0
    assert soak.gpu_memory(None) == ({}, None)


def _write(path: Path, rows: list[tuple[float, float, float | None]], run_dir: Path | None = None) -> Path:
    lines = [json.dumps({"header": {"launcher_pid": 1, "run_dir": str(run_dir) if run_dir else None}})]
    for t, rss, gpu in rows:
        lines.append(json.dumps({"t": t, "procs": {"learner": {"pid": 2, "rss_mib": rss, "gpu_mib": gpu}},
                                 "gpu_total_used_mib": None}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_report_passes_within_2_percent_after_the_warmup(tmp_path, capsys):
    # the start-up growth (500 -> 1000 MiB before 120 s) is not counted
    path = _write(tmp_path / "s.jsonl", [(0, 500, 100), (60, 900, 200), (130, 1000, 400), (3600, 1015, 404)])
    assert soak.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "learner rss" in out and "1.50" in out and "learner gpu" in out and out.strip().endswith(
        "after the warm-up")
    assert "PASS: 0 of 2 series" in out


def test_report_fails_on_growth_and_names_the_series(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "ingress_backpressure": float(i),
                                                          "nan_guard_trips": 0}) + "\n" for i in range(4)))
    (run / "run_summary.json").write_text(json.dumps({"status": "completed", "cause": None}))
    path = _write(tmp_path / "s.jsonl", [(130, 1000, None), (3600, 1050, None)], run)
    assert soak.main(["--report", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: 1 of 1 series grew more than 2 %" in out and "(learner rss)" in out
    assert "ingress_backpressure: 3.0" in out and "nan_guard_trips: 0" in out and "status: completed" in out
    assert soak.main(["--report", str(path), "--max-growth", "10"]) == 0


def test_auto_warmup_ends_one_sample_after_the_first_metrics_row(tmp_path, capsys):
    """The compile and the replay fill took 180 s here (no metrics until then), longer than any fixed guess:
    auto leaves that growth out; counted from 0 s it fails the soak."""
    run = tmp_path / "run"
    run.mkdir()
    samples = [(0, 500, 0), (60, 600, 0), (120, 650, 0), (180, 1200, 900), (240, 1500, 4000), (600, 1505, 9000)]
    lines = [json.dumps({"header": {"launcher_pid": 1, "run_dir": str(run)}})]
    lines += [json.dumps({"t": t, "procs": {"learner": {"pid": 2, "rss_mib": rss, "gpu_mib": None}},
                          "gpu_total_used_mib": None, "metrics_bytes": size}) for t, rss, size in samples]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert soak.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warm-up: 240 s (one sample after the first metrics row)" in out and "0.33" in out
    assert soak.main(["--report", str(path), "--warmup", "120"]) == 1
    assert "FAIL: 1 of 1 series" in capsys.readouterr().out
    assert soak._metrics_bytes(run) == 0 and soak._metrics_bytes(None) is None
    (run / "metrics.jsonl").write_text("{}\n")
    assert soak._metrics_bytes(run) == 3


def test_auto_warmup_without_metrics_is_bad_input(tmp_path, capsys):
    lines = [json.dumps({"header": {"launcher_pid": 1, "run_dir": "/nowhere"}})]
    lines += [json.dumps({"t": t, "procs": {"learner": {"pid": 2, "rss_mib": 500, "gpu_mib": None}},
                          "gpu_total_used_mib": None, "metrics_bytes": 0}) for t in (0, 60, 120)]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert soak.main(["--report", str(path)]) == 2
    assert "no metrics row" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        soak.main(["--report", str(path), "--warmup", "soon"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("argv, message", [
    (["--report", "missing.jsonl"], "no such file"),
    (["12345678", "--out", "OUT"], "no process 12345678"),
    (["not_a_run", "--out", "OUT"], "neither a pid nor a run directory"),
    (["--out", "OUT"], "give a run directory"),
    (["run", "--out", "OUT", "--run-for", "5"], "--run-for and --log go with a train command"),
    (["run", "--out", "OUT", "--", "train"], "a train command needs --log FILE"),
])
def test_bad_input_exits_2_and_creates_nothing(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert soak.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "OUT").exists()


def test_report_without_samples_after_the_warmup_is_bad_input(tmp_path, capsys):
    path = _write(tmp_path / "s.jsonl", [(0, 500, None), (60, 600, None)])
    assert soak.main(["--report", str(path)]) == 2
    assert "no sample after the warm-up" in capsys.readouterr().err


def test_sampling_ends_when_the_launcher_is_gone_though_a_child_is_still_listed(tmp_path, monkeypatch):
    """A launcher that has exited (or is a zombie, with no RSS) while its learner is still listed ends the
    sampling: no row without the launcher is written."""
    import os

    root = os.getpid()  # alive throughout: only the rows say the launcher is gone
    rows = iter([{"launcher": {"pid": root}, "learner": {"pid": 1}}, {"learner": {"pid": 1}},
                 {"launcher": {"pid": root}}])
    monkeypatch.setattr(soak, "resolve_target", lambda target: (root, None))
    monkeypatch.setattr(soak, "sample", lambda *a: {"t": 0.0, "procs": next(rows)})
    out = tmp_path / "s.jsonl"
    assert soak.run_sampler(str(root), out, interval=0.01, duration=5) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 and set(lines[1]["procs"]) == {"launcher", "learner"}


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
def test_with_a_train_command_it_starts_samples_and_stops_the_run(tmp_path):
    """The training (here tests/fake_job.py as a launcher) is started as a job, sampled once its run.lock names it,
    and stopped with SIGINT after --run-for; its console goes to --log."""
    run, out, log = tmp_path / "runs" / "soak", tmp_path / "soak.jsonl", tmp_path / "soak.log"
    fake = [sys.executable, str(ROOT / "tests" / "fake_job.py"), "--launcher", f"training.run.log_dir={run.parent}",
            "training.run.run_name=soak"]
    assert soak.main([str(run), "--out", str(out), "--interval", "0.2", "--run-for", "5", "--log", str(log), "--",
                      *fake]) == 0
    header, rows = soak.read_samples(out)
    launcher = json.loads((run / "pids.json").read_text())
    assert header["launcher_pid"] == launcher["job"] and header["run_dir"] == str(run)
    assert rows and all(row["procs"]["launcher"]["pid"] == launcher["job"] for row in rows)
    assert (run / "signals").read_text() == "SIGINT\n"
    assert json.loads((run / "run_summary.json").read_text())["status"] == "interrupted"
    assert "a line on stdout" in log.read_text()


@pytest.mark.integration
def test_samples_every_process_of_a_cpu_run(tmp_path, capsys):
    log_dir = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "unilab.cli.train", "+preset=cpu_smoke", "task.num_envs=16",
                             "training.outputs.logger=[]", f"training.run.log_dir={log_dir}", "algo.max_iterations=100000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            runs = list(log_dir.glob("*/metrics.jsonl"))
            if runs and runs[0].read_text().count("\n") >= 3:
                break
            time.sleep(0.5)
        run = runs[0].parent
        out = tmp_path / "soak.jsonl"
        assert soak.main([str(run), "--out", str(out), "--interval", "0.5", "--duration", "2"]) == 0
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    header, rows = soak.read_samples(out)
    assert header["launcher_pid"] == proc.pid and header["run_dir"] == str(run)
    assert len(rows) >= 3
    for name in ("launcher", "learner", "collector"):
        assert all(row["procs"][name]["rss_mib"] > 10 for row in rows), rows[0]
    manifest = json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]
    assert rows[0]["procs"]["learner"]["pid"] == manifest["learner_pid"]
    capsys.readouterr()
    assert soak.main(["--report", str(out), "--warmup", "0", "--max-growth", "1000"]) == 0
    report = capsys.readouterr().out
    assert "learner rss" in report and "collector rss" in report and "ingress_backpressure" in report
