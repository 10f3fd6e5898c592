"""The collector process: steps the batched MJWarp env and feeds the learner.

Per tick: wait for the learner's action (host message + GPU event), step the env, publish
the next observation at once (so inference can start), then write the transition into the
current replay-ingress slot. A slot is handed over every `env_steps_per_sync` ticks; when no
slot is free the collector waits for the learner (backpressure, counted) instead of dropping data.
"""

from __future__ import annotations

import time
import traceback
from collections import deque

from .messages import Mailbox, StopRequested, become_child
from .spec import RoleSpec, report_ready


def collector_main(spec: RoleSpec, inbox, to_learner, to_launcher, stop_event) -> None:
    become_child("collector")
    try:
        _run(spec, Mailbox(spec.name("collector"), inbox, stop_event), to_learner, to_launcher)
    except StopRequested:
        pass
    except BaseException:
        to_launcher.put(("error", spec.name("collector"), traceback.format_exc()))
        raise SystemExit(1)
    to_launcher.put(("exited", spec.name("collector")))


def _run(spec: RoleSpec, mailbox: Mailbox, to_learner, to_launcher) -> None:
    import torch
    import torch.multiprocessing  # noqa: F401  (registers CUDA IPC pickling for the queues)

    from unilab.tasks import make_env

    from .shared import MAX_TASK_METRICS, CrossProcessEvent, Dims, make_slot, share
    from .timing import Stamp

    device = torch.device(spec.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # learner and collector share the cores; tiny ops lose to thread overhead
    report_ready(spec.name("collector"), device, to_launcher)
    torch.manual_seed(spec.seed)
    env = make_env(spec.config["task"], spec.config["sim"], str(device), spec.seed)
    k_ticks = int(spec.training["env_steps_per_sync"])
    dims = Dims(env.num_envs, env.obs_dim, env.critic_obs_dim, env.action_dim, k_ticks)
    n = dims.num_envs

    obs_buf = share(torch.zeros(n, dims.obs_dim, device=device))
    act_buf = share(torch.zeros(n, dims.action_dim, device=device))
    slots = [{k: share(v) for k, v in make_slot(dims, device).items()} for _ in range(spec.replay_slots)]
    obs_ready = CrossProcessEvent(device)
    slot_ready = [CrossProcessEvent(device) for _ in slots]
    to_learner.put(("buffers", dims, obs_buf, act_buf, slots,
                    {"obs_ready": obs_ready.handle(), "slot_ready": [e.handle() for e in slot_ready]}))
    _, act_handle, free_handles = mailbox.get("learner_events", phase="startup", timeout_s=spec.startup_timeout_s)
    act_ready = CrossProcessEvent(device, act_handle)
    slot_free = [CrossProcessEvent(device, h) for h in free_handles]

    critic_cur = torch.zeros(n, dims.critic_obs_dim, device=device)
    ep_return = torch.zeros(n, device=device)
    ep_length = torch.zeros(n, device=device)
    obs_buf.copy_(env.reset())
    critic_cur.copy_(env.critic_obs())
    obs_ready.record()
    to_learner.put(("obs", 0))

    # Stamps of chunk j are read back two chunks later (no host wait on the hot path).
    stamp_sets = [[[Stamp(device) for _ in range(4)] for _ in range(k_ticks)] for _ in range(3)]
    chunk = 0
    free = deque(range(len(slots)))
    backpressure = 0
    task_names = None
    tick = 0
    timings: dict[str, float] = {}
    timeout = spec.stall_timeout_s
    while True:
        while (msg := mailbox.poll("free")) is not None:
            free.append(msg[1])
        if not free:
            backpressure += 1
            t0 = time.perf_counter()
            free.append(mailbox.get("free", phase="replay ingress: waiting for a free slot", timeout_s=timeout)[1])
            timings["backpressure_wait_ms"] = 1e3 * (time.perf_counter() - t0)
        s = free.popleft()
        slot = slots[s]
        slot_free[s].wait()  # the learner has finished reading this slot
        slot["episode_stats"].zero_()
        slot["task_metrics"].zero_()
        stamps = stamp_sets[chunk % len(stamp_sets)]
        wait_ms = 0.0
        for k in range(k_ticks):
            rows = slice(k * n, (k + 1) * n)
            t0 = time.perf_counter()
            mailbox.get("act", phase="waiting for the learner's action", timeout_s=timeout)
            wait_ms += 1e3 * (time.perf_counter() - t0)
            act_ready.wait()
            st = stamps[k]
            st[0].record()
            slot["obs"][rows].copy_(obs_buf)
            slot["critic_obs"][rows].copy_(critic_cur)
            slot["action"][rows].copy_(act_buf)
            st[1].record()
            obs, critic, reward, terminated, truncated, info = env.step(slot["action"][rows])
            st[2].record()
            obs_buf.copy_(obs)
            obs_ready.record()
            to_learner.put(("obs", tick + 1))
            slot["reward"][rows].copy_(reward)
            slot["terminated"][rows].copy_(terminated.float())
            slot["next_obs"][rows].copy_(info["final_obs"])
            slot["next_critic_obs"][rows].copy_(info["final_critic_obs"])
            critic_cur.copy_(critic)
            done = (terminated | truncated).float()
            ep_return.add_(reward)
            ep_length.add_(1.0)
            slot["episode_stats"].add_(torch.stack([done.sum(), (ep_return * done).sum(), (ep_length * done).sum()]))
            ep_return.mul_(1.0 - done)
            ep_length.mul_(1.0 - done)
            if task_names is None:
                task_names = tuple(sorted(k for k in info if k.split("/")[0] in TASK_METRIC_GROUPS))
                task_names = task_names[:MAX_TASK_METRICS]
            if task_names:
                values = torch.stack([info[k].float().mean() for k in task_names])
                slot["task_metrics"][: len(task_names)].add_(values, alpha=1.0 / k_ticks)
            st[3].record()
            tick += 1
        slot_ready[s].record()
        timings.update(collector_wait_for_action_ms=wait_ms, ingress_backpressure=float(backpressure))
        to_learner.put(("chunk", s, dict(timings), task_names or ()))
        chunk += 1
        if chunk >= 2:
            timings.update(_chunk_timings(stamp_sets[(chunk - 2) % len(stamp_sets)], timeout))
        if chunk % SIM_CHECK_EVERY == 2:
            timings.update(_sim_checks(env, stamps, timeout, k_ticks))


TASK_METRIC_GROUPS = ("rew", "term", "metrics")
SIM_CHECK_EVERY = 25  # chunks between the (synchronising) backend timing read and overflow check


def _chunk_timings(stamps, timeout: float) -> dict[str, float]:
    """GPU times of a chunk handed over two chunks ago (its work is done; the wait is bounded)."""
    stamps[-1][3].wait_done(timeout, "collector: finishing an env step")
    return {
        "collector_env_step_ms": sum(st[1].ms_until(st[2]) for st in stamps),
        "collector_replay_write_ms": sum(st[0].ms_until(st[1]) + st[2].ms_until(st[3]) for st in stamps),
    }


def _sim_checks(env, stamps, timeout: float, k_ticks: int) -> dict[str, float]:
    """Backend physics time of the latest step, and the contact/constraint overflow check."""
    stamps[-1][3].wait_done(timeout, "collector: finishing an env step")
    overflow = env.backend.check_overflow()  # raises with sim.overflow=error: never a silent overflow
    return {
        "collector_backend_step_ms": float(env.timing.get("backend_ms", 0.0)) * k_ticks,
        "sim_overflow": float(overflow or 0),
    }
