"""`train`: the Hydra training app.

Every composed config is validated (unilab.config.validation: the execution probe and every value check)
before anything exists: a run's, `train --cfg job|hydra|all`'s (then printed, a job's with the evidence
the run would record) and each job's of `train -m`. Errors the user can fix (an execution mode the host
cannot honour, a bad key or value) are printed without a traceback and exit with status 2.

`train -m` (a sweep): every job is composed and validated before the first is launched, and one refused
job refuses the sweep (exit 2, nothing created). Then every job runs, a failed one is recorded and the
sweep goes on, an interrupted one stops it; the exit status is the worst job's (see unilab.cli.sweep).
`train -m ... --dry-run` lists the jobs, validated, and creates nothing. `train -m ... hydra/launcher=unilab_packed`
runs up to `hydra.launcher.max_parallel` jobs at once, each a `train` of its own (see unilab.jobs.packed);
its options and the refusal of a packed bench preset are checked first (unilab.cli.packing).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

import hydra
from omegaconf import DictConfig

from unilab.config import register_configs, register_resolvers
from unilab.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, STATUS

from . import packing
from . import sweep as sweeps
from .hydra_compose_once import jobs_composed_by_the_launcher, mode_from_overrides, mode_in
from .short_form import UsageError, expand_short_form
from .user_errors import CONF_DIR, user_error


@dataclass
class _Show:
    """`train --cfg TYPE [--package P] [--resolve]`: the request is validated, then its config printed."""

    cfg_type: str
    package: str | None
    resolve: bool


@dataclass
class _Pass:
    """What the task function does with each composed config of this `train` call."""

    sweep: sweeps.Sweep | None = None  # a job of `train -m`
    check_only: bool = False  # validate, record the outcome (a sweep's jobs, before any is launched)
    show: _Show | None = None  # validate, then print the job's config with the evidence


_PASS = _Pass()


def _task(cfg: DictConfig) -> int | None:
    if _PASS.sweep is not None:
        return _sweep_job(cfg, _PASS.sweep)
    try:
        code = _run_or_show(cfg)
    except Exception as exc:
        message = user_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)  # here, not after Hydra's "Error executing job" line
        raise SystemExit(EXIT_USAGE) from None
    if code:
        raise SystemExit(code)
    return None


def _run_or_show(cfg: DictConfig) -> int:
    from unilab.config import validate

    request = validate(cfg, gpu_required=_PASS.show is None)  # every check, before anything exists
    if _PASS.show is not None:
        for note in request.notes:
            print(f"unilab: note: {note}", file=sys.stderr)
        if _PASS.show.cfg_type == "job":
            _print_job(cfg, request, _PASS.show)
        return 0
    from unilab.launcher.launch import launch
    from unilab.launcher.prepare import prepare_run

    return launch(prepare_run(request), cfg)


def _print_job(cfg: DictConfig, request, show: _Show) -> None:
    """What `train --cfg job` prints: the composed config, its `execution_evidence` the probe's findings."""
    from omegaconf import Container, OmegaConf

    from unilab.config.validation import COMPUTED_KEY

    shown = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False, enum_to_str=True))
    shown[COMPUTED_KEY] = request.evidence.model_dump(mode="json")
    package = None if show.package in (None, "_global_") else show.package
    node = shown if package is None else OmegaConf.select(shown, package)
    if node is None:
        print(f"package '{package}' not found in config", file=sys.stderr)
        raise SystemExit(1)
    if package is not None:
        print(f"# @package {package}")
    if request.evidence.configured == "mps":
        print(f"# {COMPUTED_KEY}: what runtime_manifest.json records as cuda_process_sharing (effective: mps once "
              "the launcher sees both processes among the daemon's clients)")
    if not isinstance(node, Container):
        print(node)
        return
    if show.resolve:
        OmegaConf.resolve(node)
    sys.stdout.write(OmegaConf.to_yaml(node))


def _sweep_job(cfg: DictConfig, sweep: sweeps.Sweep) -> int | None:
    """One job of a sweep: its exit status (errors printed, not raised); an interrupted job stops the sweep.
    In the check pass (before any job is launched) only its validation, recorded as the job's refusal."""
    from hydra.core.hydra_config import HydraConfig

    from unilab.config import validate
    from unilab.launcher.launch import launch
    from unilab.launcher.prepare import prepare_run

    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    values = sweeps.swept_values(overrides, sweep.swept_keys, hydra_cfg.sweeper.get("params"))
    index = sweep.job_index if sweep.job_index is not None else int(hydra_cfg.job.num)
    job = sweeps.Job(index=index, overrides=overrides if sweep.dry_run or not values
                     else [f"{key}={value}" for key, value in values])
    sweep.jobs.append(job)
    suffix = sweeps.run_name_suffix(values) if not cfg.training.run.run_name else ""
    try:
        request = validate(cfg)  # in the run pass again: the host may have changed since the check pass
        if _PASS.check_only:
            return None
        prepared = prepare_run(request, name_suffix=suffix)
        job.run_dir = str(prepared.run_dir)
        job.code = launch(prepared, cfg)
    except KeyboardInterrupt:
        job.code = EXIT_INTERRUPTED
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as this job's failure; the sweep goes on
        message = user_error(exc)
        if _PASS.check_only and message is not None:
            job.refusal, job.code = message, EXIT_USAGE
            return job.code
        if message is None:
            traceback.print_exc()
        print(message or f"unilab: job #{job.index} failed: {exc!r}", file=sys.stderr)
        job.code = EXIT_USAGE if message else EXIT_FAILED
    if job.code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt  # SIGINT/SIGTERM stopped this run: the sweep stops too
    if job.code and sweep.job_index is None:  # a packed job's end is told by its launcher
        print(f"unilab: job #{job.index} {STATUS.get(job.code, 'failed')} (exit {job.code}); "
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


_SHOW_FLAGS = {"--cfg": "cfg", "-c": "cfg", "--package": "package", "-p": "package"}


def _show_request(overrides: list[str]) -> tuple[_Show, list[str]] | None:
    """For `--cfg TYPE`: what to show, and the command line without the flags that show it (run as a job, the
    request is validated first); None without --cfg."""
    show, rest, it = {"cfg": None, "package": None, "resolve": False}, [], iter(overrides)
    for arg in it:
        flag, eq, value = arg.partition("=")
        if arg == "--resolve":
            show["resolve"] = True
        elif flag in _SHOW_FLAGS and flag.startswith("--") and eq:
            show[_SHOW_FLAGS[flag]] = value
        elif arg in _SHOW_FLAGS:
            show[_SHOW_FLAGS[arg]] = next(it, None)
        else:
            rest.append(arg)
    if show["cfg"] is None:
        return None
    if show["cfg"] not in ("job", "hydra", "all"):
        raise UsageError(f"--cfg {show['cfg']}: expected job, hydra or all")
    return _Show(show["cfg"], show["package"], show["resolve"]), rest


def _run_app(app, overrides: list[str], job_pass: _Pass) -> None:
    """Hydra composes and runs the task function once (a sweep: once per job) in the given pass; an error the
    user can fix is printed and exits 2."""
    global _PASS
    _PASS = job_pass
    sweeps.set_current(None if job_pass.check_only else job_pass.sweep)
    try:
        with _hydra_raises(overrides), mode_from_overrides():
            app()
    except KeyboardInterrupt:
        if job_pass.sweep is None:
            raise
        job_pass.sweep.interrupted = True
    except SystemExit:
        raise
    except Exception as exc:
        message = user_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    finally:
        _PASS = _Pass()
        sweeps.set_current(None)


@contextmanager
def _scratch_sweep_dir(overrides: list[str]):
    """A sweep that launches nothing (its check pass): Hydra's record of it (multirun.yaml) goes to a scratch
    directory, removed after, and its "Launching N jobs" log is off (it would read as if they ran)."""
    scratch = tempfile.mkdtemp(prefix="unilab-sweep-check-")
    try:
        yield [*overrides, f"hydra.sweep.dir={scratch}", "hydra/hydra_logging=disabled"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _checked_sweep(app, overrides: list[str], dry_run: bool) -> None:
    """`train -m`: every job composed and validated before any is launched; one refused job refuses the sweep
    (exit 2, nothing created). `--dry-run` stops after the list."""
    try:
        packed = packing.packed_options(overrides)
    except ValueError as exc:  # a bad launcher option, or a bench preset packed
        print(f"unilab: invalid configuration\n  {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    checked = sweeps.Sweep(swept_keys=sweeps.sweep_keys(overrides), dry_run=dry_run)
    # The check pass composes and validates each job here, one after the other, whatever launcher runs them
    # after; so neither pass needs the sweeper's own early composition of every job.
    with _scratch_sweep_dir(packing.without_launcher(overrides) if packed else overrides) as check_overrides, \
            jobs_composed_by_the_launcher():
        _run_app(app, check_overrides, _Pass(sweep=checked, check_only=True))
    if checked.interrupted:
        raise SystemExit(EXIT_INTERRUPTED)
    refused = [job for job in checked.jobs if job.refusal]
    if dry_run:
        at_once = f", up to {packed.max_parallel} at once" if packed else ""
        print(f"train -m --dry-run: {len(checked.jobs)} job(s) would run{at_once} (nothing was created):")
        for job in checked.jobs:
            print(f"  #{job.index} {' '.join(job.overrides)}" + (" -> refused" if job.refusal else ""))
    for job in refused:
        print(f"unilab: job #{job.index} ({' '.join(job.overrides)}) refused:\n{job.refusal}", file=sys.stderr)
    if refused:
        print(f"unilab: {len(refused)} of {len(checked.jobs)} job(s) refused; no job was launched", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    if dry_run:
        return
    sweep = sweeps.Sweep(swept_keys=checked.swept_keys)
    with jobs_composed_by_the_launcher():
        _run_app(app, overrides, _Pass(sweep=sweep))
    sweeps.print_summary(sweep)
    code = sweep.exit_code()
    if code:
        raise SystemExit(code)


def run_packed_job(overrides: list[str], sweep: sweeps.Sweep) -> int:
    """One job of a packed sweep, in its own process: run as the sweep's job `sweep.job_index` would run in turn
    (its run name carries its swept values); its exit status."""
    _run_app(_app(), overrides, _Pass(sweep=sweep))
    return sweep.exit_code()


def _app():
    """The Hydra app of `train`: composes the config and runs the task function in the current pass."""
    register_configs()
    register_resolvers()
    return hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(_task)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    multirun = any(a in ("-m", "--multirun") for a in argv) or mode_in(argv) == "MULTIRUN"  # as Hydra will read it
    try:
        if dry_run and not multirun:
            raise UsageError("--dry-run lists the jobs of a sweep: train -m ... --dry-run")
        overrides = expand_short_form(argv)
        show = None if multirun else _show_request(overrides)
    except UsageError as exc:
        print(f"train: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    app = _app()
    if multirun:
        _checked_sweep(app, overrides, dry_run)
    elif show is not None:
        what, job_overrides = show
        _run_app(app, job_overrides, _Pass(show=what))  # validated (and a job's config printed)
        if what.cfg_type != "job":
            _run_app(app, overrides, _Pass())  # Hydra prints its own and the whole config
    else:
        _run_app(app, overrides, _Pass())


if __name__ == "__main__":
    main()
