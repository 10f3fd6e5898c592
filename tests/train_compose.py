"""`train`'s config composed in this process (Hydra, without running the probe): a documented command checked the
way `train` would read it, the flattened config of a list of overrides, and what validation says of one override."""

from __future__ import annotations

import copy
import functools
import shlex

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from unilab.cli.short_form import expand_short_form
from unilab.cli.tools import build_parser
from unilab.cli.train import CONF_DIR
from unilab.config import ConfigError, register_configs, register_resolvers, validate

HYDRA_FLAGS = {"-m", "--multirun", "--resolve", "--help", "-h", "--hydra-help", "--dry-run"}  # --dry-run: train's own
HYDRA_FLAGS_WITH_VALUE = {"--cfg", "-c"}


def check_command(line: str) -> None:
    argv = shlex.split(line)
    if argv[0] == "torchrun":
        argv = _torchrun_train(argv)
    if argv[:2] == ["unilab", "warmup"]:  # train overrides: they must compose as train's do
        argv = ["train", *argv[2:]]
    if argv[0] == "unilab":
        # `motion synth` and `mps doctor` take their own options: the subcommand must exist
        build_parser().parse_args(argv[1:3] if argv[1:3] in (["motion", "synth"], ["mps", "doctor"]) else argv[1:])
        return
    for job in train_jobs(argv[1:]):
        cfg = compose_train(job)  # validates keys, values, group options
        assert cfg.training is not None


def _torchrun_train(argv: list[str]) -> list[str]:
    """`torchrun OPTIONS -m unilab.cli.train OVERRIDES`: torchrun's options through torchrun's own parser, then
    the `train` command its workers run."""
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(argv[1:])
    assert args.module and args.training_script == "unilab.cli.train", argv
    return ["train", *args.training_script_args]


def train_jobs(argv: list[str]) -> list[list[str]]:
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
    multirun = any(a in ("-m", "--multirun") for a in argv)
    jobs = [[]]
    for arg in out:
        key, _, value = arg.partition("=")
        swept = key.lstrip("+") in ("execution", "algo", "task", "sim") or (
            multirun and "," in value and not value.startswith(("[", "{", "'", '"')))  # `-m training.run.seed=1,2`
        values = value.split(",") if swept else [value]
        jobs = [job + [f"{key}={v}"] for job in jobs for v in values]
    return jobs


def _flatten(data, prefix: str = "") -> dict:
    if isinstance(data, dict) and data:
        out: dict = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def compose_train(overrides: list[str], with_hydra_node: bool = False) -> DictConfig:
    """The config `train` composes for `overrides`, unresolved and unvalidated (with Hydra's own node if asked:
    a preset's sweeper settings live there)."""
    register_configs()
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=with_hydra_node)


@functools.cache
def _default_on_the_cpu() -> DictConfig:
    return compose_train(["training.run.device=cpu"])  # each refusal below changes a copy


def refusal(override: str) -> str | None:
    """What `train`'s validation (unilab.config.validate) says of the default config with one override, its value
    parsed as Hydra parses a command line; None if it is accepted. The same checks as `train KEY=VALUE` without
    composing the whole config again: for the many-valued range tests (a few of their cases run end to end)."""
    parsed = OverridesParser.create().parse_override(override)
    cfg = copy.deepcopy(_default_on_the_cpu())
    OmegaConf.update(cfg, parsed.key_or_group, parsed.value(), merge=False)
    try:
        validate(cfg)
    except ConfigError as exc:
        return str(exc)
    return None


def composed(overrides: list[str]) -> dict:
    """The flattened config `train` composes for `overrides`: resolved, except the probe's node (not run)."""
    cfg = compose_train(overrides)
    probe_node = OmegaConf.to_container(cfg, resolve=False)["execution_evidence"]
    OmegaConf.set_struct(cfg, False)
    del cfg["execution_evidence"]
    flat = _flatten(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True, throw_on_missing=True))
    return {**flat, "execution_evidence": probe_node}
