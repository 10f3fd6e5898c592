"""Docs check: every `train` / `unilab` command in a shell block of the README and docs/{en,zh}
composes (Hydra, without running the probe) or parses (argparse). Commands with shell
variables are skipped; `<placeholders>` are fine (they are plain strings to the parsers)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from unilab.cli.short_form import expand_short_form
from unilab.cli.tools import build_parser
from unilab.cli.train import CONF_DIR
from unilab.config import register_configs, register_resolvers

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*/*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|text)?\n(.*?)```", re.S)
HYDRA_FLAGS = {"-m", "--multirun", "--resolve", "--help", "-h", "--hydra-help", "--dry-run"}  # --dry-run: train's own
HYDRA_FLAGS_WITH_VALUE = {"--cfg", "-c"}


def _commands():
    for doc in DOCS:
        for block in BLOCK.findall(doc.read_text()):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("$ "):
                    line = line[2:]
                if re.match(r"^(train|unilab)\s", line) and "$" not in line:
                    yield pytest.param(line, id=f"{doc.relative_to(ROOT)}: {line[:60]}")


COMMANDS = list(_commands())


def test_the_docs_have_commands():
    assert len(COMMANDS) >= 8


def _overrides(argv: list[str]) -> list[list[str]]:
    """Hydra overrides of a `train` command line, one list per job of a `-m` sweep over groups."""
    out, skip = [], False
    for arg in expand_short_form(argv):
        if skip:
            skip = False
        elif arg in HYDRA_FLAGS:
            continue
        elif arg in HYDRA_FLAGS_WITH_VALUE:
            skip = True
        else:
            out.append(arg)
    jobs = [[]]
    for arg in out:
        key, _, value = arg.partition("=")
        values = value.split(",") if key.lstrip("+") in ("execution", "algo", "task", "sim") else [value]
        jobs = [job + [f"{key}={v}"] for job in jobs for v in values]
    return jobs


@pytest.mark.parametrize("line", COMMANDS)
def test_documented_command_is_valid(line):
    argv = shlex.split(line)
    if argv[0] == "unilab":
        # `motion synth` and `mps doctor` take their own options: the subcommand must exist
        build_parser().parse_args(argv[1:3] if argv[1:3] in (["motion", "synth"], ["mps", "doctor"]) else argv[1:])
        return
    register_configs()
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for job in _overrides(argv[1:]):
            cfg = compose(config_name="train", overrides=job)  # validates keys, values, group options
            assert cfg.training is not None
