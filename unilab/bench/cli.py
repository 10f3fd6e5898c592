"""`unilab bench extract` / `unilab bench compare` (exit 0 pass, 1 a gate failed, 2 bad input or no verdict:
compare gives none unless both arms have a completed run, and names the arm that is missing or failed)."""

from __future__ import annotations

import argparse
import json
import sys

from .extract import DEFAULT_LAST, DEFAULT_SKIP_FIRST

EXIT_PASS, EXIT_GATE_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _extract(args) -> int:
    from .extract import RunError, extract, render

    try:
        result = extract(args.run, last=args.last, skip_first=args.skip_first)
    except RunError as exc:
        print(f"unilab bench extract: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    result.pop("config")
    print(json.dumps(result, indent=2) if args.json else render(result))
    return EXIT_PASS


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
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_markdown(report))
    if args.plot:
        print(f"unilab bench compare: wrote {plot(report, runs, args.plot)}", file=sys.stderr)
    return EXIT_PASS if report["passed"] else EXIT_GATE_FAILED


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--last", type=int, default=DEFAULT_LAST, metavar="N",
                        help=f"report the last N iterations (default {DEFAULT_LAST})")
    parser.add_argument("--skip-first", type=int, default=DEFAULT_SKIP_FIRST, metavar="N",
                        help=f"ignore the first N iterations as warm-up (default {DEFAULT_SKIP_FIRST})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmark tools: per-run extraction and the MPS A/B gate")
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
