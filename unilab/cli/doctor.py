"""`unilab mps doctor [train overrides...]`: the probe `train` runs, without a run directory or a process. It
diagnoses the MPS mode: `+execution=mps` is implied unless the overrides choose an execution mode."""

from __future__ import annotations

import json
import sys

from unilab.exit_codes import EXIT_USAGE


def doctor_main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print("usage: unilab mps doctor [train overrides ...]\n\n"
              "Runs the execution probe of `train` for the composed config (+execution=mps unless the overrides\n"
              "choose another mode) without creating anything: prints the evidence JSON (exit 0) or train's\n"
              "diagnostic (exit 2).")
        return 0
    return doctor(argv)


def add_doctor_parser(mps_actions) -> None:
    """`unilab mps doctor` beside the daemon tool's own actions (it composes a train config, which the mps
    package below the config does not)."""
    import argparse

    doctor = mps_actions.add_parser("doctor", help="run train's execution probe for a config (unilab mps doctor --help)",
                                    add_help=False)
    doctor.add_argument("overrides", nargs=argparse.REMAINDER)
    doctor.set_defaults(func=lambda args: doctor_main(args.overrides))


def doctor(argv: list[str]) -> int:
    from unilab.config import validate

    from .short_form import UsageError, expand_short_form
    from .user_errors import compose_train, user_error

    try:
        overrides = expand_short_form(argv)
    except UsageError as exc:
        print(f"unilab mps doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    flags = [arg for arg in overrides if arg.startswith("-")]
    if flags:
        print(f"unilab mps doctor: takes train overrides only (key=value, +execution=mps, --algo X ...), not {flags}",
              file=sys.stderr)
        return EXIT_USAGE
    if not any(arg.lstrip("+~").partition("=")[0] == "execution" for arg in overrides):
        overrides = [*overrides, "+execution=mps"]  # the doctor of the MPS mode
    try:
        evidence = validate(compose_train(overrides)).evidence
    except Exception as exc:
        message = user_error(exc)  # the very text `train` prints for the same failure
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(evidence.model_dump(mode="json"), indent=2))
    return 0
