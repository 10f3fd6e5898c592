"""`unilab`: tools around training runs (what train can use, config diff, motion clips, MPS daemon, policy
quality and export, benchmarks, learning curves)."""

from __future__ import annotations

import argparse
import json
import sys

from unilab.exit_codes import EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE


def _list(args) -> int:
    from unilab.config.catalog import catalog, render_list

    print(json.dumps(catalog(), indent=2) if args.json else render_list())
    return 0


def _manifest_schema(args) -> int:
    from unilab.rundir.manifest import manifest_json_schema

    print(json.dumps(manifest_json_schema(), indent=2))
    return 0


def _config_diff(args) -> int:
    from unilab.rundir.run_config import diff_configs, load_run_config

    try:
        a, b = load_run_config(args.run_a), load_run_config(args.run_b)
    except (FileNotFoundError, ValueError) as exc:
        print(f"unilab config diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rows = [r for r in diff_configs(a, b) if not any(r[0] == k or r[0].startswith(k + ".") for k in args.ignore)]
    if args.json:
        print(json.dumps([{"key": k, "a": va, "b": vb} for k, va, vb in rows], indent=2))
    elif not rows:
        print("identical")
    else:
        width = max(len(k) for k, _, _ in rows)
        for key, va, vb in rows:
            print(f"{key:<{width}}  {json.dumps(va)} -> {json.dumps(vb)}")
    return EXIT_FAILED if rows else EXIT_COMPLETED


def _merge_ranks(args) -> int:
    from unilab.rundir.ranks import MergeError, merge_rank_dirs

    try:
        missing = merge_rank_dirs(args.run_dir, args.other)
    except (MergeError, OSError, ValueError) as exc:
        print(f"unilab merge-ranks: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if missing:
        print(f"unilab merge-ranks: {args.run_dir}: ranks {', '.join(map(str, missing))} still missing",
              file=sys.stderr)
        return EXIT_FAILED
    print(f"unilab merge-ranks: {args.run_dir}: every rank is in runtime_manifest.json")
    return 0


def _motion_synth(args) -> int:
    from unilab.motion.synth import main as synth_main

    return synth_main(args.rest)


def _play(args) -> int:
    from unilab.runtime.play import main as play_main

    return play_main(args)


def build_parser() -> argparse.ArgumentParser:
    from unilab import __version__

    parser = argparse.ArgumentParser(prog="unilab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"unilab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    listing = sub.add_parser("list", help="what train can be told to use: algorithms, tasks, simulators, execution "
                             "modes, presets, benchmark settings")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(func=_list)

    manifest = sub.add_parser("manifest", help="runtime_manifest.json tools")
    msub = manifest.add_subparsers(dest="action", required=True)
    msub.add_parser("schema", help="print the JSON schema of runtime_manifest.json").set_defaults(func=_manifest_schema)

    config = sub.add_parser("config", help="run_config.json tools")
    csub = config.add_subparsers(dest="action", required=True)
    diff = csub.add_parser(
        "diff", help="print the keys whose values differ between two runs (exit 0 identical, 1 differ, 2 error)"
    )
    diff.add_argument("run_a", help="run directory or its run_config.json")
    diff.add_argument("run_b", help="run directory or its run_config.json")
    diff.add_argument("--ignore", action="append", default=[], metavar="KEY", help="dotted key (or prefix) to skip")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(func=_config_diff)

    merge = sub.add_parser("merge-ranks", help="gather a torchrun/srun run's rank directories from the nodes' own "
                           "copies into rank 0's (exit 0 every rank there, 1 some missing, 2 error)")
    merge.add_argument("run_dir", help="rank 0's run directory")
    merge.add_argument("other", nargs="+", help="the same run directory as another node wrote it (copied here)")
    merge.set_defaults(func=_merge_ranks)

    motion = sub.add_parser("motion", help="motion clip tools")
    motsub = motion.add_subparsers(dest="action", required=True)
    synth = motsub.add_parser("synth", help="write a keyframed G1 clip (unilab motion synth --help)", add_help=False)
    synth.add_argument("rest", nargs=argparse.REMAINDER)
    synth.set_defaults(func=_motion_synth)
    from unilab.motion import importer, info, split

    importer.add_parser(motsub)
    info.add_parser(motsub)
    split.add_parser(motsub)

    from .warmup import add_parser as add_warmup_parser

    add_warmup_parser(sub)

    play = sub.add_parser("play", help="play a run's policy deterministically and report its episodes (play.json)")
    play.add_argument("run", help="run directory")
    play.add_argument("--checkpoint", help="checkpoint file (default: the run's latest)")
    play.add_argument("--device", help="default: the run's training.run.device")
    play.add_argument("--envs", type=int, help="default: the run's task.num_envs")
    play.add_argument("--steps", type=int, help="control steps (default: until every env's first episode has ended, "
                      "at most one full episode)")
    play.add_argument("--out", help="report file (default: a new play_<time>.json in the run directory; the "
                      "run's play.json belongs to the end-of-run play)")
    play.add_argument("--agent", choices=("policy", "zero", "random"), default="policy",
                      help="the run's policy (default), or zero / uniformly random actions (no checkpoint needed)")
    seen = play.add_argument_group("seeing the rollout")
    seen.add_argument("--video", metavar="FILE", help="render the rollout headless into FILE (.mp4 or .gif); "
                      "needs pip install 'unilab[video]'")
    seen.add_argument("--viewer", action="store_true", help="watch world 0 in MuJoCo's viewer (needs a display)")
    seen.add_argument("--camera", choices=("track", "fixed"), default="track",
                      help="track: follows the robot (default); fixed: stays where it starts")
    seen.add_argument("--collision", action="store_true",
                      help="draw the collision geoms the simulation uses instead of the G1's meshes")
    seen.add_argument("--worlds", type=int, default=1, help="tile the first N worlds into the video (default 1)")
    seen.add_argument("--fps", type=float, help="video frame rate (default: the control rate, real time)")
    seen.add_argument("--width", type=int, default=640, help="video width in pixels (default 640)")
    seen.add_argument("--height", type=int, default=480, help="video height in pixels (default 480)")
    play.set_defaults(func=_play)

    from unilab.eval.cli import add_parser as add_eval_parser

    add_eval_parser(sub)

    from unilab.eval.export import add_parser as add_export_parser

    add_export_parser(sub)

    from unilab.deploy.cli import add_parser as add_sim2sim_parser

    add_sim2sim_parser(sub)
    from unilab.deploy.demo import add_parser as add_demo_parser

    add_demo_parser(sub)

    from unilab.bench.cli import add_bench_parser
    from unilab.bench.curves import add_parser as add_plot_parser
    from unilab.mps.cli import add_mps_parser

    from .doctor import add_doctor_parser

    add_doctor_parser(add_mps_parser(sub))
    add_bench_parser(sub)
    add_plot_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else list(argv)
    if raw[:2] == ["motion", "synth"]:  # the synth tool parses its own options
        code = _motion_synth(argparse.Namespace(rest=raw[2:]))
    elif raw[:2] == ["mps", "doctor"]:  # train overrides, --algo X included, go through untouched
        from .doctor import doctor_main

        code = doctor_main(raw[2:])
    elif raw[:1] == ["warmup"] and raw[1:2] not in (["-h"], ["--help"]):  # train overrides, likewise
        from .warmup import warmup

        code = warmup(argparse.Namespace(overrides=raw[1:]))
    else:
        args = build_parser().parse_args(raw)
        code = args.func(args)
    if argv is None:
        raise SystemExit(code)
    return code


if __name__ == "__main__":
    main()
