"""A checkpoint is data: one whose pickle would call a function (here os.system) is refused by every command
that reads checkpoints (train's resume, play, eval, export) with exit 2, before anything in it runs and
before anything is written; the checkpoints unilab writes load under the same rules."""

from __future__ import annotations

import os

import pytest
import torch

from train_calls import run_train, tree_digest
from unilab.cli.tools import main as tools_main


class RunsACommand:
    """Unpickled by a full pickle loader, this object runs `command` (torch.load with weights_only=False did)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


@pytest.fixture
def planted(tmp_path, spies):
    """(run, the crafted checkpoint in it as its latest, the file the checkpoint's command would create)."""
    log_dir = tmp_path / "runs"
    assert run_train("+preset=cpu_smoke", f"training.run.log_dir={log_dir}", "training.run.run_name=r") == 0
    run = log_dir / "r"
    marker = tmp_path / "ran"
    (run / "checkpoints").mkdir()
    crafted = run / "checkpoints" / "iter_0000020.pt"
    torch.save({"iteration": 20, "env_steps": 320, "learner": {"actor": RunsACommand(f"touch {marker}")}}, crafted)
    (run / "checkpoints" / "latest.pt").symlink_to(crafted.name)
    spies[0].calls.clear()
    return run, crafted, marker


def test_a_checkpoint_that_would_run_code_is_refused_everywhere(planted, spies, capsys):
    run, crafted, marker = planted
    before = tree_digest(run, contents_of_lock=False)
    entry_points = {
        "train resume": lambda: run_train("+preset=cpu_smoke", f"training.run.log_dir={run.parent}",
                                          f"training.run.resume={run}"),
        "play": lambda: tools_main(["play", str(run), "--checkpoint", str(crafted), "--device", "cpu"]),
        "eval": lambda: tools_main(["eval", str(run), "--checkpoint", str(crafted), "--device", "cpu"]),
        "export": lambda: tools_main(["export", str(run), "--checkpoint", str(crafted)]),
    }
    for name, call in entry_points.items():
        assert call() == 2, name
        err = capsys.readouterr().err
        assert f"{crafted}: refused: it names the Python global posix.system" in err, (name, err)
        assert "Traceback" not in err, name
        assert not marker.exists(), f"{name} ran the checkpoint's command"
        # nothing written: no segment archived, no report, no model, no run (run.lock holds the last holder's pid)
        assert tree_digest(run, contents_of_lock=False) == before, name
    assert not spies[0].calls


def test_a_resume_does_not_step_over_a_crafted_latest_checkpoint(planted, capsys):
    """An older intact checkpoint is no way around the refusal: the crafted file is no torn save."""
    from unilab.rundir.checkpoint import save_checkpoint

    run, crafted, marker = planted
    save_checkpoint(run, 10, 160, {})
    (run / "checkpoints" / "latest.pt").unlink()  # latest back at the crafted iteration 20
    (run / "checkpoints" / "latest.pt").symlink_to(crafted.name)
    assert run_train("+preset=cpu_smoke", f"training.run.log_dir={run.parent}", f"training.run.resume={run}") == 2
    assert "refused: it names the Python global posix.system" in capsys.readouterr().err
    assert not marker.exists() and not (run / "segments").exists()


def test_the_learners_checkpoints_load_as_plain_data(tmp_path):
    """What save_checkpoint's callers store (module and optimiser state after an update, normalisers, schedules,
    the structure and size records) reads back under the weights-only rules, for every algorithm."""
    from unilab.algos.base import make_learner
    from unilab.registry import instantiate
    from unilab.rundir.checkpoint import find_intact_checkpoint, save_checkpoint
    from unilab.rundir.run_config import structure_of
    from unilab.algos.transition import transition_shapes

    for name in ("fastsac", "flashsac", "warpsac"):
        algo = instantiate("algo", {"name": name, "replay_capacity": 64, "batch_size": 8, "learning_starts": 1,
                                     "actor_hidden_dim": 32, "critic_hidden_dim": 32})
        learner = make_learner(algo, 6, 7, 3, "cpu", 0, num_envs=8)
        for _ in range(2):
            learner.add({k: torch.randn(8, *shape) for k, shape in transition_shapes(6, 7, 3).items()})
        learner.update()
        meta = {"config": structure_of({"algo": {"name": name, "critic_hidden_dim": 64}, "task": {"name": "t"}}),
                "dims": {"obs_dim": 6, "critic_obs_dim": 7, "action_dim": 3}}
        run = tmp_path / name
        run.mkdir()
        save_checkpoint(run, 1, 8, learner.state_dict(), meta=meta)
        state = find_intact_checkpoint(str(run)).state
        assert state["learner"]["actor_opt"]["state"], name  # the optimiser has stepped: its moments are saved
        assert state["config"] == meta["config"] and state["dims"] == meta["dims"]
        again = make_learner(algo, 6, 7, 3, "cpu", 1, num_envs=8)
        again.load_state_dict(state["learner"])
        learner.publish_policy()  # acting reads the weights published last
        obs = torch.randn(4, 6)
        torch.testing.assert_close(again.act(obs, deterministic=True), learner.act(obs, deterministic=True))


def test_a_latest_link_that_leads_to_another_run_is_not_followed(tmp_path, spies, capsys):
    """latest.pt is followed only to a file beside it: one naming another run's checkpoint would have a resume
    continue that other run (and play, eval and export read it) instead of the run named."""
    from unilab.rundir.checkpoint import save_checkpoint

    log_dir = tmp_path / "runs"
    for name in ("mine", "other"):
        assert run_train("+preset=cpu_smoke", f"training.run.log_dir={log_dir}", f"training.run.run_name={name}") == 0
        save_checkpoint(log_dir / name, 10, 160, {})
    mine, other = log_dir / "mine", log_dir / "other"
    (mine / "checkpoints" / "latest.pt").unlink()
    (mine / "checkpoints" / "latest.pt").symlink_to(other / "checkpoints" / "iter_0000010.pt")
    spies[0].calls.clear()
    before = {run: tree_digest(run, contents_of_lock=False) for run in (mine, other)}
    calls = {
        "train resume": lambda: run_train("+preset=cpu_smoke", f"training.run.log_dir={log_dir}", f"training.run.resume={mine}"),
        "play": lambda: tools_main(["play", str(mine), "--device", "cpu"]),
        "eval": lambda: tools_main(["eval", str(mine), "--device", "cpu"]),
        "export": lambda: tools_main(["export", str(mine)]),
    }
    for name, call in calls.items():
        assert call() == 2, name
        err = capsys.readouterr().err
        assert f"{mine / 'checkpoints' / 'latest.pt'} leads out of {mine / 'checkpoints'}" in err, (name, err)
        assert "Traceback" not in err, name
        assert {run: tree_digest(run, contents_of_lock=False) for run in (mine, other)} == before, name
    assert not spies[0].calls


def test_refused_is_for_files_that_name_code_unreadable_for_the_rest(tmp_path):
    from unilab.rundir.checkpoint import UnsafeCheckpoint, read_checkpoint

    marker = tmp_path / "ran"
    legacy = tmp_path / "legacy.pt"  # torch's pre-zip format: its own unpickler path
    torch.save({"iteration": 1, "learner": RunsACommand(f"touch {marker}")}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(UnsafeCheckpoint, match="legacy.pt: refused: it names the Python global posix.system"):
        read_checkpoint(legacy)
    assert not marker.exists()
    numpy = tmp_path / "numpy.pt"  # a numpy number is data, but no type a unilab checkpoint holds
    import numpy as np

    torch.save({"iteration": 1, "env_steps": np.int64(8), "learner": {}}, numpy)
    with pytest.raises(UnsafeCheckpoint, match=r"the Python globals numpy\.\S+, numpy\.dtype"):
        read_checkpoint(numpy)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError) as caught:
        read_checkpoint(garbage)
    assert not isinstance(caught.value, UnsafeCheckpoint)
    # torch's reason, not its advice to load the file with weights_only=False
    message = str(caught.value)
    assert message.startswith(f"{garbage}: unreadable checkpoint (UnpicklingError: ") and "weights_only" not in message
    assert len(message.splitlines()) == 1
