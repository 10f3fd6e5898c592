"""A learner that rehearsed a cycle before its first update (what `precompile` does while the collector
compiles) trains exactly as one that did not: same weights, optimiser moments, statistics and draws."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_learners import ACT, CRITIC_OBS, ENVS, FASTSAC, FLASHSAC, OBS, WARPSAC, transitions

from unilab.algos.base import make_learner

ALGOS = pytest.mark.parametrize("cfg", [FASTSAC, FLASHSAC, WARPSAC], ids=["fastsac", "flashsac", "warpsac"])


def chunks(count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    torch.manual_seed(seed)
    return [transitions(ENVS) for _ in range(count)]


def state(lrn) -> dict[str, torch.Tensor]:
    """Every tensor of the learner's checkpoint, flattened to name -> tensor."""
    out: dict[str, torch.Tensor] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}", sub)
        elif isinstance(value, (list, tuple)):
            for i, sub in enumerate(value):
                walk(f"{prefix}.{i}", sub)
        elif torch.is_tensor(value):
            out[prefix] = value.detach().clone()
        else:
            out[prefix] = torch.tensor(float(value)) if isinstance(value, (int, float)) else value

    walk("", lrn.state_dict())
    return out


def train(lrn, data: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    metrics = []
    torch.manual_seed(7)
    for batch in data:
        lrn.add(batch)
        if lrn.ready():
            metrics.append({k: v.clone() for k, v in lrn.update().items()})
        lrn.act(batch["obs"], deterministic=False)
    return metrics


@ALGOS
def test_a_rehearsed_cycle_leaves_no_trace_in_training(cfg):
    data = chunks(6, seed=3)
    plain = make_learner(cfg, OBS, CRITIC_OBS, ACT, "cpu", 0)
    rehearsed = make_learner(cfg, OBS, CRITIC_OBS, ACT, "cpu", 0)
    before = state(rehearsed)
    torch.manual_seed(11)
    rng = torch.get_rng_state()
    rehearsed._rehearse_cycle()
    assert torch.equal(torch.get_rng_state(), rng), "the rehearsal left the random state moved"
    assert rehearsed.replay.size == 0 and int(rehearsed.replay.size_tensor) == 0
    assert all(not buf.any() for buf in rehearsed.replay.storage.values()), "the replay kept rehearsal rows"
    after = state(rehearsed)
    assert after.keys() == before.keys()
    for key in before:
        assert torch.equal(after[key], before[key]) if torch.is_tensor(before[key]) else after[key] == before[key], key

    m_plain, m_rehearsed = train(plain, data), train(rehearsed, data)
    assert len(m_plain) == len(m_rehearsed) >= 3
    for a, b in zip(m_plain, m_rehearsed):
        for key in a:
            assert torch.equal(a[key], b[key]), key
    final_plain, final_rehearsed = state(plain), state(rehearsed)
    for key in final_plain:
        assert torch.equal(final_plain[key], final_rehearsed[key]) if torch.is_tensor(final_plain[key]) \
            else final_plain[key] == final_rehearsed[key], key


def test_the_rehearsal_does_change_a_learner_without_its_restore(monkeypatch):
    """The check above can fail: without the restore, one rehearsed cycle moves the weights."""
    lrn = make_learner(FASTSAC, OBS, CRITIC_OBS, ACT, "cpu", 0)
    before = state(lrn)
    monkeypatch.setattr(lrn, "load_state_dict", lambda sd: None)
    lrn._rehearse_cycle()
    after = state(lrn)
    assert any(not torch.equal(after[k], before[k]) for k in before if torch.is_tensor(before[k]))


def test_precompile_does_nothing_where_nothing_compiles_or_the_replay_holds_rows():
    # its own copy of the config: the learner holds the config it is given, and this test turns compile on there
    lrn = make_learner(dataclasses.replace(FASTSAC), OBS, CRITIC_OBS, ACT, "cpu", 0)  # CPU, no compile
    assert not lrn.compiled and lrn.precompile() is False
    lrn.add(chunks(1, seed=1)[0])
    lrn.cfg.compile = True
    assert lrn.precompile() is False and lrn.replay.size == ENVS
