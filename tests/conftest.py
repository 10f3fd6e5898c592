from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from fakes import FakeMpsDaemon, FakeNvml, install_fake_control_binary
from unilab.mps import HostFacts

# The kernels the tests compile (Warp's, and the learners' compiled losses) go to one cache under the temporary
# directory, not the user's ~/.cache/unilab: shared by the xdist workers, their children and later sessions.
os.environ.setdefault("UNILAB_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"unilab-test-cache-{os.getuid()}"))

SMOKE_WALK = ["+preset=cpu_smoke", "task.num_envs=8", "training.logger=[]", "algo.max_iterations=6",
              "algo.save_interval=3", "training.no_play=true"]  # play is tested in test_runtime.py


@pytest.fixture(scope="session")
def walk_run(tmp_path_factory):
    """A tiny finished CPU run of the walk task (checkpoints at iterations 3 and 6), shared by the tests
    that read a run (eval, export); they may add files to it but change none."""
    import subprocess
    import sys

    log_dir = tmp_path_factory.mktemp("walk_runs")
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE_WALK, f"training.log_dir={log_dir}", "training.run_name=walk",
           "training.export_onnx=true"]  # policy.onnx at the end, for tests/test_export.py
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return log_dir / "walk"


@pytest.fixture
def short_tmp():
    """Unix socket paths must stay under ~100 bytes; pytest's tmp_path can be longer."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ul-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fake_bin(short_tmp):
    bin_dir = short_tmp / "bin"
    install_fake_control_binary(bin_dir)
    return bin_dir


@pytest.fixture
def daemon(short_tmp):
    d = FakeMpsDaemon(short_tmp / "pipe").start()
    yield d
    d.stop()


@pytest.fixture
def mps_env(short_tmp, fake_bin, daemon):
    """Environment of a host with a live (fake) daemon and the control binary on PATH."""
    return {
        "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir),
        "CUDA_MPS_LOG_DIRECTORY": str(short_tmp / "log"),
    }


@pytest.fixture
def host(mps_env):
    return HostFacts(platform="linux", env=mps_env, nvml=FakeNvml())


@pytest.fixture
def fake_host(monkeypatch, mps_env):
    """The process-wide host facts of a GPU machine with a live (fake) daemon: for code that builds HostFacts()."""
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml())
    for key, value in mps_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def inductor_fallback_random():
    """Compiled code draws from eager's RNG stream, for compiled-vs-eager comparisons.

    torch's own ``config.patch`` restores the config module on exit; a ``monkeypatch.setattr`` undo
    under pytest >= 9 deletes the attribute instead, and every later ``torch.export`` then fails."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        yield
