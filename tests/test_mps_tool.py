"""`unilab mps`: start/stop/status/env/doctor against fake host facts (NVML, control binary, nvidia-smi)."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import GPU_A, GPU_B, FakeMpsDaemon, FakeNvml
from fakes_mps_tool import alive, started_pids

from unilab.cli.tools import main as tools_main
from unilab.cli.train import main as train_main
from unilab.mps import CudaProcessSharingError, HostFacts, MpsToolError, probe_cuda_process_sharing
from unilab.mps.host import resolve_gpu
from unilab.mps.layout import STATE_FILE, default_root, ensure_private_dir
from unilab.mps.nvml import GpuInfo

TESTS = Path(__file__).resolve().parent


def run(*args) -> int:
    return tools_main(["mps", *args])


def test_start_creates_private_dirs_state_and_exports_then_stop(tool, capsys):
    assert run("start", "--timeout", "60") == 0
    out = capsys.readouterr().out
    base = tool.base()
    for path in (base.parent, base, base / "pipe", base / "log"):
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    state = tool.state()
    pid = state["daemon_pid"]
    assert alive(pid) and started_pids(tool.root) == [pid]
    stat_fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert state["daemon_start_time"] == int(stat_fields[22 - 3])
    assert state["gpu_uuid"] == GPU_A.uuid and state["pipe_dir"] == str(base / "pipe")
    assert state["compute_mode_set"] is False and state["foreground"] is False
    assert f"CUDA_VISIBLE_DEVICES={GPU_A.uuid}" in tool.control_log()  # the daemon's own environment
    assert "cmd get_server_list" in tool.control_log()  # it waited until the daemon answered
    assert out.splitlines() == [f"export CUDA_MPS_PIPE_DIRECTORY={base}/pipe",
                                f"export CUDA_MPS_LOG_DIRECTORY={base}/log",
                                f"export CUDA_VISIBLE_DEVICES={GPU_A.uuid}"]

    assert run("stop") == 0
    assert not alive(pid)
    assert not (base / STATE_FILE).exists() and not (base / "pipe" / "control").exists()
    assert "cmd quit" in tool.control_log()


def test_start_refuses_a_live_pipe_it_did_not_start(tool, capsys):
    foreign = FakeMpsDaemon(tool.base() / "pipe").start()
    try:
        assert run("start") == 1
        err = capsys.readouterr().err
        assert str(tool.base() / "pipe") in err and "unilab mps stop" in err and "already answers" in err
        assert foreign.commands == ["get_server_list"]
        assert not (tool.base() / STATE_FILE).exists() and started_pids(tool.root) == []
    finally:
        foreign.stop()


def test_start_refuses_to_start_twice(tool, capsys):
    assert run("start") == 0
    capsys.readouterr()
    assert run("start") == 1
    err = capsys.readouterr().err
    assert "unilab mps stop --pipe-dir" in err and str(tool.base() / "pipe") in err
    assert len(started_pids(tool.root)) == 1
    assert run("stop") == 0


@pytest.mark.parametrize("kind", ["socket", "file"])
def test_start_cleans_a_stale_control_pipe(tool, capsys, kind):
    pipe = tool.base() / "pipe"
    pipe.mkdir(parents=True)
    if kind == "socket":  # bound, then closed: the socket file stays, nothing listens
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(pipe / "control"))
        s.close()
    else:
        (pipe / "control").write_text("not a socket")
    (pipe / "nvidia-cuda-mps-control.pid").write_text("999999\n")
    assert run("start") == 0
    assert "stale control pipe" in capsys.readouterr().err
    assert tool.state()["daemon_pid"] != 999999
    assert run("stop") == 0


def test_stop_refuses_a_daemon_it_did_not_start(tool, capsys):
    foreign = FakeMpsDaemon(tool.root / "foreign" / "pipe").start()
    try:
        assert run("stop", "--pipe-dir", str(foreign.pipe_dir)) == 1
        err = capsys.readouterr().err
        assert "no daemon started by `unilab mps start`" in err and "echo quit" in err
        assert foreign.commands == []  # no quit was sent
    finally:
        foreign.stop()


def test_stop_refuses_when_the_recorded_start_time_differs(tool, capsys):
    assert run("start") == 0
    state_file = tool.base() / STATE_FILE
    good = state_file.read_text()
    state = json.loads(good)
    state["daemon_start_time"] += 1  # as if the pid had been reused by another process
    state_file.write_text(json.dumps(state))
    assert run("stop") == 1
    assert "start time differs" in capsys.readouterr().err
    assert alive(state["daemon_pid"]) and "cmd quit" not in tool.control_log()
    state_file.write_text(good)
    assert run("stop") == 0 and not alive(state["daemon_pid"])


def test_stop_when_the_daemon_is_already_gone_drops_the_record(tool, capsys):
    assert run("start") == 0
    pid = tool.state()["daemon_pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60  # a bound for a hang only: a loaded machine delays the fake daemon's exit
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run("stop") == 0
    assert "not running any more" in capsys.readouterr().err
    assert not (tool.base() / STATE_FILE).exists()


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
def test_stop_waits_for_a_daemon_slow_to_take_quit(tool, capsys, monkeypatch):
    """A daemon whose clients are still exiting answers `quit` late: stop waits for its exit up to --timeout
    rather than failing at the first unanswered `quit`, and says what to do when even that runs out."""
    from unilab.mps import daemon

    monkeypatch.setattr(daemon, "QUIT_ANSWER_S", 0.3)
    tool.env["FAKE_MPS_QUIT_DELAY"] = "0.8"
    assert run("start") == 0
    pid = tool.state()["daemon_pid"]
    capsys.readouterr()
    assert run("stop", "--timeout", "60") == 0
    assert "stopped the control daemon" in capsys.readouterr().err
    assert not alive(pid) and not (tool.base() / STATE_FILE).exists()

    tool.env["FAKE_MPS_QUIT_DELAY"] = "2.5"
    assert run("start") == 0
    pid = tool.state()["daemon_pid"]
    capsys.readouterr()
    assert run("stop", "--timeout", "1") == 1
    err = capsys.readouterr().err
    assert "did not take `quit` and is still running 1 s later" in err and "longer --timeout" in err
    assert (tool.base() / STATE_FILE).exists()  # the record stays for the next stop
    deadline = time.monotonic() + 30  # a loaded machine delays the fake daemon's exit
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run("stop") == 0 and "not running any more" in capsys.readouterr().err


def test_start_times_out_when_the_daemon_never_answers(tool, capsys):
    tool.env["FAKE_MPS_START"] = "nothing"
    assert run("start", "--timeout", "0.5") == 1
    assert "did not answer get_server_list within 0.5 s" in capsys.readouterr().err
    assert not (tool.base() / STATE_FILE).exists()


def test_start_reports_a_failing_control_binary(tool, capsys):
    tool.env["FAKE_MPS_START"] = "fail"
    assert run("start") == 1
    assert "already running" in capsys.readouterr().err


def test_start_without_the_control_binary(tool, capsys):
    tool.env["PATH"] = str(tool.root / "empty")
    assert run("start") == 2  # refused: a prerequisite the host does not meet
    assert "'nvidia-cuda-mps-control' is not on PATH" in capsys.readouterr().err


def test_status_is_read_only(tool, daemon, short_tmp, capsys):
    """A daemon not started by unilab: status asks only get_server_list/get_client_list and writes nothing."""
    daemon.servers = {4242: [111, 222]}
    tool.env["CUDA_MPS_PIPE_DIRECTORY"] = str(daemon.pipe_dir)

    def snapshot():
        return sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in short_tmp.rglob("*"))

    before = snapshot()
    assert run("status", "--json") == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["pipe_directory"] == str(daemon.pipe_dir) and entry["source"] == "$CUDA_MPS_PIPE_DIRECTORY"
    assert entry["control_socket"] and entry["answers"] and not entry["started_by_unilab"]
    assert entry["daemon_pid"] == os.getpid()  # the in-process fake writes the test's pid
    assert entry["server_pids"] == [4242] and entry["clients"] == {"4242": [111, 222]}
    assert run("status") == 0
    assert "server 4242: clients 111, 222" in capsys.readouterr().out
    assert snapshot() == before
    assert not tool.mps_root.exists()
    assert set(daemon.commands) == {"get_server_list", "get_client_list 4242"}


def test_status_lists_a_unilab_daemon_and_an_absent_ambient_pipe(tool, capsys):
    tool.env["FAKE_MPS_SERVERS"] = json.dumps({"900": [901, 902]})
    tool.env["CUDA_MPS_PIPE_DIRECTORY"] = str(tool.root / "nothing-here")
    assert run("start") == 0
    capsys.readouterr()
    assert run("status", "--json") == 0
    ours, ambient = json.loads(capsys.readouterr().out)
    assert ours["started_by_unilab"] and ours["recorded_daemon_alive"] and ours["answers"]
    assert ours["daemon_pid"] == ours["recorded_daemon_pid"] == tool.state()["daemon_pid"]
    assert ours["server_pids"] == [900] and ours["clients"] == {"900": [901, 902]}
    assert ambient["directory_exists"] is False and ambient["answers"] is False
    assert not (tool.root / "nothing-here").exists()
    assert run("stop") == 0


@pytest.mark.parametrize("make, said", [
    (lambda p: p.write_text(""), "a regular file, not a directory"),
    (lambda p: (p.symlink_to(p.with_name("b")), p.with_name("b").symlink_to(p)), "a symlink loop, not a directory"),
    (lambda p: p.symlink_to("nowhere"), "a dangling symlink (to nowhere), not a directory"),
    (lambda p: (p.with_name("f").write_text(""), p.symlink_to("f")), "a symlink to a regular file, not a directory"),
    (lambda p: None, "no such directory"),
])
def test_status_says_what_a_pipe_directory_that_is_not_one_is(tool, capsys, make, said):
    pipe = tool.root / "pipe"
    make(pipe)
    tool.env["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe)
    assert run("status", "--json") == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["directory_exists"] is False and entry["not_a_directory"] == said
    assert run("status") == 0
    assert capsys.readouterr().out.splitlines()[1] == f"  {said}"


def test_env_prints_the_export_lines(tool, capsys):
    assert run("env") == 1
    assert "no daemon started by `unilab mps start` is recorded" in capsys.readouterr().err
    assert run("start", "--gpu", "1") == 0
    started = capsys.readouterr().out
    assert run("env") == 0
    out = capsys.readouterr().out
    assert out == started
    assert out.splitlines()[2] == f"export CUDA_VISIBLE_DEVICES={GPU_B.uuid}"
    assert run("env", "--gpu", GPU_B.uuid[:12]) == 0 and capsys.readouterr().out == started
    assert run("env", "--gpu", "0") == 1
    assert run("stop", "--gpu", "1") == 0


def test_start_all_gpus_serves_every_visible_gpu_in_cuda_order(tool, capsys):
    """One daemon for a node's data-parallel ranks: its clients' cuda:i is the i-th visible GPU."""
    tool.env["CUDA_VISIBLE_DEVICES"] = "1,0"
    assert run("start", "--all-gpus") == 0
    out = capsys.readouterr().out.splitlines()
    base = tool.mps_root / "all-gpus"
    both = f"{GPU_B.uuid},{GPU_A.uuid}"
    assert out == [f"export CUDA_MPS_PIPE_DIRECTORY={base}/pipe", f"export CUDA_MPS_LOG_DIRECTORY={base}/log",
                   f"export CUDA_VISIBLE_DEVICES={both}"]
    state = json.loads((base / STATE_FILE).read_text())
    assert state["gpu_uuid"] == both and state["gpu_index"] is None
    assert f"CUDA_VISIBLE_DEVICES={both}" in (base / "log" / "control.log").read_text()  # the daemon's environment
    # the probe of rank 1 (cuda:1 under these exports) resolves the second visible GPU, served by this daemon
    env = {**tool.env, "CUDA_MPS_PIPE_DIRECTORY": f"{base}/pipe", "CUDA_VISIBLE_DEVICES": both}
    evidence = probe_cuda_process_sharing("mps", "cuda:1", "cuda:1", backend="mjwarp",
                                          host=HostFacts(platform="linux", env=env, nvml=FakeNvml(), tmp=tool.tmp))
    assert evidence.gpu_uuid == GPU_A.uuid and evidence.pipe_directory == f"{base}/pipe"
    assert run("stop", "--pipe-dir", f"{base}/pipe") == 0
    assert started_pids(tool.root) and not (base / STATE_FILE).exists()


def test_start_all_gpus_refuses_exclusive_and_a_gpu(tool, capsys):
    tool.root_user = True
    assert run("start", "--all-gpus", "--exclusive") == 2
    assert "--exclusive with --all-gpus" in capsys.readouterr().err
    assert tool.smi_calls() == [] and started_pids(tool.root) == []
    with pytest.raises(SystemExit) as info:
        run("start", "--all-gpus", "--gpu", "0")
    assert info.value.code == 2


def test_exclusive_needs_root(tool, capsys):
    assert run("start", "--exclusive") == 2
    assert "needs root" in capsys.readouterr().err
    assert tool.smi_calls() == [] and started_pids(tool.root) == []
    assert not tool.mps_root.exists()


def test_exclusive_sets_and_restores_the_compute_mode(tool, capsys):
    tool.root_user = True
    assert run("start", "--exclusive") == 0
    assert tool.smi_calls() == [f"-i {GPU_A.uuid} -c EXCLUSIVE_PROCESS"]
    state = tool.state()
    assert state["compute_mode_set"] is True and state["previous_compute_mode"] == "DEFAULT"
    assert run("stop") == 0
    assert tool.smi_calls()[-1] == f"-i {GPU_A.uuid} -c DEFAULT"


def test_exclusive_when_nvidia_smi_fails_starts_nothing(tool, capsys):
    tool.root_user = True
    tool.env["FAKE_SMI_RC"] = "6"
    assert run("start", "--exclusive") == 1
    assert "nvidia-smi" in capsys.readouterr().err
    assert started_pids(tool.root) == [] and not (tool.base() / STATE_FILE).exists()


def test_exclusive_leaves_an_exclusive_gpu_alone(tool):
    tool.root_user = True
    tool.nvml = FakeNvml(devices=[GpuInfo(0, GPU_A.uuid, GPU_A.name, False, "EXCLUSIVE_PROCESS")])
    assert run("start", "--exclusive") == 0
    assert tool.smi_calls() == [] and tool.state()["compute_mode_set"] is False
    assert run("stop") == 0 and tool.smi_calls() == []


def test_foreground_quits_the_daemon_on_ctrl_c(tool):
    driver = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from fakes import FakeNvml\n"
        "from unilab.mps.daemon import StartOptions, start\n"
        "from unilab.mps.host import HostFacts\n"
        "host = HostFacts(env=json.loads(sys.argv[1]), nvml=FakeNvml(), tmp=sys.argv[2])\n"
        "sys.exit(start(host, StartOptions(foreground=True)))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", driver, json.dumps(tool.env), str(tool.tmp)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        state_file = tool.base() / STATE_FILE
        deadline = time.monotonic() + 20
        while not state_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state_file.exists(), proc.stderr.read() if proc.poll() is not None else "no state file"
        state = tool.state()
        assert state["foreground"] is True and alive(state["daemon_pid"])
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        if state_file.exists() and alive(tool.state()["daemon_pid"]):  # a daemon left behind holds the pipes
            os.kill(tool.state()["daemon_pid"], signal.SIGKILL)
        if proc.returncode is None:
            proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "export CUDA_MPS_PIPE_DIRECTORY=" in out
    assert "cmd quit" in tool.control_log()
    assert not alive(state["daemon_pid"]) and not state_file.exists()


def test_the_probe_fix_and_start_share_one_directory_convention(tool, capsys):
    """train's fix names the directories `unilab mps start` uses for the probed GPU: the same exports,
    and a daemon started from the fix is where start looks, so start refuses to add a second one."""
    if os.path.exists("/tmp/nvidia-mps/control"):
        pytest.skip("a real MPS daemon uses NVIDIA's default directory on this host")
    host = HostFacts(platform="linux", env=dict(tool.env), nvml=FakeNvml(), tmp=tool.tmp)
    with pytest.raises(CudaProcessSharingError) as info:
        probe_cuda_process_sharing("mps", "cuda:1", "cuda:1", backend="mjwarp", host=host)
    fix, base = info.value.fix, tool.base(GPU_B)
    assert fix[0] == f"mkdir -p -m 700 {tool.mps_root} {base} {base}/pipe {base}/log"

    assert run("start", "--gpu", "1") == 0
    started = capsys.readouterr().out.splitlines()
    assert run("stop", "--gpu", "1") == 0
    assert [line for line in fix if line.startswith("export ")] == started[:2]

    subprocess.run(["sh", "-ec", "\n".join(fix)], env=tool.env, check=True, timeout=30)
    deadline = time.monotonic() + 60  # a bound for a hang only
    while not (base / "pipe" / "control").is_socket() and time.monotonic() < deadline:
        time.sleep(0.05)
    for path in (tool.mps_root, base, base / "pipe", base / "log"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert run("start", "--gpu", GPU_B.uuid) == 1
    assert f"already answers at {base / 'pipe'}" in capsys.readouterr().err


def test_resolve_gpu_by_index_uuid_and_visible_devices():
    host = HostFacts(env={}, nvml=FakeNvml())
    assert resolve_gpu(host, None) == GPU_A
    assert resolve_gpu(host, "1") == GPU_B
    assert resolve_gpu(host, GPU_B.uuid[:12]) == GPU_B
    assert resolve_gpu(HostFacts(env={"CUDA_VISIBLE_DEVICES": "1"}, nvml=FakeNvml()), None) == GPU_B
    mig = GpuInfo(0, "GPU-cccc", "Fake", True, "DEFAULT")
    refusals = [("names no single GPU", host, "7"),
                ("NVML cannot be read", HostFacts(env={}, nvml=FakeNvml(available=False)), None),
                ("MIG", HostFacts(env={}, nvml=FakeNvml(devices=[mig])), None)]
    for match, on, spec in refusals:
        with pytest.raises(MpsToolError, match=match) as info:
            resolve_gpu(on, spec)
        assert info.value.code == 2  # refused: bad input or a host without a usable GPU


def test_default_root_and_private_dirs(short_tmp):
    assert default_root(1234) == Path("/tmp/unilab-mps-1234")
    assert default_root(7, short_tmp) == short_tmp / "unilab-mps-7"
    # One convention whatever the session: $XDG_RUNTIME_DIR does not move the daemons.
    xdg = HostFacts(env={"XDG_RUNTIME_DIR": "/run/user/7"}, nvml=FakeNvml())
    assert xdg.root() == Path(f"/tmp/unilab-mps-{os.geteuid()}")
    wide = short_tmp / "wide"
    wide.mkdir(mode=0o755)
    ensure_private_dir(wide, os.geteuid())
    assert stat.S_IMODE(os.stat(wide).st_mode) == 0o700
    (short_tmp / "link").symlink_to(wide)
    with pytest.raises(MpsToolError, match="not a directory"):
        ensure_private_dir(short_tmp / "link", os.geteuid())
    with pytest.raises(MpsToolError, match="belongs to uid"):
        ensure_private_dir(wide, os.geteuid() + 1)


# doctor: the probe of `train`, nothing else


@pytest.fixture
def no_launch(monkeypatch):
    import unilab.launcher.launch as launch_mod

    def refuse(*_a, **_k):
        raise AssertionError("nothing may be launched")

    monkeypatch.setattr(launch_mod, "launch", refuse)


@pytest.mark.parametrize("nvml_available, needle", [(False, "nvml_available"), (True, "mps_pipe_directory")])
def test_doctor_prints_the_same_diagnostic_as_train(tmp_path, monkeypatch, capsys, no_launch, nvml_available, needle):
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml(available=nvml_available))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-daemon"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as exc:
        train_main(["+execution=mps", f"training.run.log_dir={log_dir}"])
    assert exc.value.code == 2
    train_err = capsys.readouterr().err
    assert run("doctor", "+execution=mps", f"training.run.log_dir={log_dir}") == 2
    doctor = capsys.readouterr()
    # train's stderr also carries Hydra's "Error executing job with overrides" line before the diagnostic.
    assert doctor.err.startswith("unilab: training.mps.cuda_process_sharing cannot be honoured")
    assert train_err.endswith(doctor.err) and needle in doctor.err and doctor.out == ""
    assert not log_dir.exists()


@pytest.mark.parametrize("args", [(), ("--algo", "fastsac")])
def test_doctor_without_an_execution_mode_diagnoses_mps(tmp_path, monkeypatch, capsys, mps_env, no_launch, args):
    """`unilab mps doctor` alone probes the MPS mode (not the default mode's training device)."""
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml())
    for key, value in mps_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert run("doctor", *args) == 0
    assert json.loads(capsys.readouterr().out)["configured"] == "mps"
    assert run("doctor", "+execution=default") == 0  # a mode chosen is kept
    assert json.loads(capsys.readouterr().out)["configured"] is None


def test_doctor_prints_the_evidence_when_the_probe_passes(tmp_path, monkeypatch, capsys, mps_env, no_launch):
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml())
    for key, value in mps_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log_dir = tmp_path / "runs"
    assert run("doctor", "--algo", "fastsac", "+execution=mps", f"training.run.log_dir={log_dir}") == 0
    evidence = json.loads(capsys.readouterr().out)
    assert evidence["configured"] == "mps" and evidence["validated"] is True
    assert evidence["gpu_uuid"] == GPU_A.uuid and evidence["effective"] is None
    assert not log_dir.exists()


def test_doctor_rejects_hydra_flags(capsys):
    assert run("doctor", "-m", "+execution=default,mps") == 2
    assert "overrides only" in capsys.readouterr().err


@pytest.mark.parametrize("args, code", [(["doctor", "+execution=mps"], 2), (["status", "--json"], 0)])
def test_console_commands_never_import_cuda_libraries(short_tmp, args, code):
    """Fresh interpreter: doctor fails closed on this host (exit 2), status reads; neither imports torch/warp."""
    script = (
        "import sys\n"
        "from unilab.cli.tools import main\n"
        "code = main(sys.argv[1:])\n"
        "print('RESULT', code, *(m in sys.modules for m in ('torch', 'warp', 'mujoco_warp')))\n"
    )
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(short_tmp / "none"))
    root = default_root(os.geteuid())  # the real one: these commands only read it
    root_existed = root.exists()
    done = subprocess.run([sys.executable, "-c", script, "mps", *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert f"RESULT {code} False False False" in done.stdout, done.stdout + done.stderr
    if code == 2:
        assert "cannot be honoured" in done.stderr
    assert not (short_tmp / "none").exists() and root.exists() == root_existed
