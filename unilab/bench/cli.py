"""`unilab bench extract` / `compare` / `gate` (exit 0 pass, 1 a gate failed, 2 bad input or no verdict:
compare gives none unless both arms have a completed run, and names the arm that is missing or failed;
gate runs the whole matrix, see unilab.bench.gate)."""

from __future__ import annotations

import argparse
import json
import sys

from unilab.exit_codes import EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE

from .extract import DEFAULT_LAST, DEFAULT_SKIP_FIRST
from .gate import CASES, DEFAULT_ITERATIONS, DEFAULT_REPEATS


def _extract(args) -> int:
    from .extract import RunError, extract, render

    try:
        result = extract(args.run, last=args.last, skip_first=args.skip_first)
    except RunError as exc:
        print(f"unilab bench extract: {exc}", file=sys.stderr)
        return EXIT_USAGE
    result.pop("config")
    print(json.dumps(result, indent=2) if args.json else render(result))
    return EXIT_COMPLETED


def _compare(args) -> int:
    from .compare import CompareOptions, compare, expand_runs, load_runs, parse_mode, render_markdown
    from .extract import RunError
    from .plot import PlotUnavailable, plot, require_matplotlib

    opts = CompareOptions(baseline_mode=parse_mode(args.baseline_mode), candidate_mode=args.candidate_mode,
                          threshold_pct=args.threshold_pct, backpressure_tolerance_pct=args.backpressure_tolerance_pct,
                          skip_first=args.skip_first, last=args.last)
    try:
        if args.plot:
            require_matplotlib()  # fail before the work, not after it
        runs = load_runs(expand_runs(args.runs), opts)
        report = compare(runs, opts)
    except (RunError, PlotUnavailable) as exc:
        print(f"unilab bench compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_markdown(report))
    if args.plot:
        print(f"unilab bench compare: wrote {plot(report, runs, args.plot)}", file=sys.stderr)
    return EXIT_COMPLETED if report["passed"] else EXIT_FAILED


def _gate(args) -> int:
    from .gate_run import run_gate

    return run_gate(args)


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--last", type=int, default=DEFAULT_LAST, metavar="N",
                        help=f"report the last N iterations (default {DEFAULT_LAST})")
    parser.add_argument("--skip-first", type=int, default=DEFAULT_SKIP_FIRST, metavar="N",
                        help=f"ignore the first N iterations as warm-up (default {DEFAULT_SKIP_FIRST})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmark tools: per-run extraction, the MPS A/B comparison, the gate")
    bsub = bench.add_subparsers(dest="action", required=True)

    extract = bsub.add_parser("extract", help="window means/stds, evidence and status of one run (exit 2 if unusable)")
    extract.add_argument("run", help="run directory")
    _window(extract)
    extract.set_defaults(func=_extract)

    compare = bsub.add_parser("compare", help="MPS vs baseline arms: improvement and gates (exit 0 pass, 1 fail, 2 input "
                                  "or an arm missing or without a completed run)")
    compare.add_argument("runs", nargs="+", metavar="RUN", help="run directories, or folders holding them")
    compare.add_argument("--baseline-mode", default="null", metavar="MODE", help="configured mode of the baseline arm")
    compare.add_argument("--candidate-mode", default="mps", metavar="MODE", help=argparse.SUPPRESS)
    compare.add_argument("--threshold-pct", type=float, default=20.0, metavar="P",
                         help="minimum env_steps_per_s improvement of the candidate, in percent (default 20)")
    compare.add_argument("--backpressure-tolerance-pct", type=float, default=10.0, metavar="P",
                         help="allowed growth of the final ingress_backpressure count, in percent (default 10)")
    compare.add_argument("--plot", metavar="OUT.png", help="write a bar chart (needs matplotlib)")
    _window(compare)
    compare.set_defaults(func=_compare)

    gate = bsub.add_parser(
        "gate", help="the benchmark matrix from one command: every case's default and MPS arms, one run at a time, "
                     "then the table and verdict (exit 0 pass, 1 fail, 2 bad input)",
        description="Runs each case's default and MPS arms (train -m +execution=default|mps +bench=offpolicy_gate), "
                    "one job at a time, each case into its own folder under --out, then checks what "
                    "`unilab bench compare` checks with the case's threshold and writes gate.json, gate.md and "
                    "gate.png there. Cases: " + ", ".join(f"{c.name} (+{c.threshold_pct:g} %, {c.envs} envs)"
                                                          for c in CASES) + ".")
    gate.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="train overrides for every job, after --")
    gate.add_argument("--cases", action="append", metavar="NAME[,NAME]", help="run only these cases (default: all)")
    gate.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N",
                      help=f"iterations per run (default {DEFAULT_ITERATIONS})")
    gate.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, metavar="K",
                      help=f"runs per arm, seeds 1..K (default {DEFAULT_REPEATS})")
    gate.add_argument("--threshold", action="append", default=[], metavar="[CASE=]PCT",
                      help="minimum env_steps_per_s improvement of a case (or of all), in percent (repeatable)")
    gate.add_argument("--envs", action="append", default=[], metavar="[CASE=]N",
                      help="task.num_envs of a case (or of all) (repeatable)")
    gate.add_argument("--device", default="cuda:0", metavar="cuda:N", help="training.run.device of every job (default "
                      "cuda:0); the MPS arm runs under the daemon of its GPU")
    gate.add_argument("--out", metavar="DIR", help="a new folder for the gate (default runs/gate/<time>)")
    gate.add_argument("--start-daemon", action="store_true",
                      help="start an MPS daemon for the GPU (as `unilab mps start`) and stop it at the end; "
                           "without it one must be running")
    gate.add_argument("--allow-short", action="store_true",
                      help="accept fewer than 300 iterations, 50 ignored, 100 reported or 2 repeats per arm "
                           "(the table says SHORT)")
    gate.add_argument("--no-plot", action="store_true", help="no gate.png (which needs matplotlib)")
    gate.add_argument("--dry-run", action="store_true", help="list the jobs and their train commands; create nothing")
    _window(gate)
    gate.set_defaults(func=_gate)
