"""`train`: the Hydra training app.

Errors the user can fix (an execution mode the host cannot honour, a bad key or value)
are printed without a traceback and exit with status 2.

`train -m` (a sweep): every job runs, a failed one is recorded and the sweep goes on, an interrupted one
stops it; the exit status is the worst job's (see unilab.cli.sweep). `train -m ... --dry-run` lists the
jobs and creates nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path

import hydra
from omegaconf import DictConfig

from unilab.config import register_configs, register_resolvers

from . import sweep as sweeps
from .short_form import UsageError, expand_short_form

# OmegaConf's message templates and type bookkeeping say nothing a user can act on; Hydra's advice to
# append an unknown key (`+key=value`) would only add a key the schemas lack, which `train` refuses.
_NOISE = re.compile(r"\$VALUE|^\s*(reference_type|object_type)=|^To append to your config use \+")
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
EXIT_USAGE = 2


_SWEEP: sweeps.Sweep | None = None  # the sweep of this `train -m`, set by main()


def _task(cfg: DictConfig) -> int | None:
    if _SWEEP is not None:
        return _sweep_job(cfg, _SWEEP)
    from unilab.launcher.launch import launch
    from unilab.launcher.prepare import prepare_run

    prepared = prepare_run(cfg)
    code = launch(prepared, cfg)
    if code:
        raise SystemExit(code)
    return None


def _sweep_job(cfg: DictConfig, sweep: sweeps.Sweep) -> int | None:
    """One job of a sweep: its exit status (errors printed, not raised); an interrupted job stops the sweep."""
    from hydra.core.hydra_config import HydraConfig

    from unilab.launcher.launch import launch
    from unilab.launcher.prepare import prepare_run

    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    values = sweeps.swept_values(overrides, sweep.swept_keys, hydra_cfg.sweeper.get("params"))
    job = sweeps.Job(index=int(hydra_cfg.job.num), overrides=overrides if sweep.dry_run or not values
                     else [f"{key}={value}" for key, value in values])
    sweep.jobs.append(job)
    if sweep.dry_run:
        return None
    suffix = sweeps.run_name_suffix(values) if not cfg.training.run_name else ""
    try:
        prepared = prepare_run(cfg, name_suffix=suffix)
        job.run_dir = str(prepared.run_dir)
        job.code = launch(prepared, cfg)
    except KeyboardInterrupt:
        job.code = sweeps.EXIT_INTERRUPTED
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as this job's failure; the sweep goes on
        message = _user_error(exc)
        if message is None:
            traceback.print_exc()
        print(message or f"unilab: job #{job.index} failed: {exc!r}", file=sys.stderr)
        job.code = sweeps.EXIT_USAGE if message else sweeps.EXIT_FAILED
    if job.code == sweeps.EXIT_INTERRUPTED:
        raise KeyboardInterrupt  # SIGINT/SIGTERM stopped this run: the sweep stops too
    if job.code:
        print(f"unilab: job #{job.index} {sweeps.STATUS.get(job.code, 'failed')} (exit {job.code}); "
              "the sweep goes on", file=sys.stderr)
    return job.code


@contextmanager
def _hydra_raises(argv: list[str]):
    """Let exceptions reach us (Hydra would print a traceback) and give Hydra our argv."""
    saved_argv, saved_env = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = ["train", *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        sys.argv = saved_argv
        if saved_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_env


def _user_error(exc: BaseException) -> str | None:
    """The message to print for an error the user can fix, or None for a bug."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from unilab.mps import CudaProcessSharingError
    from unilab.launcher.prepare import ConfigError

    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and not any(cur is seen for seen in chain):
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        if isinstance(e, CudaProcessSharingError):
            return e.render()
        if isinstance(e, ConfigError):  # our own message already says what to change
            return f"unilab: invalid configuration\n  {e}"
    if any(isinstance(e, (HydraException, OmegaConfBaseException, ConfigError)) for e in chain):
        lines: list[str] = []
        for e in chain:
            for line in str(e).strip().splitlines():
                if line.strip() and line not in lines and not _NOISE.search(line):
                    lines.append(line)
        return "unilab: invalid configuration\n" + "\n".join("  " + line for line in lines)
    return None


def main(argv: list[str] | None = None) -> None:
    global _SWEEP
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    multirun = any(a in ("-m", "--multirun") or a.lower() == "hydra.mode=multirun" for a in argv)
    try:
        if dry_run and not multirun:
            raise UsageError("--dry-run lists the jobs of a sweep: train -m ... --dry-run")
        overrides = expand_short_form(argv)
    except UsageError as exc:
        print(f"train: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    register_configs()
    register_resolvers()
    app = hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(_task)
    sweep = sweeps.Sweep(swept_keys=sweeps.sweep_keys(overrides), dry_run=dry_run) if multirun else None
    scratch = tempfile.mkdtemp(prefix="unilab-dry-run-") if dry_run else None
    if scratch:  # Hydra records a sweep (multirun.yaml) before its jobs: a dry run's record goes, and is removed;
        # and its "Launching N jobs" log would read as if they ran
        overrides += [f"hydra.sweep.dir={scratch}", "hydra/hydra_logging=disabled"]
    _SWEEP = sweep
    try:
        with _hydra_raises(overrides):
            app()
    except KeyboardInterrupt:
        if sweep is None:
            raise
        sweep.interrupted = True
    except SystemExit:
        raise
    except Exception as exc:
        message = _user_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    finally:
        _SWEEP = None
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if sweep is None:
        return
    if dry_run:
        print(f"train -m --dry-run: {len(sweep.jobs)} job(s) would run (nothing was created):")
        for job in sweep.jobs:
            print(f"  #{job.index} {' '.join(job.overrides)}")
        return
    sweeps.print_summary(sweep)
    code = sweep.exit_code()
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
