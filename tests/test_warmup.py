"""The kernel cache (one root for Warp's, Inductor's and Triton's compiled kernels) and `unilab warmup`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from unilab.cli.tools import main as tools_main
from unilab.kernel_cache import LIBRARY_DIRS, kernel_cache_dirs, kernel_cache_env, kernel_cache_root


def test_the_root_is_under_the_home_cache_or_unilab_cache_dir():
    assert kernel_cache_root({}) == Path.home() / ".cache" / "unilab" / "kernels"
    env = kernel_cache_env({"UNILAB_CACHE_DIR": "/shared/c"})
    assert env == {"WARP_CACHE_PATH": "/shared/c/kernels/warp", "TORCHINDUCTOR_CACHE_DIR": "/shared/c/kernels/inductor",
                   "TRITON_CACHE_DIR": "/shared/c/kernels/triton"}


def test_a_library_variable_the_user_set_is_left_alone():
    env = {"UNILAB_CACHE_DIR": "/c", "TRITON_CACHE_DIR": "/mine"}
    assert "TRITON_CACHE_DIR" not in kernel_cache_env(env)
    assert kernel_cache_dirs(env)["TRITON_CACHE_DIR"] == Path("/mine")
    assert kernel_cache_dirs(env)["WARP_CACHE_PATH"] == Path("/c/kernels/warp")


def test_the_children_start_with_the_cache_variables(tmp_path, monkeypatch):
    """The learner's and collector's environment (and play's) carries the cache of the launcher's root."""
    from unilab.launcher import launch as launch_mod

    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    captured = {}

    def fake_child_env(evidence, device, no_mps_dir):
        return device, {"CUDA_MPS_PIPE_DIRECTORY": "/x"}

    monkeypatch.setattr(launch_mod, "child_device_and_env", fake_child_env)

    class Ctx:
        def Queue(self):
            return None

        def Process(self, **kw):
            captured.setdefault("procs", []).append(kw["name"])
            return object()

    class Prepared:
        config = SimpleNamespace(training=SimpleNamespace(run=SimpleNamespace(device="cpu"),
                                                       mps=SimpleNamespace(block_ambient_mps=False)))
        rank_devices = ["cpu"]
        rank_evidence = [type("E", (), {"configured": None})()]
        run_dir = tmp_path
        world = None  # train's own ranks (training.run.devices), not a torchrun rank

    monkeypatch.setattr(launch_mod, "_role_spec", lambda *a: type("S", (), {"name": lambda self, role: role})())
    (rank,) = launch_mod._create_ranks(Prepared(), Ctx(), None, None, None)
    assert rank.env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "kernels" / "inductor")
    assert rank.env["WARP_CACHE_PATH"] == str(tmp_path / "kernels" / "warp")
    assert rank.env["CUDA_MPS_PIPE_DIRECTORY"] == "/x"


@pytest.mark.parametrize("args, needle", [
    (["training.run.log_dir=elsewhere"], "warmup sets them"),
    (["algo.max_iterations=3"], "warmup sets them"),
    (["+preset=cpu_smoke", "+execution=mps"], "learner_cuda"),
    (["+preset=cpu_smoke", "+training.typo=1"], "training.typo: no such key"),
])
def test_warmup_refuses_what_train_would_and_the_keys_it_sets(args, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "none"))
    assert tools_main(["warmup", *args]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "kernels").exists()


def _no_gpu(monkeypatch):
    """A host where no NVIDIA GPU can be used, whatever this one has."""
    from unilab.config import validation

    def refuse(devices):
        if any(d.startswith("cuda") for d in devices):
            raise validation.NoGpuError(f"training.run.device={devices[0]} but no NVIDIA GPU can be used here (fake)")

    monkeypatch.setattr(validation, "check_gpus_visible", refuse)


def test_warmup_without_a_gpu_warms_the_cpu_kernels(capsys, tmp_path, monkeypatch):
    """No device named, no GPU: the training it runs is a CPU one at the smoke sizes, and one line says so."""
    from unilab.cli import warmup as warmup_mod

    _no_gpu(monkeypatch)
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "none"))
    ran = []
    monkeypatch.setattr(warmup_mod.subprocess, "call", lambda cmd, env: ran.append((cmd, env)) or 0)
    assert tools_main(["warmup", "--algo", "fastsac", "--task", "g1_walk_flat"]) == 0
    ((cmd, env),) = ran
    assert env["UNILAB_NO_NEXT_STEPS"]  # its run is removed: no commands naming it at its end
    assert "training.run.device=cpu" in cmd and "+preset=cpu_smoke" in cmd
    err = capsys.readouterr().err
    assert "no NVIDIA GPU can be used here: warming the CPU kernels" in err
    assert err.count("\n") == 2 + len(LIBRARY_DIRS)  # that line, the compiled line and one per cache


def test_warmup_of_a_named_cuda_device_without_a_gpu_is_refused(capsys, tmp_path, monkeypatch):
    _no_gpu(monkeypatch)
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "none"))
    assert tools_main(["warmup", "--algo", "fastsac", "--device", "cuda:0"]) == 2
    assert "no NVIDIA GPU can be used here (fake)" in capsys.readouterr().err
    assert not (tmp_path / "kernels").exists()


@pytest.mark.integration
def test_warmup_compiles_into_the_cache_and_keeps_no_run(tmp_path, short_tmp):
    """A real CPU warmup: the physics kernels land in the cache root, the scratch run directory is gone."""
    # The warmup's temporary directory: its own (another warmup may run beside it), and short (multiprocessing puts
    # its Unix sockets there).
    env = dict(os.environ, UNILAB_CACHE_DIR=str(tmp_path / "cache"), CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "none"),
               TMPDIR=str(short_tmp))
    # every kernel compiles cold here (its own cache): minutes on a loaded machine; 1800 s bounds a hang only
    done = subprocess.run([sys.executable, "-m", "unilab.cli.tools", "warmup", "+preset=cpu_smoke", "task.num_envs=8"],
                          capture_output=True, text=True, env=env, timeout=1800, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "first update: capturing" in done.stderr and "unilab warmup: compiled in" in done.stderr
    warp_cache = tmp_path / "cache" / "kernels" / "warp"
    assert any(warp_cache.rglob("*.o")) or any(warp_cache.rglob("*.cubin")) or any(warp_cache.rglob("*.meta"))
    assert not any(short_tmp.glob("unilab-warmup-*"))
    assert not (tmp_path / "runs").exists()
