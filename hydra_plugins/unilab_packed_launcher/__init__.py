"""unilab's packed launcher as Hydra sees it (`hydra/launcher=unilab_packed`): Hydra instantiates launchers only
from the hydra_plugins package. The scheduling is unilab.jobs.packed's; this class turns Hydra's list of job
overrides into unilab's jobs (each run by `python -m unilab.cli.packed_job`) and their exit statuses into Hydra's job
returns."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class UnilabPackedLauncher(Launcher):
    def __init__(self, max_parallel: int = 2, job_memory_mib: int = 4608, memory_wait_s: float = 600.0) -> None:
        from unilab.cli.packing import check_options

        check_options(max_parallel, job_memory_mib, memory_wait_s)  # `train` checked them already; Hydra alone did not
        self.max_parallel, self.job_memory_mib, self.memory_wait_s = max_parallel, job_memory_mib, memory_wait_s
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context  # the task function runs in each job's process

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from unilab.cli import packed_job
        from unilab.cli import sweep as sweeps
        from unilab.jobs.memory_guard import MemoryGuard, cuda_ordinals
        from unilab.jobs.packed import PackedJob, PackedSweep

        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        swept = sweeps.sweep_keys(list(self.config.hydra.overrides.task))
        params = self.config.hydra.sweeper.get("params")
        jobs = []
        for n, overrides in enumerate(job_overrides):
            job_cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            values = sweeps.swept_values(list(overrides), swept, params)
            jobs.append(PackedJob(index=initial_job_idx + n, overrides=list(overrides),
                                  shown=[f"{k}={v}" for k, v in values] or list(overrides),
                                  ordinals=cuda_ordinals(job_cfg.training.run)))
        sweep = sweeps.current()
        ended = sweep.jobs if sweep is not None else []

        def record(job: PackedJob, code: int, run_dir: str | None) -> None:
            ended.append(sweeps.Job(index=job.index, overrides=job.shown, code=code, run_dir=run_dir))

        packed = PackedSweep(self.max_parallel, MemoryGuard(self.job_memory_mib, self.memory_wait_s),
                             command=lambda job, result: packed_job.command(job.index, job.overrides, swept, result),
                             console_dir=sweep_dir, record=record)
        packed.run(jobs)
        if packed.interrupted:
            raise KeyboardInterrupt  # `train` ends the sweep as interrupted (exit 130)
        codes = {job.index: job.code for job in ended}
        returns = []
        for job in jobs:
            ret = JobReturn(overrides=job.overrides, status=JobStatus.COMPLETED)
            ret.return_value = codes.get(job.index)
            returns.append(ret)
        return returns
