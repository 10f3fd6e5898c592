"""The stages of an env's build as its `on_stage` hook hears them (unilab.tasks.common.base._Stages)."""

from __future__ import annotations

import threading

from unilab.tasks.common.base import _Stages


def test_each_stage_ends_with_its_seconds_and_a_long_one_says_it_is_still_going():
    said: list[str] = []
    ticked = threading.Event()

    def hook(text: str) -> None:
        said.append(text)
        if text.startswith("still"):
            ticked.set()

    stages = _Stages(hook)
    stages("model put on cpu (4 worlds)")
    with stages.ticking("compiling the physics kernels (the first time only: cached in /c)", every_s=0.01):
        assert ticked.wait(60)
    ended = len(said)
    stages("physics kernels ready (3 module variants)")
    assert said[0].startswith("model put on cpu (4 worlds) in ") and said[0].endswith(" s")
    assert said[1] == "compiling the physics kernels (the first time only: cached in /c)"
    assert said[2].startswith("still compiling the physics kernels: ") and said[2].endswith(" s so far")
    assert said[ended:] == [said[-1]] and said[-1].startswith("physics kernels ready (3 module variants) in ")


def test_without_a_hook_nothing_is_said_and_no_thread_starts():
    before = threading.active_count()
    stages = _Stages(None)
    with stages.ticking("compiling", every_s=0.01):
        assert threading.active_count() == before
    stages("ready")
