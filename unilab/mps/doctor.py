"""`unilab mps doctor [train overrides...]`: the probe `train` runs, without a run directory or a process."""

from __future__ import annotations

import json
import sys

EXIT_PROBE_FAILED = 2


def doctor(argv: list[str]) -> int:
    from unilab.cli.short_form import UsageError, expand_short_form
    from unilab.cli.train import _user_error, compose_train
    from unilab.config import validate

    try:
        overrides = expand_short_form(argv)
    except UsageError as exc:
        print(f"unilab mps doctor: {exc}", file=sys.stderr)
        return EXIT_PROBE_FAILED
    flags = [arg for arg in overrides if arg.startswith("-")]
    if flags:
        print(f"unilab mps doctor: takes train overrides only (key=value, +execution=mps, --algo X ...), not {flags}",
              file=sys.stderr)
        return EXIT_PROBE_FAILED
    try:
        evidence = validate(compose_train(overrides)).evidence
    except Exception as exc:
        message = _user_error(exc)  # the very text `train` prints for the same failure
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_PROBE_FAILED
    print(json.dumps(evidence.model_dump(mode="json"), indent=2))
    return 0
