"""The learners' data-parallel group: joining it, naming a rank that is gone, and checking at the end that the
ranks trained in step (`ranks_in_sync`).

Joining: `init_method="env://"` with this rank's DistributedContext (MASTER_ADDR/MASTER_PORT: 127.0.0.1 and a
free port for `training.run.devices`, torchrun's store under torchrun, the job script's under srun), bounded by
`training.loop.dist_timeout_s` (also each collective's bound); a rank that never joins ends the wait with a
RendezvousError that says so.

Watching: a rank that dies mid-run fails its peers' next collective at once (gloo) or never (NCCL waits), and
neither says which rank it was. So every learner keeps a heartbeat in the rendezvous store (a counter it
raises every BEAT_S from a thread) and reads the others':
- a rank whose learner ends leaves a mark first (`leave`: finished, stopped or failed, and why);
- a rank whose counter does not move for SILENT_AFTER_S is gone (its learner was killed, or its node is down);
- a store that stays unreachable for UNREACHABLE_AFTER_S is gone with the process that hosts it (rank 0's
  learner under `training.run.devices`, torchrun's agent under torchrun).
The first such finding goes to the launcher as `WorldFailed`, naming the rank; the launcher stops this rank.
Bound: a failed rank is named by every other rank within SILENT_AFTER_S + BEAT_S of its last beat (at once
when it left a mark), and those ranks then stop like any failed run (unilab.launcher.supervisor's grace).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import traceback
from datetime import timedelta
from typing import Callable

import torch.distributed as dist

from unilab.world import DistributedContext

from .messages import ParentGone, why_stopped
from .protocol import WorldFailed, last_line

BEAT_S = 0.5
SILENT_AFTER_S = 10.0
UNREACHABLE_AFTER_S = 2.0  # a store that drops a beat or two is not yet gone
VERDICT_WAIT_S = SILENT_AFTER_S + 2 * BEAT_S  # how long a failed collective waits for the watch to name the rank
PREFIX = "unilab/ranks"
ERROR_CHARS = 300  # of an error's last line, quoted in a rank's mark or a rendezvous error


class RendezvousError(RuntimeError):
    """The learners' process group did not form (a rank that never joined, an unreachable MASTER_ADDR)."""


def join_world(world: DistributedContext, device, timeout_s: float, name: str,
               report: Callable[[WorldFailed], None]) -> RankWatch:
    """Join the default process group (NCCL on CUDA, gloo on the CPU) as `world.rank`, then start the watch."""
    os.environ.update(world.rendezvous_env())  # read by env://; the context is the one source of them
    try:
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            init_method="env://",
            rank=world.rank,
            world_size=world.world_size,
            timeout=timedelta(seconds=timeout_s),
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    except RuntimeError as exc:  # torch's DistStoreError, DistNetworkError, gloo's timeouts
        raise RendezvousError(
            f"rendezvous_failed: rank {world.rank} of {world.world_size} on {world.hostname or socket.gethostname()}: "
            f"the learners' process group at {world.master_addr}:{world.master_port} did not form within "
            f"{timeout_s:g} s (training.loop.dist_timeout_s): every rank must start, and {world.master_addr} must be "
            f"reachable from this node ({last_line(str(exc), ERROR_CHARS)})") from exc
    watch = RankWatch(world, name, report)
    watch.start()
    return watch


class RankWatch:
    def __init__(self, world: DistributedContext, name: str, report: Callable[[WorldFailed], None]):
        self.world = world
        self.name = name
        self.report = report
        # Its own client: the thread never shares a connection with the process group's store.
        store = dist.TCPStore(world.master_addr, world.master_port, is_master=False,
                              timeout=timedelta(seconds=SILENT_AFTER_S), wait_for_workers=False)
        self.store = dist.PrefixStore(PREFIX, store)
        self.verdict: WorldFailed | None = None
        self._found = threading.Event()
        self._stop = threading.Event()
        self._left = False
        self.store.set(f"host/{world.rank}", world.hostname or socket.gethostname())
        self._thread = threading.Thread(target=self._run, name=f"{name}-rank-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # ---------------------------------------------------------------- the thread

    def _run(self) -> None:
        now = time.monotonic()
        watched = {r: (-1, now) for r in range(self.world.world_size) if r != self.world.rank}  # r -> (beat, seen at)
        left_seen = 0
        unreachable_since = None
        while not self._stop.wait(BEAT_S):
            now = time.monotonic()
            try:
                self.store.add(f"beat/{self.world.rank}", 1)
                left = self.store.add("left", 0)
                if left > left_seen:
                    left_seen = left
                    if self._found_left(watched):
                        return
                for r, (beat, seen) in list(watched.items()):
                    current = self.store.add(f"beat/{r}", 0)
                    if current != beat:
                        watched[r] = (current, now)
                    elif now - seen > SILENT_AFTER_S:
                        return self._blame(r, f"went silent: no heartbeat from its learner for {SILENT_AFTER_S:g} s "
                                              "(killed, or its node is down)")
                unreachable_since = None
            except RuntimeError as exc:  # DistError: the store's host is gone, or the network to it
                if self._stop.is_set():
                    return
                unreachable_since = unreachable_since or now
                if now - unreachable_since >= UNREACHABLE_AFTER_S:
                    host = "rank 0's learner" if not self.world.cluster else "the torchrun agent or job step hosting it"
                    return self._blame(0 if not self.world.cluster else None,
                                       f"the rendezvous store at {self.world.master_addr}:{self.world.master_port} "
                                       f"is unreachable, so {host} is gone ({last_line(str(exc), ERROR_CHARS)})")

    def _found_left(self, watched: dict) -> bool:
        """Read the marks of ranks that left; True once one that did not finish is blamed."""
        for r in list(watched):
            if not self.store.check([f"left/{r}"]):
                continue
            mark = json.loads(self.store.get(f"left/{r}"))
            del watched[r]
            if mark["how"] != "finished":
                self._blame(r, f"{mark['how']}: {mark['why']}")
                return True
        return False

    def _blame(self, rank: int | None, what: str) -> None:
        if self._stop.is_set():
            return
        who = "the learners' store" if rank is None else f"rank {rank} ({self._host(rank)})"
        self.verdict = WorldFailed(self.name, f"rank_failed: {who} {what}", rank)
        self._found.set()
        self.report(self.verdict)

    def _host(self, rank: int) -> str:
        try:
            return self.store.get(f"host/{rank}").decode() if self.store.check([f"host/{rank}"]) else "host unknown"
        except RuntimeError:
            return "host unknown"

    # ---------------------------------------------------------------- the learner's side

    def leave(self, how: str, why: str = "") -> None:
        """Stop watching and leave a mark the other ranks read at their next beat: `finished` (they stop
        watching this rank), `stopped` or `failed` (they stop too, naming this rank). Once only."""
        self._stop.set()
        self._thread.join(timeout=2 * BEAT_S)
        if self._left:
            return
        self._left = True
        try:
            self.store.set(f"left/{self.world.rank}", json.dumps({"how": how, "why": why}))
            self.store.add("left", 1)
        except RuntimeError:  # the store is gone: the others find this rank silent instead
            pass

    def blame_for(self, exc: BaseException, stopping: Callable[[], bool] | None = None) -> WorldFailed | None:
        """A collective that raised (a peer gone under gloo): wait for the watch to name the rank, at most
        VERDICT_WAIT_S, or until `stopping()` (this rank is asked to stop too: its launcher knows why). Other
        exceptions are this rank's own: None at once."""
        if not raised_in_torch_distributed(exc):
            return self.verdict
        deadline = time.monotonic() + VERDICT_WAIT_S
        while not self._found.wait(min(BEAT_S, max(0.0, deadline - time.monotonic()))):
            if (stopping is not None and stopping()) or time.monotonic() >= deadline:
                break
        return self.verdict


def raised_in_torch_distributed(exc: BaseException) -> bool:
    """Whether `exc` came out of torch.distributed (a collective, the store)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f"torch{os.sep}distributed{os.sep}" in frame.filename for frame in frames)


def report_failure(exc: BaseException, watch: RankWatch | None, name: str, put: Callable[[WorldFailed], None],
                   stopping: Callable[[], bool] = lambda: False) -> bool:
    """Before the traceback: what the launcher names as the cause when the data-parallel run is the
    failure: a rendezvous that did not form, or another rank gone (a collective that raised, named by the
    rank watch). Then this rank's mark for the others. Returns whether `exc` is a collective that raised
    because another rank ended: the watch named it, or this rank is asked to stop as well (`stopping()`)."""
    if isinstance(exc, RendezvousError):
        put(WorldFailed(name, str(exc)))
    if watch is None:
        return False
    # when found, the watch has sent the verdict (WorldFailed) already
    verdict = watch.blame_for(exc, stopping=stopping)
    peer_ended = raised_in_torch_distributed(exc) and (verdict is not None or stopping())
    if verdict is not None:
        watch.leave("stopped", f"after {verdict.cause}")
    elif isinstance(exc, ParentGone) or peer_ended:
        watch.leave("stopped", why_stopped())
    else:
        watch.leave("failed", f"the {name} raised {type(exc).__name__}: {last_line(str(exc), ERROR_CHARS)}")
    return peer_ended


def ranks_in_sync(actor, world_size: int) -> dict:
    """All ranks' actor parameters must be identical after training (gradients were averaged)."""
    import torch

    flat = torch.cat([p.detach().reshape(-1).double() for p in actor.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    in_sync = all(torch.equal(gathered[0], g) for g in gathered[1:])
    return {"world_size": world_size, "actor_params_equal": bool(in_sync),
            "actor_param_sums": [float(g.sum()) for g in gathered]}
