"""The learner process: serves inference to the collector and runs the update phases.

Per iteration: for each of the `env_steps_per_sync` ticks, wait for the collector's
observation, run the acting policy on a high-priority stream and publish the action; then
the update phase on its own stream: publish the weights of the previous update to the acting
copy, launch the (captured) update, ingest the replay slot (`training.loop.update_before_ingest`, the
default; false ingests the slot first). The host does not wait for the
update: the next ticks' inference and the collector's physics overlap it on the GPU, which
is the overlap CUDA MPS turns into throughput. The acting policy therefore lags the trained
one by one update phase.

What the loop reports of each iteration (metrics row, NaN guard, progress, the replay's filling) is in
learner_report; resuming (the restore, the refill) in unilab.rundir.resume; when updates start, in
unilab.algos.config.first_update.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from unilab.algos.config import first_update
from unilab.algos.transition import TRANSITION_FIELDS
from unilab.mps.gemm_check import check_under_thread_share, weight_products
from unilab.rundir.layout import POLICY_ONNX_FILE

from .child_log import leave, log_stderr
from .learner_report import Collected, UpdateStart, open_iteration_log
from .messages import Mailbox, StopRequested, become_child, stop_requested, wait_event, why_stopped
from .protocol import LEARNER_INBOX, Act, ChunkReady, Failed, Finished, Obs, Phase, Stop
from .spec import RoleSpec, report_ready


def learner_main(spec: RoleSpec, inbox, to_collector, to_launcher, stop_event, go_event) -> None:
    """The learner role: join the data-parallel group (several ranks), build the loop, wait for the launcher's
    go, run, report; then stop the collector."""
    name = spec.name("learner")
    log_stderr(spec.run_dir, name)
    become_child(name, to_launcher)
    loop = watch = None
    code = 0
    mailbox = Mailbox(name, inbox, stop_event, LEARNER_INBOX)
    try:
        device = start_learner_process(spec, to_launcher)
        if spec.world_size > 1:
            from .rank_watch import join_world  # torch.distributed: imported in the child only

            watch = join_world(spec.world, device, spec.training.loop.dist_timeout_s, name, to_launcher.put)
        built = LearnerLoop(spec, mailbox, to_collector, to_launcher, watch)
        wait_for_go(go_event, spec.training.loop.startup_timeout_s, stop_event, name)
        built.phase(f"training: {spec.algo.max_iterations} iterations of {built.dims.num_envs} envs x "
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
        from .rank_watch import report_failure

        peer_ended = report_failure(exc, watch, name, to_launcher.put, stopping=lambda: stop_requested(stop_event))
        if peer_ended and loop is not None and loop.saves_after_a_failed_collective():
            # a collective raised because another rank is gone or stopping: this rank stops as the others do
            # and keeps what was learned; the collective's own error goes to this learner's log
            print(f"{name}: a collective failed as another rank ended; stopping:\n{traceback.format_exc()}",
                  file=sys.stderr)
            to_launcher.put(Finished(name, loop.save_on_stop()))
        else:
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


def wait_for_go(go_event, timeout_s: float, stop_event=None, name: str = "learner") -> None:
    """Block until the launcher has verified every child (MPS attachment included); a stop request
    (stop event, SIGTERM) or the launcher's death ends the wait within messages.WATCH_S."""
    wait_event(go_event, role=name, phase="startup: waiting for the launcher's go (MPS client verification?)",
               timeout_s=timeout_s, stop_event=stop_event)


class LearnerLoop:
    """Construction connects to the collector and builds the learner (nothing waits for the launcher; the
    process has reported its start and joined the data-parallel group); `run` trains until algo.max_iterations."""

    def __init__(self, spec: RoleSpec, mailbox: Mailbox, to_collector, to_launcher, watch=None):
        import torch
        import torch.multiprocessing  # noqa: F401  (CUDA IPC pickling for the queues)

        from .shared import CollectorLink

        self.torch, self.spec, self.mailbox = torch, spec, mailbox
        self.to_collector, self.to_launcher = to_collector, to_launcher
        self.left_collector = False
        self.watch = watch  # the rank watch of a data-parallel run (rank_watch.join_world), else None
        self.device = torch.device(spec.device)
        torch.manual_seed(spec.seed)
        self.link = CollectorLink(mailbox, self.device, to_collector, spec.training.loop.startup_timeout_s)
        self.dims = self.link.dims
        t0 = time.monotonic()
        self.phase(f"learner: building the {spec.algo.name} networks and replay")
        self._build_learner()
        self.log = open_iteration_log(spec, self.device, self.dims.rows_per_slot, self.iteration, to_launcher.put)
        cuda = self.device.type == "cuda"
        self.inf_stream = torch.cuda.Stream(self.device, priority=-1) if cuda else None
        self.upd_stream = torch.cuda.Stream(self.device, priority=0) if cuda else None
        self.last_published = None  # the update stream's stamp after the latest publish: inference waits for it
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

    def _build_learner(self) -> None:
        """The algorithm's learner (the products it makes checked under the MPS thread share), restored when
        resuming; when its updates may start."""
        from unilab.algos.base import make_learner
        from unilab.rundir.resume import refill_target, restore, weights_record

        spec, dims, device, algo = self.spec, self.dims, self.device, self.spec.algo
        self.learner = make_learner(algo, dims.obs_dim, dims.critic_obs_dim, dims.action_dim, device, spec.seed,
                                    num_envs=dims.num_envs, mirror=self.link.mirror)
        if self.link.mirror is not None:
            self.phase("learner: symmetry on: half of every batch mirrored left-right (algo.symmetry)")
        check_under_thread_share(device, "learner", shapes=weight_products(
            (self.learner.actor, self.learner.critic), self.learner.gemm_batches(dims.num_envs)))
        self.weights_record = weights_record(spec.config.values, dims)  # saved with each checkpoint
        self.iteration, self.env_steps = spec.start_iteration, 0
        self.trained_once = False
        refill = 0  # replay rows a resumed run collects before its first update
        if spec.resume:
            self.iteration, self.env_steps = restore(self.learner, spec.resume, device, self.weights_record["dims"])
            # Act with the restored policy at once, but let the (empty) replay refill before updating:
            # a few thousand fresh samples and a full update cycle would overfit and wreck the policy.
            self.learner.publish_policy()
            self.trained_once = True
            refill = refill_target(self.learner.replay.capacity, spec.training.run.resume_refill_fraction,
                                   (algo.max_iterations - self.iteration) * dims.rows_per_slot)
            self.phase(f"resume: refilling the replay to {refill} transitions before the first update")
        self.update_start = UpdateStart(first_update(algo, dims.rows_per_slot), self.iteration, refill, self.phase)
        # Compile the acting policy (if the algo compiles) now, not at the first trained tick's deadline.
        self.learner.act(self.link.obs)

    def _stream(self, stream):
        import contextlib

        return self.torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def run(self) -> None:
        max_iterations, k_ticks = self.spec.algo.max_iterations, self.dims.ticks_per_slot
        timeout = self.spec.training.loop.stall_timeout_s
        tick = 0
        while self.iteration < max_iterations:
            t_iter = time.perf_counter()
            st = self.log.stamps_of(self.iteration)
            wait_ms = 0.0
            for k in range(k_ticks):
                t0 = time.perf_counter()
                # The first observation comes once the collector's kernels have compiled: a start-up wait.
                self.mailbox.get(Obs, phase="waiting for the collector's observation",
                                 timeout_s=timeout if tick else self.spec.training.loop.startup_timeout_s)
                wait_ms += 1e3 * (time.perf_counter() - t0)
                self._act(st, first=k == 0, last=k == k_ticks - 1)
                self.to_collector.put(Act(tick))
                tick += 1
            chunk = self.mailbox.get(ChunkReady, phase="waiting for the replay slot", timeout_s=timeout)
            self._update_phase(chunk.slot, st)
            self.env_steps += self.dims.rows_per_slot
            self.update_start.report(self.learner)
            self.log.add(Collected(self.iteration, self.env_steps, wait_ms, chunk.timings, t_iter, chunk.task_names,
                                   self.learner.replay.size), timeout)
            self.iteration += 1
            if self.iteration % self.spec.algo.save_interval == 0 and self.iteration < max_iterations:
                self.save()
        self.log.flush(timeout)
        self.save()
        if self.spec.training.outputs.export_onnx and self.spec.rank == 0:
            self._export_onnx()

    def _act(self, st: dict, first: bool, last: bool) -> None:
        """One tick's action on the inference stream: the acting policy's once it was trained, else uniform."""
        with self._stream(self.inf_stream):
            self.link.obs_ready.wait(self.inf_stream)
            if self.inf_stream is not None and self.last_published is not None:
                self.inf_stream.wait_event(self.last_published.event)  # acting weights are copied
            if first:
                st["inf_start"].record(self.inf_stream)
            if self.trained_once:
                action = self.learner.act(self.link.obs)
            else:
                action = self.torch.rand(self.link.act.shape, device=self.device) * 2 - 1
            self.link.act.copy_(action)
            self.link.act_ready.record(self.inf_stream)
            if last:
                st["inf_end"].record(self.inf_stream)

    def _update_phase(self, s: int, st: dict) -> None:
        with self._stream(self.upd_stream):
            if self.upd_stream is not None:
                self.upd_stream.wait_event(st["inf_end"].event)  # inference has read the acting weights
            # Publish the previous update's weights before waiting for the new slot, so the next
            # ticks' inference (and the collector's physics) can overlap this update phase.
            if self.trained_once:
                self.learner.publish_policy()
            st["published"].record(self.upd_stream)
            self.last_published = st["published"]
            if self.spec.training.loop.update_before_ingest:
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
            self.log.record_stats(self.iteration, slot_stats, losses)
            st["train_end"].record(self.upd_stream)

    def _ingest(self, s: int, st: dict | None = None):
        """Wait for slot `s` on the update stream, add it to the replay and hand it back; its statistics."""
        slot = self.link.take_slot(s, self.upd_stream)
        if st is not None:
            st["train_start"].record(self.upd_stream)
        self.learner.add({k: slot[k] for k in TRANSITION_FIELDS})
        # copied before the slot is handed back to the collector
        slot_stats = self.torch.cat([slot["episode_stats"], slot["task_metrics"]])
        self.link.hand_back(s, self.upd_stream)
        return slot_stats

    def _update(self):
        """Launch one update phase when the replay allows it; its (critic, actor, alpha) losses or None."""
        if not self.update_start.allows(self.learner, self.iteration):
            return None
        first = not self.trained_once
        if first:
            self.phase("first update: capturing the update cycle (compiled before the go where the algorithm "
                       "compiles)")
            t0 = time.monotonic()
        out = self.learner.update()
        if first:
            self.phase(f"first update launched after {time.monotonic() - t0:.1f} s; updating every iteration")
        self.trained_once = True
        return self.torch.stack([out["critic_loss"].float(), out["actor_loss"].float(), out["alpha"].float()])

    def save(self) -> None:
        from unilab.rundir.checkpoint import prune_checkpoints, save_checkpoint

        if self.spec.rank != 0:  # the ranks hold identical weights; rank 0 writes them
            return
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
        path = save_checkpoint(self.spec.run_dir, self.iteration, self.env_steps, self.learner.state_dict(),
                               meta=self.weights_record)
        prune_checkpoints(self.spec.run_dir, self.spec.training.outputs.keep_checkpoints, path)

    def _export_onnx(self) -> None:
        from unilab.rundir.checkpoint import checkpoint_name
        from unilab.rundir.policy import metadata_props

        meta = metadata_props(self.link.policy_env, task=self.spec.task.name, algo=self.spec.algo.name,
                              checkpoint=checkpoint_name(self.iteration), iteration=self.iteration,
                              env_steps=self.env_steps)
        self.learner.export_onnx(f"{self.spec.run_dir}/{POLICY_ONNX_FILE}", meta)

    def leave_collector(self) -> None:
        """This process's GPU work has ended and the collector is told so (shared.leave_peer); once only."""
        from .shared import leave_peer

        if not self.left_collector:
            self.left_collector = True
            leave_peer(self.spec.name("learner"), self.device, self.to_collector)

    def save_on_stop(self) -> dict:
        """Stopped early: the collector is released first (it may be stopping already, and must not exit while
        an update still reads its slots), then the pending metric rows (a resume continues after the checkpoint's
        iteration, so rows left unwritten would be a gap), then the checkpoint. A failure of either is reported.
        GPU work that does not end (an update whose collective waits for a rank that is gone) leaves no
        checkpoint, said so, rather than a wait for ever: the weights cannot be read."""
        out = self.summary("interrupted")
        wait_s = min(self.spec.training.loop.stall_timeout_s, 10.0)
        if not self._gpu_work_ends(wait_s):
            why = ("an update waits in a collective for a rank that is gone" if self.spec.world_size > 1
                   else "the GPU is stuck")
            out["stop_errors"] = [f"no stop-time checkpoint (iteration {self.iteration}): this learner's GPU work "
                                  f"did not end within {wait_s:g} s ({why}), so its weights cannot be read; a resume "
                                  "starts from the last periodic checkpoint"]
            return out
        self.leave_collector()
        try:
            self.log.flush(min(self.spec.training.loop.stall_timeout_s, 10.0))
        except Exception as exc:  # noqa: BLE001  (the checkpoint matters more than the last rows)
            out["stop_errors"] = [f"the pending metric rows were not written ({type(exc).__name__}: {exc})"]
            self.log.pending.clear()
        try:
            if os.path.isdir(self.spec.run_dir):  # removed mid-run: nothing to save into; the launcher names it
                self.save()
        except Exception as exc:  # noqa: BLE001
            out.setdefault("stop_errors", []).append(
                f"the stop-time checkpoint (iteration {self.iteration}) failed ({type(exc).__name__}: {exc}); "
                "a resume starts from the last periodic checkpoint")
        out["final_metrics"] = self.log.last_row
        return out

    def saves_after_a_failed_collective(self) -> bool:
        """Whether this learner may save after a collective raised because another rank is gone. On the CPU
        (gloo) a collective is synchronous and raises before the optimizer step that would take its sum, so
        the weights are whole: those of the steps that completed (of the update in progress, the ones whose
        all-reduce did). On a GPU an NCCL error reaches the host only after queued kernels may have used a
        partial sum: nothing is saved then."""
        return self.device.type == "cpu"

    def _gpu_work_ends(self, timeout_s: float) -> bool:
        """Whether every stream of this learner passes what it has queued within `timeout_s` (polled: a
        device synchronisation would wait for ever on a collective whose peer is gone). True on the CPU."""
        if self.device.type != "cuda":
            return True
        torch = self.torch
        markers = []
        for stream in (self.upd_stream, self.inf_stream, torch.cuda.current_stream(self.device)):
            marker = torch.cuda.Event()
            marker.record(stream)
            markers.append(marker)
        deadline = time.monotonic() + timeout_s
        while not all(m.query() for m in markers):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def summary(self, status: str) -> dict:
        out = {"status": status, "iterations": self.iteration, "env_steps": self.env_steps,
               "final_metrics": self.log.last_row}
        if self.spec.world_size > 1 and status == "completed":
            from .rank_watch import ranks_in_sync

            self.watch.leave("finished")  # before the last collective: a rank done waiting there is not silent
            out["data_parallel"] = ranks_in_sync(self.learner.actor, self.spec.world_size)
        return out

    def close(self) -> None:
        self.log.close()
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and self.device.type == "cpu":
            dist.destroy_process_group()  # NCCL's is skipped: the process exits right after (learner_main)
