"""benchmarks/faults.py: a run's learner killed, a run's neighbour stopped; the runs are tests/fake_job.py
launchers (no training, no GPU)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE = [sys.executable, str(ROOT / "tests" / "fake_job.py")]
sys.path.insert(0, str(ROOT / "benchmarks"))
import faults  # noqa: E402


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
def test_killing_the_learner_reports_the_launchers_exit_and_the_cause(tmp_path, capsys):
    runs, logs = tmp_path / "runs", tmp_path / "session"
    cmd = [*FAKE, "--launcher", f"training.run.log_dir={runs}", "training.run.run_name=faults_learner"]
    assert faults.main(["kill", "learner", "--log-dir", str(logs), "--", *cmd]) == 0
    out = capsys.readouterr().out
    learner = json.loads((runs / "faults_learner" / "pids.json").read_text())["child"]
    assert re.search(rf"faults learner: kill -9 of pid {learner}; the launcher exited [\d.]+ s later, rc=1\n", out)
    assert "cause: learner_died: exit code -9\nfix: None\nconsole (last lines):\n" in out
    assert "a line on stdout" in out and "a line on stdout" in (logs / "faults_learner.log").read_text()


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
def test_a_run_that_ends_before_its_rows_is_reported(tmp_path, capsys):
    cmd = [*FAKE, "--alone", "--end", "failed", "1", f"training.run.log_dir={tmp_path}", "training.run.run_name=r"]
    assert faults.main(["kill", "learner", "--log-dir", str(tmp_path), "--", *cmd]) == 1
    out = capsys.readouterr().out
    assert out.startswith("the run ended before its third metrics row\n") and "a line on stderr" in out


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
def test_stopping_one_of_two_runs_reports_both(tmp_path, capsys, monkeypatch):
    """SIGINT to the first run's group; the second is stopped after it; both summaries are read back."""
    monkeypatch.setattr(faults, "GO_ON_S", 0.5)
    runs = tmp_path / "runs"
    assert faults.main(["neighbours", "a", "b", "--log-dir", str(tmp_path), "--", *FAKE, "--launcher",
                        f"training.run.log_dir={runs}"]) == 0
    out = capsys.readouterr().out
    assert "faults stop: a stopped (rc=130); b " in out  # went on or not: the fake's row rate under load says
    assert out.endswith("a interrupted None None\nb interrupted None None\n")
    assert [(runs / name / "signals").read_text() for name in "ab"] == ["SIGINT\n", "SIGINT\n"]


@pytest.mark.parametrize("args", [["kill", "learner", "--log-dir", "x"],
                                  ["kill", "learner", "--log-dir", "x", "--", "train", "training.run.log_dir=/tmp"]])
def test_bad_arguments_exit_2(tmp_path, args):
    with pytest.raises(SystemExit) as stop:
        faults.main(args)
    assert stop.value.code == 2
