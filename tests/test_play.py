"""`unilab play`'s rollout on a fake env (no kernels): how many steps it plays and what it reports."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import unilab.tasks
from unilab.runtime.play import play


class _FallingEnv:
    """Env i terminates at step lives[i], then restarts (as the batched envs auto-reset)."""

    device = "cpu"
    action_dim = 2
    max_episode_length = 1000

    def __init__(self, lives):
        self.lives = torch.tensor(lives)
        self.num_envs = len(lives)
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        self.steps = 0

    def reset(self):
        return torch.zeros(self.num_envs, 3)

    def step(self, action):
        self.steps += 1
        self.t += 1
        terminated = self.t >= self.lives
        self.t[terminated] = 0
        truncated = torch.zeros(self.num_envs, dtype=torch.bool)
        return torch.zeros(self.num_envs, 3), None, torch.ones(self.num_envs), terminated, truncated, {}


@pytest.fixture
def falling(monkeypatch):
    env = _FallingEnv([5, 9, 7])
    monkeypatch.setattr(unilab.tasks, "make_env", lambda *a: env)
    config = SimpleNamespace(task=None, sim=None, training=SimpleNamespace(run=SimpleNamespace(seed=0)))
    return env, config


def test_the_default_play_ends_when_every_env_has_ended_its_first_episode(falling, tmp_path):
    """A policy that falls early does not keep the rollout (and its video) going to the episode limit."""
    env, config = falling
    report = play(tmp_path, config, "cpu", agent="zero", out=tmp_path / "p.json")
    assert env.steps == report["steps"] == 9
    assert report["episodes_finished"] == 3 and report["terminated_fraction"] == 1.0
    assert report["mean_length"] == pytest.approx((5 + 9 + 7) / 3)
    assert json.loads((tmp_path / "p.json").read_text())["steps"] == 9


def test_steps_asked_for_are_played_in_full(falling, tmp_path):
    env, config = falling
    report = play(tmp_path, config, "cpu", agent="zero", steps=30, out=tmp_path / "p.json")
    assert env.steps == report["steps"] == 30
    assert report["mean_length"] == pytest.approx((5 + 9 + 7) / 3)  # still each env's first episode
