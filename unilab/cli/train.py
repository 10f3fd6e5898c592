"""`train`: the Hydra training app.

Errors the user can fix (an execution mode the host cannot honour, a bad key or value)
are printed without a traceback and exit with status 2.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import hydra
from omegaconf import DictConfig

from unilab.config import register_configs, register_resolvers

from .short_form import UsageError, expand_short_form

# OmegaConf's message templates and type bookkeeping say nothing a user can act on; Hydra's advice to
# append an unknown key (`+key=value`) would only add a key the schemas lack, which `train` refuses.
_NOISE = re.compile(r"\$VALUE|^\s*(reference_type|object_type)=|^To append to your config use \+")
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
EXIT_USAGE = 2


def _task(cfg: DictConfig) -> None:
    from unilab.launcher.launch import launch
    from unilab.launcher.prepare import prepare_run

    prepared = prepare_run(cfg)
    code = launch(prepared, cfg)
    if code:
        raise SystemExit(code)


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
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        overrides = expand_short_form(argv)
    except UsageError as exc:
        print(f"train: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    register_configs()
    register_resolvers()
    app = hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(_task)
    try:
        with _hydra_raises(overrides):
            app()
    except SystemExit:
        raise
    except Exception as exc:
        message = _user_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


if __name__ == "__main__":
    main()
