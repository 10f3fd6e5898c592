"""MjWarpBackend on CPU with 4 worlds of the G1 (first run compiles MJWarp kernels, ~40 s)."""

import mujoco
import numpy as np
import pytest
import torch

from unilab.assets import g1
from unilab.sim import MjWarpSimConfig

N = 4


@pytest.fixture(scope="module")
def mj_model():
    return g1.build_g1_model()


@pytest.fixture(scope="module")
def _shared_backend(mj_model):
    from unilab.sim.mjwarp_backend import MjWarpBackend

    return MjWarpBackend(mj_model, N, "cpu", MjWarpSimConfig())


@pytest.fixture
def backend(_shared_backend, mj_model):
    """The module's backend (built once), every world back in the stand pose at rest, time 0, no overflow counted:
    a test sees nothing another one left (tests step it, write its views)."""
    _reset_all(_shared_backend, mj_model)
    _shared_backend.reset_overflow()
    return _shared_backend


def _reset_all(backend, mj_model):
    qpos = torch.as_tensor(g1.default_qpos(mj_model), dtype=torch.float32).repeat(N, 1)
    backend.reset_worlds(torch.ones(N, dtype=torch.bool), qpos, torch.zeros(N, mj_model.nv))
    backend.ctrl.copy_(torch.as_tensor(g1.G1_DEFAULT_QPOS_JOINTS, dtype=torch.float32))


def test_config_is_light():
    import subprocess
    import sys

    code = "import sys, unilab.sim.config; print(any(m in sys.modules for m in ('warp', 'torch', 'mujoco')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    with pytest.raises(ValueError):
        MjWarpSimConfig(overflow="ignore")
    with pytest.raises(ValueError, match="sim.iterations=0"):
        MjWarpSimConfig(iterations=0)


@pytest.mark.integration
def test_view_shapes(mj_model):
    from unilab.sim.mjwarp_backend import MjWarpBackend

    backend = MjWarpBackend(mj_model, N, "cpu", MjWarpSimConfig())  # a new one: its initial state is checked below
    m = mj_model
    assert backend.qpos.shape == (N, m.nq)
    assert backend.qvel.shape == (N, m.nv)
    assert backend.ctrl.shape == (N, m.nu)
    assert backend.xpos.shape == (N, m.nbody, 3)
    assert backend.xquat.shape == (N, m.nbody, 4)
    assert backend.xmat.shape == (N, m.nbody, 3, 3)
    # the matrices rotate as the quaternions do (the tracking task's observations use the matrices)
    from unilab.tasks.common.math import quat_to_matrix

    torch.testing.assert_close(backend.xmat, quat_to_matrix(backend.xquat), atol=1e-5, rtol=0)
    assert backend.cvel.shape == (N, m.nbody, 6)
    assert backend.site_xpos.shape == (N, m.nsite, 3)
    assert backend.sensordata.shape == (N, m.nsensordata)
    assert backend.time.shape == (N,)
    assert backend.overflow_count.shape == (N,)
    # initial state = the model's "stand" keyframe, with valid kinematics
    np.testing.assert_allclose(backend.qpos[0].numpy(), g1.default_qpos(m), atol=1e-6)
    assert backend.xpos[0, 1, 2].item() == pytest.approx(g1.G1_DEFAULT_BASE_HEIGHT, abs=1e-5)


@pytest.mark.integration
def test_step_matches_cpu_mujoco_and_advances_time(backend, mj_model):
    _reset_all(backend, mj_model)
    cfg = backend.cfg
    backend.ctrl[:, 3] += 0.3  # bend the left knee a bit more
    for _ in range(5):
        backend.step()
    assert torch.allclose(backend.time, torch.full((N,), 5 * cfg.decimation * cfg.timestep))
    assert backend.last_physics_ms > 0

    d = mujoco.MjData(mj_model)
    d.qpos[:] = g1.default_qpos(mj_model)
    d.ctrl[:] = backend.ctrl[0].numpy()
    for _ in range(5 * cfg.decimation):
        mujoco.mj_step(mj_model, d)
    np.testing.assert_allclose(backend.qpos[0].numpy(), d.qpos, atol=1e-4)
    assert abs(d.qpos[10] - g1.G1_DEFAULT_QPOS_JOINTS[3]) > 0.05  # the state did change
    # foot contact sensors see the robot's weight
    found = backend.sensordata[:, [int(mj_model.sensor(n).adr[0]) for n in g1.G1_FOOT_CONTACT_SENSORS]]
    assert torch.all(found > 0)


@pytest.mark.integration
def test_masked_reset_only_touches_masked_worlds(backend, mj_model):
    _reset_all(backend, mj_model)
    backend.ctrl[:, 3] += 0.5
    for _ in range(3):
        backend.step()
    before_qpos = backend.qpos.clone()
    before_time = backend.time.clone()
    mask = torch.tensor([True, False, True, False])
    target = torch.as_tensor(g1.default_qpos(mj_model), dtype=torch.float32).repeat(N, 1)
    target[:, 0] = torch.arange(N, dtype=torch.float32)  # distinct x per world
    backend.reset_worlds(mask, target, torch.zeros(N, mj_model.nv))

    assert torch.equal(backend.qpos[mask], target[mask])
    assert torch.equal(backend.qpos[~mask], before_qpos[~mask])
    assert torch.all(backend.qvel[mask] == 0)
    assert torch.all(backend.time[mask] == 0) and torch.equal(backend.time[~mask], before_time[~mask])
    # derived quantities follow the new state
    np.testing.assert_allclose(backend.xpos[2, 1].numpy(), [2.0, 0.0, g1.G1_DEFAULT_BASE_HEIGHT], atol=1e-5)
    d = mujoco.MjData(mj_model)  # forward() also refreshed the untouched worlds
    d.qpos[:] = backend.qpos[1].numpy()
    d.qvel[:] = backend.qvel[1].numpy()
    mujoco.mj_forward(mj_model, d)
    np.testing.assert_allclose(backend.xpos[1].numpy(), d.xpos, atol=1e-5)
    np.testing.assert_allclose(backend.cvel[1].numpy(), d.cvel, atol=1e-3)


@pytest.mark.integration
def test_views_are_zero_copy(backend):
    backend.qpos[3, 0] = 7.5
    assert backend.data.qpos.numpy()[3, 0] == pytest.approx(7.5)
    backend.data.ctrl.fill_(0.25)
    assert torch.all(backend.ctrl == 0.25)


@pytest.mark.integration
def test_overflow_is_surfaced(mj_model):
    from unilab.sim.mjwarp_backend import MjWarpBackend, SimOverflowError

    tiny = MjWarpBackend(mj_model, N, "cpu", MjWarpSimConfig(nconmax=1, njmax=8))
    tiny.step()  # ~6 foot contacts per world do not fit
    assert int(tiny.overflow_count.sum()) > 0
    with pytest.raises(SimOverflowError, match="nconmax"):
        tiny.check_overflow()

    counted = MjWarpBackend(mj_model, N, "cpu", MjWarpSimConfig(nconmax=1, overflow="count"))
    counted.step()
    assert counted.check_overflow() > 0  # a metric, no exception
    counted.reset_overflow()
    assert counted.overflow_total() == 0


@pytest.mark.integration
def test_default_capacity_does_not_overflow(backend):
    backend.reset_overflow()
    backend.step()
    assert backend.check_overflow() == 0


@pytest.mark.integration
def test_expand_model_field(backend, mj_model):
    generation = backend.model_generation
    friction = backend.expand_model_field("geom_friction")
    assert friction.shape == (N, mj_model.ngeom, 3)
    assert backend.model_generation == generation + 1  # captured graphs (the task's too) must recapture
    assert backend.expand_model_field("geom_friction").data_ptr() == friction.data_ptr()
    assert backend.model_generation == generation + 1  # already per world: nothing replaced
    friction[1, :, 0] = 0.3
    assert backend.model.geom_friction.numpy()[1, 0, 0] == pytest.approx(0.3)
    _reset_all(backend, mj_model)
    backend.step()
    assert torch.isfinite(backend.qpos).all()


@pytest.mark.integration
def test_solver_caps_reach_the_solver(mj_model):
    import warp as wp

    from unilab.sim.mjwarp_backend import MjWarpBackend

    capped = MjWarpBackend(mj_model, N, "cpu", MjWarpSimConfig(iterations=1, ls_iterations=3))
    assert (capped.model.opt.iterations, capped.model.opt.ls_iterations) == (1, 3)
    assert (capped.mj_model.opt.iterations, mj_model.opt.iterations) == (1, 10)  # the caller's model is untouched
    qpos = torch.as_tensor(g1.default_qpos(mj_model), dtype=torch.float32).repeat(N, 1)
    qpos[:, 2] -= 0.01  # feet slightly in the floor: the contacts need the solver
    capped.reset_worlds(torch.ones(N, dtype=torch.bool), qpos, torch.zeros(N, mj_model.nv))
    capped.step()
    assert int(wp.to_torch(capped.data.solver_niter).max()) == 1



FIRST_STEP_LOADS = """
import sys, torch, warp as wp
from unilab.assets import g1
from unilab.sim import MjWarpSimConfig
from unilab.sim.mjwarp_backend import MjWarpBackend
def loaded():
    return {name: len(m.execs) for name, m in wp._src.context.user_modules.items()}
b = MjWarpBackend(g1.build_g1_model(), 4, "cpu", MjWarpSimConfig(), compile_now=False)
if sys.argv[1] == "compile":
    assert b.compile_kernels() > 10
qpos = b.qpos.clone()
before = loaded()
b.forward(); b.step()
assert torch.isfinite(b.qpos).all() and not torch.equal(b.qpos, qpos)
print("NEW", sum(v - before.get(k, 0) for k, v in loaded().items()))
"""


@pytest.mark.integration
@pytest.mark.parametrize("compile_first", [True, False])
def test_compile_kernels_loads_every_module_the_first_step_launches(compile_first):
    """After compile_kernels, the first forward and step load no module: MJWarp's per-model kernels were
    found by the dry pass and loaded with the rest. Without it (the control) they load there, one by one."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FIRST_STEP_LOADS, "compile" if compile_first else "plain"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    new = int(done.stdout.split("NEW")[-1])
    assert (new == 0) if compile_first else (new > 10), done.stdout


@pytest.mark.integration
def test_a_cpu_backend_prints_no_driver_warning():
    """On a host without the NVIDIA driver Warp's init warns of it; a CPU backend needs none and stays quiet
    (on a host with the driver there is nothing to drop: the test then checks only that nothing else is lost)."""
    import subprocess
    import sys

    code = ("import sys; from unilab.sim.mjwarp_backend import _setup_warp; _setup_warp(False, cpu=True); "
            "sys.stderr.write('after init\\n')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Could not find or load the NVIDIA CUDA driver" not in done.stderr
    assert done.stderr.endswith("after init\n")
