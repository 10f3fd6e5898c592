"""Ranks started by torchrun (or srun): two `torchrun --nnodes 2 --node-rank 0|1` on this machine train one
2-rank CPU run (gloo); a rank killed mid-run fails the other through the rank watch, naming it; the
rank a cluster launcher makes of a process is read from its environment and checked at composition."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_calls import run_train

from unilab.cli.tools import main as unilab_main
from unilab.launcher.supervisor import STOP_GRACE_S
from unilab.runtime.rank_watch import BEAT_S, SILENT_AFTER_S
from unilab.world import WorldError, from_environment, rank_seed

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["+preset=cpu_smoke", "task.num_envs=8", "training.outputs.logger=[]", "training.outputs.no_play=true", "algo.batch_size=32"]
RUN = "tr"  # training.run.run_name: the same on both nodes
# A killed rank is named by the other within the rank watch's silence bound (SILENT_AFTER_S + BEAT_S); that rank then
# stops within the supervisor's grace (STOP_GRACE_S). The cause it records names the rank watch; the tests wait
# RUN_TIMEOUT_S for it, a bound for a hang only (without the watch, the survivor would wait in its collective).
RUN_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env() -> dict[str, str]:
    """This checkout's package, and no cluster launcher variables of the shell the tests run in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TORCHELASTIC_", "MASTER_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


class Node:
    """One `torchrun --nnodes 2 --node-rank N` process (its own session: stopped as a group at the end)."""

    def __init__(self, node_rank: int, port: int, log_dir: Path, *overrides: str):
        log_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log = log_dir.parent / f"node{node_rank}.log"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node_rank),
               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
               "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={log_dir}", f"training.run.run_name={RUN}",
               *overrides]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=clean_env(),
                                         start_new_session=True)

    def wait(self, timeout: float = RUN_TIMEOUT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"torchrun did not end within {timeout:g} s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Whatever is left of this node (its torchrun, launcher, learner, collector)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def nodes():
    started: list[Node] = []
    yield started
    for node in started:
        node.stop()


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def wait_for(path: Path, proc_nodes: list[Node], timeout: float = RUN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and path.stat().st_size):
        if time.monotonic() > deadline or any(n.proc.poll() is not None for n in proc_nodes):
            pytest.fail(f"{path} never appeared:\n" + "\n".join(n.output()[-2000:] for n in proc_nodes))
        time.sleep(0.5)


# ---------------------------------------------------------------- two nodes, one run


@pytest.mark.integration
def test_two_torchrun_nodes_train_one_run_in_sync(tmp_path, nodes):
    log_dir = tmp_path / "runs"  # both nodes see it: a shared filesystem
    port = free_port()
    nodes += [Node(1, port, log_dir, "algo.max_iterations=10"), Node(0, port, log_dir, "algo.max_iterations=10")]
    codes = [node.wait() for node in nodes]
    assert codes == [0, 0], "\n".join(n.output()[-3000:] for n in nodes)
    run = log_dir / RUN
    summary = read_json(run / "run_summary.json")
    assert summary["status"] == "completed" and summary["iterations"] == 10
    # the learners' own check, after training: both ranks' actor parameters gathered and compared
    dp = summary["data_parallel"]
    assert dp["world_size"] == 2 and dp["actor_params_equal"] is True, dp
    rank1 = read_json(run / "rank_1" / "run_summary.json")
    assert rank1["status"] == "completed" and rank1["data_parallel"] == dp
    rows = [json.loads(line) for line in (run / "rank_1" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["critic_loss"] is not None for r in rows), "rank 1 never updated"
    manifest = read_json(run / "runtime_manifest.json")
    assert manifest["launched_by"] == "torchrun" and manifest["world_size"] == 2
    entries = manifest["ranks"]
    assert [(e["rank"], e["node_rank"], e["local_rank"]) for e in entries] == [(0, 0, 0), (1, 1, 0)]
    assert all(e["hostname"] == socket.gethostname() and e["launcher_pid"] for e in entries)
    assert entries[0]["launcher_pid"] != entries[1]["launcher_pid"]  # one launcher per rank
    assert {p.name for p in (run / "logs").iterdir()} == {"learner.stderr", "collector.stderr",
                                                         "learner_rank1.stderr", "collector_rank1.stderr"}
    assert summary["notes"] == []  # every rank's entry was found (shared filesystem)


# ---------------------------------------------------------------- a rank killed mid-run


def _training(nodes: list[Node], rank_dir: Path) -> None:
    """Wait until rank 1 has written metrics rows (both ranks are past their rendezvous, training)."""
    wait_for(rank_dir / "metrics.jsonl", nodes)


@pytest.mark.integration
def test_a_killed_learner_fails_the_other_node_naming_its_rank(tmp_path, nodes):
    """Each node on its own disk (no shared filesystem); kill -9 of node 1's learner mid-run."""
    dirs = [tmp_path / "node0" / "runs", tmp_path / "node1" / "runs"]
    port = free_port()
    nodes += [Node(1, port, dirs[1], "algo.max_iterations=100000"), Node(0, port, dirs[0], "algo.max_iterations=100000")]
    rank1_dir = dirs[1] / RUN / "rank_1"
    _training(nodes, rank1_dir)
    (entry,) = read_json(rank1_dir / "runtime_manifest.json")["ranks"]
    os.kill(entry["learner_pid"], signal.SIGKILL)
    node1, node0 = nodes
    assert node1.wait() == 1, node1.output()[-3000:]
    assert node0.wait() == 1, node0.output()[-3000:]
    summary = read_json(dirs[0] / RUN / "run_summary.json")
    assert summary["status"] == "failed" and summary["failed_role"] == "rank[1]", summary["cause"]
    assert summary["cause"].startswith("rank_failed: rank 1 ("), summary["cause"]
    assert "learner_died" in read_json(rank1_dir / "run_summary.json")["cause"]  # its own launcher saw it die
    # rank 0 stopped as after a stop request: its stop-time checkpoint (a gloo collective raises before the step)
    iterations = summary["iterations"]
    assert iterations and (dirs[0] / RUN / "checkpoints" / f"iter_{iterations:07d}.pt").is_file(), summary
    # no shared filesystem: rank 0 says what is missing, and merge-ranks gathers the nodes' copies
    assert any("unilab merge-ranks" in note for note in summary["notes"]), summary["notes"]
    target = dirs[0] / RUN
    assert [e["rank"] for e in read_json(target / "runtime_manifest.json")["ranks"]] == [0]
    assert unilab_main(["merge-ranks", str(target), str(dirs[1] / RUN)]) == 0
    ranks = read_json(target / "runtime_manifest.json")["ranks"]
    assert [(e["rank"], e["learner_pid"]) for e in ranks] == [(0, ranks[0]["learner_pid"]), (1, entry["learner_pid"])]
    assert (target / "rank_1" / "metrics.jsonl").is_file() and (target / "logs" / "learner_rank1.stderr").is_file()
    assert unilab_main(["merge-ranks", str(target), str(dirs[1] / RUN)]) == 2  # rank 1 is there already


@pytest.mark.integration
def test_a_killed_launcher_fails_the_other_node_naming_its_rank(tmp_path, nodes):
    """kill -9 of node 1's launcher (its torchrun worker): its learner leaves a mark as it stops."""
    log_dir = tmp_path / "runs"
    port = free_port()
    nodes += [Node(1, port, log_dir, "algo.max_iterations=100000"), Node(0, port, log_dir, "algo.max_iterations=100000")]
    rank1_dir = log_dir / RUN / "rank_1"
    _training(nodes, rank1_dir)
    (entry,) = read_json(rank1_dir / "runtime_manifest.json")["ranks"]
    os.kill(entry["launcher_pid"], signal.SIGKILL)
    node1, node0 = nodes
    assert node1.wait() == 1, node1.output()[-3000:]  # the worker it started was killed
    # rank 0's summary is complete once node 0 has ended (reading it as soon as node 1 ended raced its writing)
    assert node0.wait() != 0, node0.output()[-3000:]
    summary = read_json(log_dir / RUN / "run_summary.json")
    assert summary["status"] == "failed" and summary["failed_role"] == "rank[1]", summary["cause"]
    assert summary["cause"].startswith("rank_failed: rank 1 (") and "launcher is gone" in summary["cause"]


# ---------------------------------------------------------------- srun without torchrun: a rank that never joins


@pytest.mark.integration
def test_a_rank_that_never_joins_fails_the_rendezvous_in_bounded_time(tmp_path):
    """Under srun each task is a rank's launcher (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, MASTER_ADDR/PORT);
    here rank 1 of 2 never starts."""
    env = {**clean_env(), "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "4711",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    cmd = [sys.executable, "-m", "unilab.cli.train", *SMOKE, f"training.run.log_dir={tmp_path}",
           "training.loop.dist_timeout_s=5"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, env=env)
    assert done.returncode == 1, done.stderr[-3000:]  # its own 5 s bound ended the rendezvous (the cause says so)
    run = tmp_path / "fastsac_g1_walk_flat_job4711"  # the name every rank derives from the job id
    summary = read_json(run / "run_summary.json")
    assert summary["cause"].startswith("rendezvous_failed: rank 0 of 2"), summary["cause"]
    assert "did not form within 5 s" in summary["cause"] and "1/2" in summary["cause"]
    assert read_json(run / "runtime_manifest.json")["launched_by"] == "srun"


# ---------------------------------------------------------------- the rank, from the environment


TORCHRUN = {"TORCHELASTIC_RUN_ID": "none", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1",
            "MASTER_ADDR": "node-a", "MASTER_PORT": "29500"}


def test_torchrun_and_srun_environments_describe_a_rank():
    world = from_environment(TORCHRUN)
    assert (world.rank, world.world_size, world.local_rank, world.node_rank) == (3, 4, 1, 1)
    assert (world.master_addr, world.master_port, world.launched_by) == ("node-a", 29500, "torchrun")
    assert world.run_id is None  # torchrun's default --rdzv-id names nothing
    assert from_environment({**TORCHRUN, "TORCHELASTIC_RUN_ID": "exp7"}).default_run_name("fastsac", "walk") \
        == "fastsac_walk_exp7"
    assert from_environment({**TORCHRUN, "SLURM_JOB_ID": "99"}).run_id == "job99"  # torchrun inside an srun
    srun = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
            "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3", "MASTER_ADDR": "node-a", "MASTER_PORT": "29500"}
    world = from_environment(srun)
    assert (world.rank, world.world_size, world.local_rank, world.node_rank, world.launched_by) == \
        (5, 8, 1, 2, "srun")
    assert world.run_id == "job12_step3"
    # plain runs: no launcher, a one-task step, a Slurm job that asks for no rendezvous
    assert from_environment({}) is None
    assert from_environment({**srun, "SLURM_NTASKS": "1"}) is None
    assert from_environment({k: v for k, v in srun.items() if k != "MASTER_PORT"}) is None
    with pytest.raises(WorldError, match="RANK='x'"):
        from_environment({**TORCHRUN, "RANK": "x"})
    with pytest.raises(WorldError, match="RANK=4, WORLD_SIZE=4"):
        from_environment({**TORCHRUN, "RANK": "4"})
    with pytest.raises(WorldError, match="MASTER_PORT is not set"):
        from_environment({k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"})


def test_rank_seeds_follow_one_rule():
    # single-host ranks and torchrun ranks alike: training.run.seed + 1000 x the global rank
    assert [rank_seed(7, r) for r in range(3)] == [7, 1007, 2007]


# ---------------------------------------------------------------- composition: exit 2, nothing created


def _as_rank(monkeypatch, rank: int, **extra: str) -> None:
    for key, value in {**TORCHRUN, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                       "GROUP_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", **extra}.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("overrides,expected", [
    (["training.run.devices=[0,1]"], "training.run.devices=[0, 1] under torchrun (rank 1 of 2)"),
    (["training.run.resume=runs/x"], "training.run.resume under torchrun"),
    ([], "no run name under torchrun"),
])
def test_a_torchrun_rank_refuses_what_it_cannot_honour(monkeypatch, tmp_path, capsys, spies, overrides, expected):
    _as_rank(monkeypatch, 1)
    name = [] if not overrides else ["training.run.run_name=x"]
    assert run_train(*SMOKE, f"training.run.log_dir={tmp_path / 'runs'}", *name, *overrides) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and spies[0].calls == []


def test_a_torchrun_rank_takes_the_gpu_of_its_local_rank(monkeypatch, capsys, spies):
    _as_rank(monkeypatch, 1, LOCAL_RANK="1")
    assert run_train("training.run.device=cuda:1", "training.run.run_name=x") == 2
    assert "each rank takes cuda:LOCAL_RANK (here cuda:1)" in capsys.readouterr().err


def test_each_rank_claims_its_own_directory_of_the_shared_run(monkeypatch, tmp_path, capsys, spies):
    launcher = spies[0]
    log_dir = tmp_path / "runs"
    for rank in (1, 0):  # rank 1 may come first on a shared filesystem
        _as_rank(monkeypatch, rank)
        assert run_train(*SMOKE, f"training.run.log_dir={log_dir}", "training.run.run_name=shared") == 0
        prepared = launcher.calls[-1][0][0]
        prepared.lock.release()
        assert prepared.run_dir == log_dir / "shared" and prepared.world.rank == rank
        assert prepared.own_dir == (log_dir / "shared" / "rank_1" if rank else log_dir / "shared")
        assert (prepared.own_dir / "runtime_manifest.json").is_file() and (prepared.own_dir / "run_config.json").is_file()
    # a second run of the same name: refused on either rank, nothing else created
    for rank in (0, 1):
        _as_rank(monkeypatch, rank)
        assert run_train(*SMOKE, f"training.run.log_dir={log_dir}", "training.run.run_name=shared") == 2
        assert "give this run another training.run.run_name" in capsys.readouterr().err
    assert sorted(p.name for p in (log_dir / "shared").iterdir()) == [
        "rank_1", "run.lock", "run_config.json", "runtime_manifest.json"]


def test_merge_ranks_refuses_what_is_not_one_run(monkeypatch, tmp_path, capsys, spies):
    """Rank 0 and rank 1 prepared on their own disks (no training: the launcher is a spy)."""
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    for rank, log_dir in ((0, node0), (1, node1)):
        _as_rank(monkeypatch, rank)
        assert run_train(*SMOKE, f"training.run.log_dir={log_dir}", "training.run.run_name=r") == 0
        spies[0].calls[-1][0][0].lock.release()
    target, source = node0 / "r", node1 / "r"

    def refused(*dirs: Path) -> str:
        assert unilab_main(["merge-ranks", *map(str, dirs)]) == 2
        return capsys.readouterr().err

    assert "not rank 0's run directory" in refused(source, target)
    assert "no rank directory" in refused(target, node1)
    assert "not a directory" in refused(target, tmp_path / "missing")
    config = json.loads((source / "rank_1" / "run_config.json").read_text())
    config["training"]["run"]["seed"] = 2
    (source / "rank_1" / "run_config.json").write_text(json.dumps(config))
    assert "rank 1 ran with another config than rank 0 (training.run.seed)" in refused(target, source)
    assert not (target / "rank_1").exists()  # nothing copied by a refused merge
