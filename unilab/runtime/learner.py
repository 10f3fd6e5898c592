"""The learner process: serves inference to the collector and runs the update phases.

Per iteration: for each of the `env_steps_per_sync` ticks, wait for the collector's
observation, run the acting policy on a high-priority stream and publish the action; then
the update phase on its own stream: publish the weights of the previous update to the acting
copy, launch the (captured) update, ingest the replay slot (`training.update_before_ingest`, the
default; false ingests the slot first). The host does not wait for the
update: the next ticks' inference and the collector's physics overlap it on the GPU, which
is the overlap CUDA MPS turns into throughput. The acting policy therefore lags the trained
one by one update phase.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections import deque

from unilab.algos.config import first_update
from unilab.algos.transition import TRANSITION_FIELDS
from unilab.mps.gemm_check import check_under_thread_share, weight_products
from unilab.rundir.layout import POLICY_ONNX_FILE

from .child_log import leave, log_stderr
from .messages import Mailbox, ParentGone, StopRequested, become_child, wait_event, why_stopped
from .protocol import (LEARNER_INBOX, LOSSES, ROLLING_EPISODES, Act, Buffers, ChunkReady, Failed, Finished,
                       IterationStats, LearnerEvents, Obs, Phase, Progress, SlotFree, Stop, WorldFailed, last_line)
from .spec import RoleSpec, report_ready


def learner_main(spec: RoleSpec, inbox, to_collector, to_launcher, stop_event, go_event) -> None:
    """The learner role: join the data-parallel group (several ranks), build the loop, wait for the launcher's
    go, run, report; then stop the collector."""
    name = spec.name("learner")
    log_stderr(spec.run_dir, name)
    become_child("learner")
    loop = watch = None
    code = 0
    mailbox = Mailbox(name, inbox, stop_event, LEARNER_INBOX)
    try:
        device = start_learner_process(spec, to_launcher)
        if spec.world_size > 1:
            from .rank_watch import join_world  # torch.distributed: imported in the child only

            watch = join_world(spec.world, device, spec.training.dist_timeout_s, name, to_launcher.put)
        built = LearnerLoop(spec, mailbox, to_collector, to_launcher, watch)
        wait_for_go(go_event, spec.training.startup_timeout_s, stop_event, name)
        built.phase(f"training: {built.max_iterations} iterations of {built.dims.num_envs} envs x "
                    f"{built.dims.ticks_per_slot} steps")
        loop = built  # a loop that never got the go has nothing to save and is not closed
        loop.run()
        to_launcher.put(Finished(name, loop.summary("completed")))
    except StopRequested:
        if watch is not None:  # the other ranks stop too, naming this one (and the rank it stopped for)
            watch.leave("stopped", f"after {watch.verdict.cause}" if watch.verdict else why_stopped(mailbox.parent_pid))
        # interrupted or a fault elsewhere: keep what was learned
        to_launcher.put(Finished(name, loop.save_on_stop() if loop else {}))
    except BaseException as exc:
        _report_world_failure(exc, watch, name, to_launcher)
        to_launcher.put(Failed(name, traceback.format_exc()))
        code = 1
    finally:
        from .shared import await_peer_release, leave_peer  # torch: imported in the child only

        if loop is not None:
            loop.leave_collector()
        else:
            leave_peer(name, spec.device, to_collector)
        to_collector.put(Stop())
        await_peer_release(name, "collector", mailbox, to_collector)  # its GPU work may wait on our events
        if loop is not None:
            loop.close()
    leave(to_launcher, code)  # everything is saved and reported


def start_learner_process(spec: RoleSpec, to_launcher):
    """The learner's torch device, its CUDA context made and reported (the launcher verifies it), checked
    under an MPS thread share."""
    import torch

    device = torch.device(spec.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # learner and collector share the cores; tiny ops lose to thread overhead
    report_ready(spec.name("learner"), device, to_launcher)
    check_under_thread_share(device, "learner")
    return device


def _report_world_failure(exc: BaseException, watch, name: str, to_launcher) -> None:
    """Before the traceback: what the launcher names as the cause when the data-parallel run is the
    failure: a rendezvous that did not form, or another rank gone (a collective that raised, named by the
    rank watch). Then this rank's mark for the others."""
    from .rank_watch import ERROR_CHARS, RendezvousError

    if isinstance(exc, RendezvousError):
        to_launcher.put(WorldFailed(name, str(exc)))
    if watch is None:
        return
    verdict = watch.blame_for(exc)  # when found, the watch has sent it (WorldFailed) already
    if verdict is not None:
        watch.leave("stopped", f"after {verdict.cause}")
    elif isinstance(exc, ParentGone):
        watch.leave("stopped", why_stopped())
    else:
        watch.leave("failed", f"the {name} raised {type(exc).__name__}: {last_line(str(exc), ERROR_CHARS)}")


def wait_for_go(go_event, timeout_s: float, stop_event=None, name: str = "learner") -> None:
    """Block until the launcher has verified every child (MPS attachment included); a stop request
    (stop event, SIGTERM) or the launcher's death ends the wait within messages.WATCH_S."""
    wait_event(go_event, role=name, phase="startup: waiting for the launcher's go (MPS client verification?)",
               timeout_s=timeout_s, stop_event=stop_event)


PROGRESS_EVERY_S = 2.0  # the console's progress line, at most this often (and for the last iteration)


class RollingEpisodes:
    """Finished-episode sums of the latest iterations, as few as cover ROLLING_EPISODES episodes."""

    def __init__(self, episodes: int = ROLLING_EPISODES):
        self.episodes = episodes
        self.window: deque = deque()  # (count, return sum, length sum) of iterations that ended episodes

    def add(self, count: float, return_sum: float, length_sum: float) -> None:
        if count > 0:
            self.window.append((count, return_sum, length_sum))
        while len(self.window) > 1 and self.count() - self.window[0][0] >= self.episodes:
            self.window.popleft()

    def count(self) -> int:
        return int(sum(c for c, _, _ in self.window))

    def means(self) -> tuple[float | None, float | None]:
        n = self.count()
        if not n:
            return None, None
        return sum(r for _, r, _ in self.window) / n, sum(le for _, _, le in self.window) / n


class LearnerLoop:
    """Construction connects to the collector and builds the learner (nothing waits for the launcher; the
    process has reported its start and joined the data-parallel group); `run` trains until `max_iterations`."""

    def __init__(self, spec: RoleSpec, mailbox: Mailbox, to_collector, to_launcher, watch=None):
        import torch
        import torch.multiprocessing  # noqa: F401  (CUDA IPC pickling for the queues)

        self.torch = torch
        self.spec = spec
        self.mailbox = mailbox
        self.to_collector = to_collector
        self.left_collector = False
        self.to_launcher = to_launcher
        self.watch = watch  # the rank watch of a data-parallel run (rank_watch.join_world), else None
        self.device = torch.device(spec.device)
        torch.manual_seed(spec.seed)
        self._connect()
        t0 = time.monotonic()
        self.phase(f"learner: building the {spec.algo.name} networks and replay")
        self._build_learner()
        self._init_bookkeeping()
        self.phase(f"learner: built in {time.monotonic() - t0:.1f} s")
        if self.learner.compiled:
            # Before the go: this overlaps the collector's kernel compile instead of following it.
            t0 = time.monotonic()
            self.phase("learner: compiling the update on random rows, beside the collector's compile "
                       "(cached for the next runs)")
            if self.learner.precompile():
                self.phase(f"learner: update compiled in {time.monotonic() - t0:.1f} s")

    def phase(self, text: str) -> None:
        """A step the console names (printed by the launcher)."""
        self.to_launcher.put(Phase(self.spec.name("learner"), text))

    def _connect(self) -> None:
        """Map the collector's buffers and events; send the learner's event handles."""
        from .shared import CrossProcessEvent

        device = self.device
        buffers = self.mailbox.get(Buffers, phase="startup: waiting for the collector's environment",
                                   timeout_s=self.spec.training.startup_timeout_s)
        self.dims, self.obs_buf, self.act_buf, self.slots = buffers.dims, buffers.obs, buffers.act, buffers.slots
        self.policy_env = buffers.policy_env
        self.obs_ready = CrossProcessEvent(device, buffers.obs_ready)
        self.slot_ready = [CrossProcessEvent(device, h) for h in buffers.slot_ready]
        self.act_ready = CrossProcessEvent(device)
        self.slot_free = [CrossProcessEvent(device) for _ in self.slots]
        self.to_collector.put(LearnerEvents(self.act_ready.handle(), [e.handle() for e in self.slot_free]))

    def _build_learner(self) -> None:
        """The algorithm's learner (checked under the MPS thread share), restored when resuming."""
        from unilab.algos.base import make_learner
        from unilab.rundir.resume import refill_target, restore

        spec, dims, device, algo = self.spec, self.dims, self.device, self.spec.algo
        self.learner = make_learner(algo, dims.obs_dim, dims.critic_obs_dim, dims.action_dim, device, spec.seed,
                                    num_envs=dims.num_envs)
        check_under_thread_share(device, "learner", shapes=weight_products(
            (self.learner.actor, self.learner.critic), self.learner.gemm_batches(dims.num_envs)))
        self.iteration = spec.start_iteration
        self.env_steps = 0
        self.trained_once = False
        self.min_replay_to_update = 0
        if spec.resume:
            self.iteration, self.env_steps = restore(self.learner, spec.resume, device, self.checkpoint_meta()["dims"])
            # Act with the restored policy at once, but let the (empty) replay refill before updating:
            # a few thousand fresh samples and a full update cycle would overfit and wreck the policy.
            self.learner.publish_policy()
            self.trained_once = True
            self.min_replay_to_update = refill_target(
                self.learner.replay.capacity, spec.training.resume_refill_fraction,
                (algo.max_iterations - self.iteration) * dims.num_envs * dims.ticks_per_slot)
            self.phase(f"resume: refilling the replay to {self.min_replay_to_update} transitions before the "
                       "first update")
            self._refill_reported = 0
        # Compile the acting policy (if the algo compiles) now, not at the first trained tick's deadline.
        self.learner.act(self.obs_buf)

    def _init_bookkeeping(self) -> None:
        """Run settings, the metrics writer, the streams and the rings of stamps and host statistics."""
        from unilab.rundir.metrics import MetricsWriter
        from unilab.rundir.wandb_sink import wandb_settings

        from .timing import Stamp

        torch, spec, device, algo = self.torch, self.spec, self.device, self.spec.algo
        self.segment_start = self.iteration
        self.max_iterations = algo.max_iterations
        self.save_interval = algo.save_interval
        self.learning_starts = algo.learning_starts
        self.update_before_ingest = spec.training.update_before_ingest
        self.nan_guard = spec.training.nan_guard.enabled
        self.nan_trips = 0
        loggers = spec.training.logger
        self.metrics = MetricsWriter(spec.rank_dir, start_iteration=self.iteration,
                                     tensorboard="tensorboard" in loggers,
                                     wandb=wandb_settings(spec) if "wandb" in loggers and spec.rank == 0 else None)
        self.last_row: dict = {}
        self.rolling = RollingEpisodes()
        self._last_progress = -math.inf
        self._last_sps: float | None = None
        # the replay fill before the first update, reported by quarters (a resume reports its refill instead)
        self._fill_target = first_update(algo, self.dims.num_envs * self.dims.ticks_per_slot).rows
        self._fill_reported = 0 if not self.min_replay_to_update and self.learning_starts else 4
        self._first_update_s: float | None = None
        cuda = device.type == "cuda"
        self.inf_stream = torch.cuda.Stream(device, priority=-1) if cuda else None
        self.upd_stream = torch.cuda.Stream(device, priority=0) if cuda else None
        # Metrics of iteration i are read back LAG iterations later, when its GPU work is long done,
        # so the host never waits for the GPU on the hot path.
        self.lag = 2
        ring = self.lag + 1
        self.stamps = [{name: Stamp(device) for name in ("inf_start", "inf_end", "train_start", "update_end",
                                                         "train_end")}
                       for _ in range(ring)]
        self.published = [Stamp(device) for _ in range(ring)]
        self.last_published = None
        self.host_stats = [torch.zeros(IterationStats.SIZE, pin_memory=cuda) for _ in range(ring)]
        self.pending: list[dict] = []
        self._flags = torch.tensor([[1.0, 0.0], [0.0, 0.0]], device=device)  # rows: IterationStats `trained`
        self._nan3 = torch.full((len(LOSSES),), float("nan"), device=device)

    def _stream(self, stream):
        import contextlib

        return self.torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def run(self) -> None:
        torch = self.torch
        k_ticks = self.dims.ticks_per_slot
        timeout = self.spec.training.stall_timeout_s
        tick = 0
        while self.iteration < self.max_iterations:
            t_iter = time.perf_counter()
            st = self.stamps[self.iteration % len(self.stamps)]
            wait_ms = 0.0
            for k in range(k_ticks):
                t0 = time.perf_counter()
                # The first observation comes once the collector's kernels have compiled: a start-up wait.
                self.mailbox.get(Obs, phase="waiting for the collector's observation",
                                 timeout_s=timeout if tick else self.spec.training.startup_timeout_s)
                wait_ms += 1e3 * (time.perf_counter() - t0)
                with self._stream(self.inf_stream):
                    self.obs_ready.wait(self.inf_stream)
                    if self.inf_stream is not None and self.last_published is not None:
                        self.inf_stream.wait_event(self.last_published.event)  # acting weights are copied
                    if k == 0:
                        st["inf_start"].record(self.inf_stream)
                    if self.trained_once:
                        action = self.learner.act(self.obs_buf)
                    else:
                        action = torch.rand(self.act_buf.shape, device=self.device) * 2 - 1
                    self.act_buf.copy_(action)
                    self.act_ready.record(self.inf_stream)
                    if k == k_ticks - 1:
                        st["inf_end"].record(self.inf_stream)
                self.to_collector.put(Act(tick))
                tick += 1
            chunk = self.mailbox.get(ChunkReady, phase="waiting for the replay slot", timeout_s=timeout)
            self._update_phase(chunk.slot, st)
            self.env_steps += self.dims.num_envs * k_ticks
            if self.min_replay_to_update:
                self._report_refill()
            elif self._fill_reported < 4:
                self._report_fill()
            self.pending.append({"iteration": self.iteration, "env_steps": self.env_steps, "wait_ms": wait_ms,
                                 "collector": chunk.timings, "t_iter": t_iter, "task_names": chunk.task_names,
                                 "replay_size": self.learner.replay.size})
            while len(self.pending) > self.lag:
                self._log_oldest(timeout)
            self.iteration += 1
            if self.iteration % self.save_interval == 0 and self.iteration < self.max_iterations:
                self.save()
        while self.pending:
            self._log_oldest(timeout)
        self.save()
        if self.spec.training.export_onnx and self.spec.rank == 0:
            from unilab.rundir.policy import metadata_props
            from unilab.rundir.checkpoint import checkpoint_name

            meta = metadata_props(self.policy_env, task=self.spec.task.name, algo=self.spec.algo.name,
                                  checkpoint=checkpoint_name(self.iteration), iteration=self.iteration,
                                  env_steps=self.env_steps)
            self.learner.export_onnx(f"{self.spec.run_dir}/{POLICY_ONNX_FILE}", meta)

    def _update_phase(self, s: int, st: dict) -> None:
        with self._stream(self.upd_stream):
            if self.upd_stream is not None:
                self.upd_stream.wait_event(st["inf_end"].event)  # inference has read the acting weights
            # Publish the previous update's weights before waiting for the new slot, so the next
            # ticks' inference (and the collector's physics) can overlap this update phase.
            if self.trained_once:
                self.learner.publish_policy()
            published = self.published[self.iteration % len(self.published)]
            published.record(self.upd_stream)
            self.last_published = published
            if self.update_before_ingest:
                # The update samples the replay as it stands, so it need not wait for the chunk's last
                # physics step and overlaps it; the chunk is ingested after it (and sampled from the
                # next phase on). The acting policy's next forward pass, which does wait for that step,
                # then no longer starts together with the update.
                st["train_start"].record(self.upd_stream)
                losses = self._update()
                st["update_end"].record(self.upd_stream)
                slot_stats = self._ingest(s)
            else:
                slot_stats = self._ingest(s, st)
                losses = self._update()
                st["update_end"].record(self.upd_stream)
            host = self.host_stats[self.iteration % len(self.host_stats)]
            # Constant tensors live on the device already: a host->device copy here would sync.
            trained = self._flags[0] if losses is not None else self._flags[1]
            packed = IterationStats.pack(slot_stats, losses if losses is not None else self._nan3, trained)
            host.copy_(packed, non_blocking=True)
            st["train_end"].record(self.upd_stream)

    def _ingest(self, s: int, st: dict | None = None):
        """Wait for slot `s` on the update stream, add it to the replay and hand it back; its statistics."""
        slot = self.slots[s]
        self.slot_ready[s].wait(self.upd_stream)
        if st is not None:
            st["train_start"].record(self.upd_stream)
        self.learner.add({k: slot[k] for k in TRANSITION_FIELDS})
        # copied before the slot is handed back to the collector
        slot_stats = self.torch.cat([slot["episode_stats"], slot["task_metrics"]])
        self.slot_free[s].record(self.upd_stream)
        self.to_collector.put(SlotFree(s))
        return slot_stats

    def _update(self):
        """Launch one update phase when the replay allows it; its (critic, actor, alpha) losses or None."""
        if not (self.learner.ready() and self.iteration - self.segment_start >= self.learning_starts
                and self.learner.replay.size >= self.min_replay_to_update):
            return None
        first = not self.trained_once and self._first_update_s is None
        if first:
            self.phase("first update: capturing the update cycle (compiled before the go where the algorithm "
                       "compiles)")
            t0 = time.monotonic()
        out = self.learner.update()
        if first:
            self._first_update_s = time.monotonic() - t0
            self.phase(f"first update launched after {self._first_update_s:.1f} s; updating every iteration")
        self.trained_once = True
        return self.torch.stack([out["critic_loss"].float(), out["actor_loss"].float(), out["alpha"].float()])

    def _report_refill(self) -> None:
        """The resume's refill on the console: every quarter, and when the updates start."""
        size, target = self.learner.replay.size, self.min_replay_to_update
        quarter = min(4, 4 * size // target)
        if quarter > self._refill_reported:
            self._refill_reported = quarter
            done = "; updates start" if quarter == 4 and self.learner.ready() else ""
            self.phase(f"resume: replay refilled {min(size, target)}/{target} ({25 * quarter} %){done}")

    def _report_fill(self) -> None:
        """The replay filling before the first update, on the console by quarters."""
        size, target = self.learner.replay.size, self._fill_target
        quarter = min(4, 4 * size // max(1, target))
        if quarter > self._fill_reported:
            self._fill_reported = quarter
            if quarter < 4:  # full: the first update's own line says so
                self.phase(f"filling the replay {size}/{target} transitions ({25 * quarter} %)")

    def _send_progress(self, row: dict) -> None:
        """The console's progress line (the launcher adds elapsed time and ETA), at most every PROGRESS_EVERY_S."""
        if row.get("env_steps_per_s") is not None:
            self._last_sps = row["env_steps_per_s"]
        now = time.monotonic()
        done = row["iteration"] + 1
        if now - self._last_progress < PROGRESS_EVERY_S and done < self.max_iterations:
            return
        self._last_progress = now
        ret, length = self.rolling.means()
        self.to_launcher.put(Progress(
            self.spec.name("learner"), self.spec.rank, done, self.max_iterations,
            int(row["env_steps"]), self._last_sps, ret, length, self.rolling.count(), int(row.get("replay_size") or 0)))

    def _log_oldest(self, timeout: float) -> None:
        """Write the metrics row of the oldest pending iteration (its GPU work is done or nearly so)."""
        p = self.pending.pop(0)
        i = p["iteration"]
        st = self.stamps[i % len(self.stamps)]
        st["train_end"].wait_done(timeout, "learner: update phase")
        stats = IterationStats.unpack(self.host_stats[i % len(self.host_stats)].tolist())
        count = stats.episodes_finished
        # Wall time between the starts of consecutive iterations (the last one has no successor).
        nxt = self.pending[0]["t_iter"] if self.pending else None
        iteration_ms = 1e3 * (nxt - p["t_iter"]) if nxt is not None else None
        if stats.trained and self.nan_guard and not all(map(math.isfinite, stats.losses)):
            self.nan_trips += 1
            if self.nan_trips >= 3:
                raise FloatingPointError(f"nan guard: non-finite losses in 3 update phases (iteration {i})")
        values = {
            "iteration_ms": iteration_ms,
            "env_steps_per_s": self.dims.num_envs * self.dims.ticks_per_slot / (iteration_ms / 1e3)
            if iteration_ms else None,
            "learner_train_ms": st["train_start"].ms_until(st["update_end"]),
            "learner_wait_for_collector_ms": p["wait_ms"],
            "learner_inference_ms": st["inf_start"].ms_until(st["inf_end"]),
            "replay_size": p["replay_size"],
            "episode_return": stats.return_sum / count if count else None,
            "episode_length": stats.length_sum / count if count else None,
            "episodes_finished": count,
            "critic_loss": stats.critic_loss if stats.trained else None,
            "actor_loss": stats.actor_loss if stats.trained else None,
            "alpha": stats.alpha if stats.trained else None,
            "nan_guard_trips": self.nan_trips,
            **p["collector"],
            **stats.task_terms(p["task_names"]),
        }
        self.last_row = self.metrics.write(i, p["env_steps"], values, max_iterations=self.max_iterations)
        self.rolling.add(count, stats.return_sum, stats.length_sum)
        self._send_progress(self.last_row)

    def save(self) -> None:
        from unilab.rundir.checkpoint import prune_checkpoints, save_checkpoint

        if self.spec.rank != 0:  # the ranks hold identical weights; rank 0 writes them
            return
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
        path = save_checkpoint(self.spec.run_dir, self.iteration, self.env_steps, self.learner.state_dict(),
                               meta=self.checkpoint_meta())
        prune_checkpoints(self.spec.run_dir, self.spec.training.keep_checkpoints, path)

    def checkpoint_meta(self) -> dict:
        """What shaped the weights, for the checks of a resume (unilab.rundir.resume)."""
        from unilab.rundir.resume import weights_record

        return weights_record(self.spec.config.values, self.dims)

    def leave_collector(self) -> None:
        """This process's GPU work has ended and the collector is told so (shared.leave_peer); once only."""
        from .shared import leave_peer

        if not self.left_collector:
            self.left_collector = True
            leave_peer(self.spec.name("learner"), self.device, self.to_collector)

    def save_on_stop(self) -> dict:
        """Stopped early: the collector is released first (it may be stopping already, and must not exit while
        an update still reads its slots), then the pending metric rows (a resume continues after the checkpoint's
        iteration, so rows left unwritten would be a gap), then the checkpoint. A failure of either is reported."""
        self.leave_collector()
        out = self.summary("interrupted")
        try:
            while self.pending:
                self._log_oldest(min(self.spec.training.stall_timeout_s, 10.0))
        except Exception as exc:  # noqa: BLE001  (the checkpoint matters more than the last rows)
            out["stop_errors"] = [f"the pending metric rows were not written ({type(exc).__name__}: {exc})"]
            self.pending.clear()
        try:
            if os.path.isdir(self.spec.run_dir):  # removed mid-run: nothing to save into; the launcher names it
                self.save()
        except Exception as exc:  # noqa: BLE001
            out.setdefault("stop_errors", []).append(
                f"the stop-time checkpoint (iteration {self.iteration}) failed ({type(exc).__name__}: {exc}); "
                "a resume starts from the last periodic checkpoint")
        out["final_metrics"] = self.last_row
        return out

    def summary(self, status: str) -> dict:
        out = {"status": status, "iterations": self.iteration, "env_steps": self.env_steps,
               "final_metrics": self.last_row}
        if self.spec.world_size > 1 and status == "completed":
            self.watch.leave("finished")  # before the last collective: a rank done waiting there is not silent
            out["data_parallel"] = self._check_ranks_in_sync()
        return out

    def _check_ranks_in_sync(self) -> dict:
        """All ranks' actor parameters must be identical after training (gradients were averaged)."""
        import torch.distributed as dist

        torch = self.torch
        flat = torch.cat([p.detach().reshape(-1).double() for p in self.learner.actor.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(self.spec.world_size)]
        dist.all_gather(gathered, flat)
        in_sync = all(torch.equal(gathered[0], g) for g in gathered[1:])
        return {"world_size": self.spec.world_size, "actor_params_equal": bool(in_sync),
                "actor_param_sums": [float(g.sum()) for g in gathered]}

    def close(self) -> None:
        self.metrics.close()
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and self.device.type == "cpu":
            dist.destroy_process_group()  # NCCL's is skipped: the process exits right after (learner_main)
