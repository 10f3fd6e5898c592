"""`unilab mps ...` subcommands (argparse wiring; the work is done in the sibling modules)."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import MpsToolError
from .host import HostFacts

make_host = HostFacts  # tests replace this with a HostFacts of fakes


def _start(args) -> int:
    from .daemon import StartOptions, start

    return start(make_host(), StartOptions(gpu=args.gpu, all_gpus=args.all_gpus, pipe_dir=args.pipe_dir,
                                           log_dir=args.log_dir, foreground=args.foreground,
                                           exclusive=args.exclusive, timeout_s=args.timeout))


def _stop(args) -> int:
    from .daemon import stop

    return stop(make_host(), args.gpu, args.pipe_dir, args.timeout)


def _status(args) -> int:
    from .status import collect, render

    entries = collect(make_host())
    print(json.dumps(entries, indent=2) if args.json else render(entries))
    return 0


def _env(args) -> int:
    from .layout import select_state

    host = make_host()
    _, state = select_state(host.root(), host.env, args.gpu, args.pipe_dir)
    if host.start_time(state.daemon_pid) != state.daemon_start_time:
        raise MpsToolError(f"unilab mps: the daemon recorded for {state.pipe_dir} (pid {state.daemon_pid}) is not "
                           "running any more; start one with `unilab mps start`")
    print("\n".join(state.exports()))
    return 0


def _which(parser: argparse.ArgumentParser, pipe_dir: bool = True) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--gpu", metavar="UUID|INDEX", help="GPU by NVML index or (prefix of) UUID")
    if pipe_dir:
        group.add_argument("--pipe-dir", metavar="D", help="the daemon's pipe directory")


def add_mps_parser(sub):
    """The `unilab mps` parser; returns its actions, to which `unilab` adds `doctor`."""
    mps = sub.add_parser("mps", help="start/stop/inspect a user-owned CUDA MPS control daemon; run the probe")
    msub = mps.add_subparsers(dest="action", required=True)

    start = msub.add_parser("start", help="start a control daemon in user-owned 0700 directories and print exports")
    which = start.add_mutually_exclusive_group()
    which.add_argument("--gpu", metavar="UUID|INDEX", help="default: CUDA's device 0 (honours CUDA_VISIBLE_DEVICES)")
    which.add_argument("--all-gpus", action="store_true",
                       help="one daemon for every visible GPU (a node's data-parallel ranks); default: "
                            "/tmp/unilab-mps-$UID/all-gpus/pipe")
    start.add_argument("--pipe-dir", metavar="D",
                       help="default: /tmp/unilab-mps-$UID/<gpu-uuid>/pipe")
    start.add_argument("--log-dir", metavar="D", help="default: log/ beside the pipe directory")
    start.add_argument("--foreground", action="store_true", help="run in the foreground until Ctrl-C, then quit it")
    start.add_argument("--exclusive", action="store_true",
                       help="set compute mode EXCLUSIVE_PROCESS (root; restored by stop)")
    start.add_argument("--timeout", type=float, default=10.0, metavar="S", help="wait for the daemon (default 10)")
    start.set_defaults(func=_guarded(_start))

    stop = msub.add_parser("stop", help="quit a daemon started by `unilab mps start` (and only such a daemon)")
    _which(stop)
    stop.add_argument("--timeout", type=float, default=10.0, metavar="S", help="wait for it to exit (default 10)")
    stop.set_defaults(func=_guarded(_stop))

    status = msub.add_parser("status", help="read-only: known daemons, their servers and clients")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_guarded(_status))

    env = msub.add_parser("env", help="print the export lines for a daemon started by `unilab mps start`")
    _which(env)
    env.set_defaults(func=_guarded(_env))
    return msub


def _guarded(func):
    """MpsToolError becomes its message on stderr and its exit status."""

    def handler(args) -> int:
        try:
            return func(args)
        except MpsToolError as exc:
            print(exc, file=sys.stderr)
            return exc.code

    return handler
