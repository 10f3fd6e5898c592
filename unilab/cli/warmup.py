"""`unilab warmup [train overrides...]`: compile the kernels a `train` with these overrides needs, into the
kernel cache (unilab.kernel_cache), and keep nothing else.

It runs that training for a few iterations past its first update (the physics kernels compile while the
worlds are built, the losses at the first update) in a scratch log directory that it removes afterwards,
with no play, export or loggers. A cluster job, or an image build, runs it once per workload; later runs
with the same cache start warm. The console names each phase and how long it took.

On a host without a usable NVIDIA GPU, a command that names no device warms the CPU kernels instead (the
training on `training.run.device=cpu` at the `cpu_smoke` preset's sizes: the kernels do not depend on them), and
says so; a command that names a CUDA device is refused as `train` refuses it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from unilab.exit_codes import EXIT_USAGE

# Iterations past the first update: the losses compile at the first one, the rest check it ran.
AFTER_FIRST_UPDATE = 3
# Set by warmup itself; a user's value for them would be overwritten.
OWN_KEYS = ("algo.max_iterations", "training.run.log_dir", "training.run.run_name", "training.run.resume",
            "training.outputs.no_play", "training.outputs.export_onnx", "training.outputs.logger",
            "training.outputs.video_interval")
DEVICE_KEYS = ("training.run.device", "training.run.devices")
CPU_OVERRIDES = ("training.run.device=cpu", "+preset=cpu_smoke")  # sizes that compile the same kernels, quickly


def _key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0]


def _for_this_host(overrides: list[str]) -> tuple[list[str], int, str | None]:
    """(the overrides to warm, their iterations, the line that says they changed). A command that names no device,
    on a host where no NVIDIA GPU can be used, warms the CPU kernels; anything else is checked as given."""
    from unilab.config.validation import NoGpuError

    try:
        return overrides, _iterations(overrides), None
    except NoGpuError:
        if any(_key(o) in DEVICE_KEYS for o in overrides):
            raise
    keys = {_key(o) for o in overrides}
    cpu = [*overrides, *(o for o in CPU_OVERRIDES if _key(o) not in keys)]
    said = ", ".join(o for o in CPU_OVERRIDES if o in cpu)
    line = (f"unilab warmup: no NVIDIA GPU can be used here: warming the CPU kernels ({said}); a GPU host "
            "compiles its CUDA kernels at its own warmup")
    return cpu, _iterations(cpu), line


def _iterations(overrides: list[str]) -> int:
    """The first update's iteration plus a few, from the composed and validated config (the first-update rule:
    unilab.algos.config.first_update)."""
    from unilab.algos.config import first_update
    from unilab.cli.user_errors import compose_train
    from unilab.config import validate

    config = validate(compose_train(overrides)).config
    per_iteration = config.task.num_envs * config.training.loop.env_steps_per_sync
    return first_update(config.algo, per_iteration).iteration + AFTER_FIRST_UPDATE


def warmup(args: argparse.Namespace) -> int:
    from unilab.cli.short_form import UsageError, expand_short_form
    from unilab.cli.user_errors import user_error
    from unilab.kernel_cache import kernel_cache_dirs, kernel_cache_env, size_bytes
    from unilab.launcher.console import NO_NEXT_STEPS_ENV

    try:
        overrides = expand_short_form(args.overrides)
        own = [o for o in overrides if _key(o) in OWN_KEYS]
        if own or any(o.startswith("-") for o in overrides):
            raise UsageError(f"takes train overrides other than {', '.join(OWN_KEYS)} (warmup sets them), "
                             f"and no flags: {' '.join(own or [o for o in overrides if o.startswith('-')])}")
        overrides, iterations, changed = _for_this_host(overrides)
    except UsageError as exc:
        print(f"unilab warmup: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - an error the user can fix is printed as train prints it
        message = user_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_USAGE
    if changed:
        print(changed, file=sys.stderr)
    dirs = kernel_cache_dirs()
    before = {var: size_bytes(path) for var, path in dirs.items()}
    scratch = tempfile.mkdtemp(prefix="unilab-warmup-")
    cmd = [sys.executable, "-m", "unilab.cli.train", *overrides, f"algo.max_iterations={iterations}",
           f"training.run.log_dir={scratch}", "training.run.run_name=warmup", "training.outputs.no_play=true",
           "training.outputs.export_onnx=false", "training.outputs.logger=[]", "training.outputs.video_interval=null"]
    started = time.monotonic()
    try:
        code = subprocess.call(cmd, env={**os.environ, **kernel_cache_env(), NO_NEXT_STEPS_ENV: "1"})
    except KeyboardInterrupt:
        code = 130
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    took = time.monotonic() - started
    if code:
        print(f"unilab warmup: the training run failed (exit {code}) after {took:.0f} s; the caches keep what was "
              "compiled", file=sys.stderr)
        return code
    print(f"unilab warmup: compiled in {took:.0f} s ({iterations} iterations); kernel caches:", file=sys.stderr)
    for var, path in dirs.items():
        grown = (size_bytes(path) - before[var]) / 2**20
        print(f"  {var}={path}  ({size_bytes(path) / 2**20:.1f} MiB, {grown:+.1f} MiB now)", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    parser = sub.add_parser("warmup", help="compile the kernels of a train command into the kernel cache "
                            "($UNILAB_CACHE_DIR/kernels, default ~/.cache/unilab/kernels) and keep nothing else",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs=argparse.REMAINDER, metavar="OVERRIDE",
                        help="train overrides, short form too (--algo fastsac --task g1_walk_flat +execution=mps ...)")
    parser.set_defaults(func=warmup)
