"""The collector process: steps the batched MJWarp env and feeds the learner.

Per tick: wait for the learner's action (host message + GPU event), step the env, publish
the next observation at once (so inference can start), then write the transition into the
current replay-ingress slot. A slot is handed over every `env_steps_per_sync` ticks; when no
slot is free the collector waits for the learner (backpressure, counted) instead of dropping data.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections import deque

from .child_log import leave, log_stderr
from .messages import Mailbox, StopRequested, become_child
from .protocol import (COLLECTOR_INBOX, MAX_TASK_METRICS, Act, Buffers, ChunkReady, Failed, LearnerEvents, Obs, Phase,
                       SlotFree)
from .spec import RoleSpec, report_ready

TASK_METRIC_GROUPS = ("rew", "term", "metrics")
SIM_CHECK_EVERY = 25  # chunks between the (synchronising) backend timing read and overflow check
# The stamps of one tick, in order: the slot write of the current observation and action starts,
# the env step starts, it ends, the slot write of its results ends.
TICK_STAMPS = ("write_start", "step_start", "step_end", "write_end")


def collector_main(spec: RoleSpec, inbox, to_learner, to_launcher, stop_event) -> None:
    name = spec.name("collector")
    log_stderr(spec.run_dir, name)
    become_child(name, to_launcher)
    code = 0
    mailbox = Mailbox(name, inbox, stop_event, COLLECTOR_INBOX)
    collector = None
    try:
        collector = Collector(spec, mailbox, to_learner, to_launcher)
        collector.connect()
        collector.run()
    except StopRequested:
        pass
    except BaseException:
        to_launcher.put(Failed(name, traceback.format_exc()))
        code = 1
    from .shared import await_peer_release, leave_peer

    # This process exported the buffers the learner reads: it stays until the learner's GPU work is done with them.
    leave_peer(name, spec.device, to_learner)
    await_peer_release(name, "learner", mailbox, to_learner)
    if collector is not None and collector.clips is not None:
        try:
            collector.clips.close()  # no render process outlives this one; the launcher renders what is left
        except Exception as exc:  # a broken CUDA context: the clip on its way is lost, the renders still stop
            print(f"unilab: {name}: training clips: {exc}", file=sys.stderr, flush=True)
    leave(to_launcher, code)


class Collector:
    """Construction: the device (reported to the launcher) and the env. `connect` shares the buffers with
    the learner; `run` collects chunks until told to stop."""

    def __init__(self, spec: RoleSpec, mailbox: Mailbox, to_learner, to_launcher):
        import torch
        import torch.multiprocessing  # noqa: F401  (registers CUDA IPC pickling for the queues)

        from unilab.tasks import make_env

        self.torch = torch
        self.spec = spec
        self.mailbox = mailbox
        self.to_learner = to_learner
        self.timeout = spec.training.loop.stall_timeout_s
        self.device = device = torch.device(spec.device)
        if device.type == "cpu":
            torch.set_num_threads(1)  # learner and collector share the cores; tiny ops lose to thread overhead
        report_ready(spec.name("collector"), device, to_launcher)
        torch.manual_seed(spec.seed)
        self.to_launcher = to_launcher
        t0 = time.monotonic()
        self.phase(f"collector: building the worlds ({spec.task.num_envs} envs of "
                   f"{spec.task.name}) and compiling the Warp kernels they need (cached for the "
                   "next runs)")
        self.k_ticks = spec.training.loop.env_steps_per_sync
        # The buffers are shared as soon as the env knows its sizes (`_share`), before its kernels compile:
        # the learner then builds and compiles its networks while this process compiles the physics.
        self.env = env = make_env(spec.task, spec.sim, str(device), spec.seed, on_sized=self._share,
                                  on_stage=lambda text: self.phase(f"collector: {text}"))
        self.phase(f"collector: worlds built in {time.monotonic() - t0:.1f} s")
        self.clips = None  # training.outputs.video_interval: world 0 recorded on the device (unilab.viz.clip)
        if spec.training.outputs.video_interval and spec.rank == 0:
            from unilab.viz.clip import ClipRecorder

            self.clips = ClipRecorder(env, spec.training.outputs.video_interval, spec.run_dir)

    def phase(self, text: str) -> None:
        """A step the console names (printed by the launcher)."""
        self.to_launcher.put(Phase(self.spec.name("collector"), text))

    def _share(self, env) -> None:
        """Share the observation/action buffers and the replay slots with the learner (`make_env`'s
        `on_sized`: the env is sized, its kernels not compiled yet)."""
        from .shared import CrossProcessEvent, Dims, make_slot, share

        torch, device = self.torch, self.device
        self.dims = dims = Dims(env.num_envs, env.obs_dim, env.critic_obs_dim, env.action_dim, self.k_ticks)
        self.obs_buf = share(torch.zeros(dims.num_envs, dims.obs_dim, device=device))
        self.act_buf = share(torch.zeros(dims.num_envs, dims.action_dim, device=device))
        self.slots = [{k: share(v) for k, v in make_slot(dims, device).items()} for _ in range(self.spec.training.loop.ingress_slots)]
        self.obs_ready = CrossProcessEvent(device)
        self.slot_ready = [CrossProcessEvent(device) for _ in self.slots]
        policy_env = None
        if self.spec.training.outputs.export_onnx and self.spec.rank == 0:
            from unilab.tasks.common.metadata import env_description

            policy_env = env_description(env)
        mirror = env.mirror() if getattr(self.spec.algo, "symmetry", False) else None
        self.to_learner.put(Buffers(dims, self.obs_buf, self.act_buf, self.slots, self.obs_ready.handle(),
                                    [e.handle() for e in self.slot_ready], policy_env, mirror))
        self.phase(f"collector: sized (observations {dims.obs_dim}, critic observations {dims.critic_obs_dim}, "
                   f"actions {dims.action_dim}); buffers shared with the learner; compiling the kernels")

    def connect(self) -> None:
        """Take the learner's event handles (it answers the buffers `_share` sent)."""
        from .shared import CrossProcessEvent

        device = self.device
        events = self.mailbox.get(LearnerEvents, phase="startup", timeout_s=self.spec.training.loop.startup_timeout_s)
        self.act_ready = CrossProcessEvent(device, events.act_ready)
        self.slot_free = [CrossProcessEvent(device, h) for h in events.slot_free]

    def run(self) -> None:
        from .timing import Stamp

        self._reset()
        # Stamps of chunk j are read back two chunks later (no host wait on the hot path).
        stamp_sets = [[{name: Stamp(self.device) for name in TICK_STAMPS} for _ in range(self.k_ticks)]
                      for _ in range(3)]
        chunk = 0
        self.free = deque(range(len(self.slots)))
        self.backpressure = 0
        self.task_names = None
        self.timings: dict[str, float] = {}
        t_first = time.monotonic()
        while True:
            s = self._free_slot()
            stamps = stamp_sets[chunk % len(stamp_sets)]
            wait_ms = self._fill(s, stamps)
            self.slot_ready[s].record()
            self.timings.update(collector_wait_for_action_ms=wait_ms, ingress_backpressure=float(self.backpressure))
            self.to_learner.put(ChunkReady(s, dict(self.timings), self.task_names or ()))
            chunk += 1
            if chunk == 1:  # the first steps compile the step kernels on a cold cache
                self.phase(f"collector: first chunk of {self.k_ticks} env steps in {time.monotonic() - t_first:.1f} s")
            if chunk >= 2:
                self.timings.update(_chunk_timings(stamp_sets[(chunk - 2) % len(stamp_sets)], self.timeout))
            if chunk % SIM_CHECK_EVERY == 2:
                self.timings.update(_sim_checks(self.env, stamps, self.timeout, self.k_ticks))

    def _reset(self) -> None:
        """Reset the env and publish the first observation."""
        torch, n = self.torch, self.dims.num_envs
        self.critic_cur = torch.zeros(n, self.dims.critic_obs_dim, device=self.device)
        self.ep_return = torch.zeros(n, device=self.device)
        self.ep_length = torch.zeros(n, device=self.device)
        self.obs_buf.copy_(self.env.reset())
        self.critic_cur.copy_(self.env.critic_obs())
        self.obs_ready.record()
        self.to_learner.put(Obs(0))
        self.tick = 0

    def _free_slot(self) -> int:
        """The next free replay slot; with none free, wait for the learner (backpressure, counted)."""
        while (msg := self.mailbox.poll(SlotFree)) is not None:
            self.free.append(msg.slot)
        if not self.free:
            self.backpressure += 1
            t0 = time.perf_counter()
            msg = self.mailbox.get(SlotFree, phase="replay ingress: waiting for a free slot", timeout_s=self.timeout)
            self.free.append(msg.slot)
            self.timings["backpressure_wait_ms"] = 1e3 * (time.perf_counter() - t0)
        return self.free.popleft()

    def _fill(self, s: int, stamps: list[dict]) -> float:
        """One chunk into slot `s`, a tick per learner action; the host time spent waiting for them (ms)."""
        slot = self.slots[s]
        self.slot_free[s].wait()  # the learner has finished reading this slot
        slot["episode_stats"].zero_()
        slot["task_metrics"].zero_()
        n = self.dims.num_envs
        wait_ms = 0.0
        for k in range(self.k_ticks):
            t0 = time.perf_counter()
            # The first action comes once the learner has compiled its networks: a start-up wait.
            self.mailbox.get(Act, phase="waiting for the learner's action",
                             timeout_s=self.timeout if self.tick else self.spec.training.loop.startup_timeout_s)
            wait_ms += 1e3 * (time.perf_counter() - t0)
            self.act_ready.wait()
            self._tick(slot, slice(k * n, (k + 1) * n), stamps[k])
        return wait_ms

    def _tick(self, slot: dict, rows: slice, st: dict) -> None:
        st["write_start"].record()
        slot["obs"][rows].copy_(self.obs_buf)
        slot["critic_obs"][rows].copy_(self.critic_cur)
        slot["action"][rows].copy_(self.act_buf)
        st["step_start"].record()
        obs, critic, reward, terminated, truncated, info = self.env.step(slot["action"][rows])
        st["step_end"].record()
        self.obs_buf.copy_(obs)
        self.obs_ready.record()
        self.to_learner.put(Obs(self.tick + 1))
        slot["reward"][rows].copy_(reward)
        slot["terminated"][rows].copy_(terminated.float())
        slot["next_obs"][rows].copy_(info["final_obs"])
        slot["next_critic_obs"][rows].copy_(info["final_critic_obs"])
        self.critic_cur.copy_(critic)
        self._count_episodes(slot, reward, (terminated | truncated).float())
        self._add_task_metrics(slot, info)
        st["write_end"].record()
        if self.clips is not None:
            self.clips.tick(self.spec.start_iteration + self.tick // self.k_ticks)
        self.tick += 1

    def _count_episodes(self, slot: dict, reward, done) -> None:
        """Finished episodes into the slot's episode_stats (protocol.EPISODE_STATS); their counters restart."""
        ep_return, ep_length = self.ep_return, self.ep_length
        ep_return.add_(reward)
        ep_length.add_(1.0)
        slot["episode_stats"].add_(self.torch.stack([done.sum(), (ep_return * done).sum(), (ep_length * done).sum()]))
        ep_return.mul_(1.0 - done)
        ep_length.mul_(1.0 - done)

    def _add_task_metrics(self, slot: dict, info: dict) -> None:
        """The chunk mean of each of the env's task terms (named once, from the first step's info)."""
        if self.task_names is None:
            names = tuple(sorted(k for k in info if k.split("/")[0] in TASK_METRIC_GROUPS))
            self.task_names = names[:MAX_TASK_METRICS]
        if self.task_names:
            # The env's terms are float scalars already: a mean of each would be one more kernel per term and tick.
            values = self.torch.stack([_as_scalar(info[k]) for k in self.task_names])
            slot["task_metrics"][: len(self.task_names)].add_(values, alpha=1.0 / self.k_ticks)


def _as_scalar(value):
    """A float 0-d tensor as it is; anything else as the float mean of its entries."""
    return value if value.dim() == 0 and value.is_floating_point() else value.float().mean()


def _chunk_timings(stamps, timeout: float) -> dict[str, float]:
    """GPU times of a chunk handed over two chunks ago (its work is done; the wait is bounded)."""
    stamps[-1]["write_end"].wait_done(timeout, "collector: finishing an env step")
    return {
        "collector_env_step_ms": sum(st["step_start"].ms_until(st["step_end"]) for st in stamps),
        "collector_replay_write_ms": sum(st["write_start"].ms_until(st["step_start"])
                                         + st["step_end"].ms_until(st["write_end"]) for st in stamps),
    }


def _sim_checks(env, stamps, timeout: float, k_ticks: int) -> dict[str, float]:
    """Backend physics time of the latest step, and the contact/constraint overflow check."""
    stamps[-1]["write_end"].wait_done(timeout, "collector: finishing an env step")
    overflow = env.backend.check_overflow()  # raises with sim.overflow=error: never a silent overflow
    return {
        "collector_backend_step_ms": float(env.timing.get("backend_ms", 0.0)) * k_ticks,
        "sim_overflow": float(overflow or 0),
    }
