from __future__ import annotations

import copy
import importlib
import os
import random
import sys
import tempfile
from pathlib import Path

import pytest

from fakes import FakeMpsDaemon, FakeNvml, install_fake_control_binary
from leftover_processes import MARK, mark_this_session, stop_leftovers
from unilab.mps import HostFacts

# The kernels the tests compile (Warp's, and the learners' compiled losses) go to one cache under the temporary
# directory, not the user's ~/.cache/unilab: shared by the xdist workers, their children and later sessions.
os.environ.setdefault("UNILAB_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"unilab-test-cache-{os.getuid()}"))
# No test reaches PyPI: wheels (unilab.assets.wheels) come from this empty folder unless a test builds its own, so
# a render without the G1's meshes there falls back to its collision look at once.
_NO_WHEELS = Path(tempfile.gettempdir()) / f"unilab-test-no-wheels-{os.getuid()}"
_NO_WHEELS.mkdir(exist_ok=True)
os.environ.setdefault("UNILAB_WHEEL_INDEX", str(_NO_WHEELS))
# One OpenMP thread in the processes the tests start (train, its collector and learner, the tools), as in the test
# processes themselves (_one_torch_thread): with two workers busy, a child's second thread only takes turns with
# the other worker's tests.
os.environ.setdefault("OMP_NUM_THREADS", "1")
mark_this_session()

SMOKE_WALK = ["+preset=cpu_smoke", "task.num_envs=8", "training.outputs.logger=[]", "algo.max_iterations=6",
              "algo.save_interval=3", "training.outputs.no_play=true"]  # play is tested in test_runtime.py


@pytest.fixture(scope="session")
def walk_run(tmp_path_factory):
    """A tiny finished CPU run of the walk task (checkpoints at iterations 3 and 6), shared by the tests
    that read a run (eval, export); they may add files to it but change none. A real `train`: only for tests marked
    integration (pytest_collection_modifyitems refuses others)."""
    import subprocess
    import sys

    log_dir = tmp_path_factory.mktemp("walk_runs")
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE_WALK, f"training.run.log_dir={log_dir}", "training.run.run_name=walk",
           "training.outputs.export_onnx=true"]  # policy.onnx at the end, for tests/test_export.py
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


@pytest.fixture
def spies(monkeypatch):
    """Spies on the process launcher and the environment factory of `train` called in-process."""
    import unilab.launcher.launch as launch_mod
    import unilab.tasks as tasks
    from train_calls import Spy

    launcher, env_factory = Spy(), Spy()
    monkeypatch.setattr(launch_mod, "launch", launcher)
    monkeypatch.setattr(tasks, "make_env", env_factory)
    return launcher, env_factory


@pytest.fixture
def tool(short_tmp, monkeypatch):
    """A host of fakes behind `unilab mps` (tests/fakes_mps_tool.py); the daemons it started are stopped after."""
    from fakes_mps_tool import Tool, kill_started

    from unilab.mps import cli as mps_cli

    t = Tool(short_tmp)
    monkeypatch.setattr(mps_cli, "make_host", t.host)
    yield t
    kill_started(short_tmp)


# ---------------------------------------------------------------- every test


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op torch thread in the test processes: their networks and batches are tiny, and the workers
    (`-n 2`) already keep the cores busy; more threads only contend (a learner test took 10x longer with them)."""
    torch = sys.modules.get("torch")  # imported by the test modules that use it; no import for those that do not
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _same_random_state_for_every_test():
    """Each test starts from the same global random state (Python's, NumPy's, torch's), whichever tests ran
    before it on its worker: a test's draws must not depend on the order or the split of the run."""
    random.seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)


@pytest.fixture(autouse=True)
def _tiny_learner_configs_unchanged(request):
    """The tiny learner configs (tests/tiny_learners.py) are shared by every test of a worker, and a learner holds
    the config it is given: a test that changed one (`lrn.cfg.compile = True`) once made the later tests of its
    worker compile their losses with inductor, a C++ build each. The test that changes one fails."""
    tiny = sys.modules.get("tiny_learners")  # imported at collection by the test modules that use it
    if tiny is None:
        yield
        return
    names = ("FASTSAC", "FLASHSAC", "WARPSAC")
    before = {name: copy.deepcopy(getattr(tiny, name)) for name in names}
    yield
    changed = [name for name in names if getattr(tiny, name) != before[name]]
    if changed:
        for name in changed:  # put back, so that only this test fails
            vars(getattr(tiny, name)).update(vars(before[name]))
        pytest.fail(f"{request.node.nodeid} changed tiny_learners.{', '.join(changed)}: change a copy "
                    "(dataclasses.replace) instead", pytrace=False)


# ---------------------------------------------------------------- the unit suite compiles no kernels
# A test not marked `integration` must not load a Warp module: a load compiles the module's kernels (tens of seconds
# on a fresh machine, MJWarp's many more) or reads them from the kernel cache, and every Warp launch goes through it.
# Such a test fails, naming the module, and belongs in the integration suite (`pytest -m integration`). Module.load is
# refused while a test not marked integration runs (its fixtures included); processes a test starts are not watched.

_running: list = [None]  # the test item being set up, run or torn down
_WARP_LOADS = pytest.StashKey[list]()


def _warp_module_class():
    for name in ("warp._src.context", "warp.context"):  # Warp >= 1.10 keeps its internals under warp._src
        try:
            return importlib.import_module(name).Module
        except (ImportError, AttributeError):
            continue
    raise RuntimeError("tests/conftest.py: no Warp Module class found to guard; update _warp_module_class")


def _guard_warp_module_loads() -> None:
    module_class = _warp_module_class()
    real_load = module_class.load
    if getattr(real_load, "guarded", False):
        return

    def load(module, *args, **kwargs):
        item = _running[0]
        if item is not None and item.get_closest_marker("integration") is None:
            item.stash.setdefault(_WARP_LOADS, []).append(module.name)
            raise AssertionError(f"Warp module {module.name!r} loaded in a test not marked integration: mark the "
                                 "test (or its module) pytest.mark.integration")
        return real_load(module, *args, **kwargs)

    load.guarded = True
    module_class.load = load


def pytest_collection_modifyitems(config, items):
    """A test that takes a real training run (the `walk_run` fixture: a `train` process, which compiles kernels the
    guard above does not see) is an integration test."""
    unmarked = [item.nodeid for item in items
                if "walk_run" in getattr(item, "fixturenames", ()) and item.get_closest_marker("integration") is None]
    if unmarked:
        raise pytest.UsageError("tests that use the walk_run fixture (a real `train` run) must be marked "
                                f"pytest.mark.integration: {unmarked}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _guard_warp_module_loads()
    _running[0] = item
    try:
        yield
    finally:
        _running[0] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A refused load fails the test even where the code under test caught the error."""
    report = (yield).get_result()
    loads = item.stash.get(_WARP_LOADS, [])
    if loads and report.passed and call.when != "teardown":
        report.outcome = "failed"
        report.longrepr = (f"Warp modules loaded in a test not marked integration: {sorted(set(loads))}; mark it "
                           "pytest.mark.integration")


@pytest.hookimpl(trylast=True)  # after xdist has shut its workers down
def pytest_sessionfinish(session):
    """A process the session started that still runs at its end fails the session (and is killed)."""
    if hasattr(session.config, "workerinput") or os.environ.get(MARK) != str(os.getpid()):
        return  # a worker of -n 2, or a pytest started by a test: the outermost session looks
    left = stop_leftovers(os.environ[MARK])
    if left:
        listed = "\n".join(f"  {pid}: {cmd}" for pid, cmd in sorted(left.items()))
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write("\n")
        reporter.write_line(f"processes the tests started and left running (now killed):\n{listed}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
