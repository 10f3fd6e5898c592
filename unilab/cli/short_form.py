"""`train --algo X --task Y --sim Z ...` maps onto the Hydra groups (algo=X task=Y sim=Z), and
`--num-envs N --seed N --max-iterations N --device D --run-name R` onto their keys; a key's old spelling
(training.seed=3) is written in today's (training.run.seed=3, with a note: unilab.rundir.renamed)."""

from __future__ import annotations

import re

from unilab.config.catalog import GROUP_FLAGS, VALUE_FLAGS, choices
from unilab.rundir.renamed import upgrade_overrides

GROUP_KEYS = tuple(group.lstrip("+") for group in GROUP_FLAGS.values())  # the groups a flag chooses
_SCHEMA_NODE = re.compile(r"\w+_schema\b")


class UsageError(ValueError):
    pass


def expand_short_form(argv: list[str]) -> list[str]:
    out: list[str] = []
    from_flags: set[int] = set()  # positions in `out` written by a value flag
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in GROUP_FLAGS or flag in VALUE_FLAGS:
            if not eq:
                # a value flag's value may be negative (--seed -1); none starts with -- or is an override
                nxt = argv[i + 1] if i + 1 < len(argv) else None
                if (nxt is None or nxt.startswith("--") or "=" in nxt
                        or (flag in GROUP_FLAGS and nxt.startswith("-"))):
                    raise UsageError(f"{flag} needs a value, e.g. {flag} {_example(flag)}")
                value = nxt
                i += 1
            key = GROUP_FLAGS[flag] if flag in GROUP_FLAGS else VALUE_FLAGS[flag][0]
            if flag in VALUE_FLAGS:
                from_flags.add(len(out))
            out.append(f"{key}={value}")
        else:
            out.append(arg)
        i += 1
    out = upgrade_overrides(out)
    _reject_duplicates(out, from_flags)
    _reject_schema_nodes(out)
    return out


def _reject_duplicates(overrides: list[str], from_flags: set[int]) -> None:
    """A group chosen twice, or a key set by a value flag and again (by a flag or an override), is refused;
    plain overrides of one key keep Hydra's rule (the last one wins)."""
    value_keys = {key for key, _ in VALUE_FLAGS.values()}
    chosen: dict[str, tuple[str, bool]] = {}
    for pos, arg in enumerate(overrides):
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key not in GROUP_KEYS and key not in value_keys:
            continue
        flagged = pos in from_flags
        if key in chosen and (key in GROUP_KEYS or flagged or chosen[key][1]):
            raise UsageError(f"'{key}' is chosen twice: {chosen[key][0]} and {arg}")
        chosen[key] = (arg, flagged or chosen.get(key, ("", False))[1])


def _reject_schema_nodes(overrides: list[str]) -> None:
    """`algo=flashsac_schema` would compose the bare schema, past its YAML file: not a choice."""
    for arg in overrides:
        key, eq, value = arg.partition("=")
        group = key.lstrip("+~")
        if eq and group in GROUP_KEYS and (node := _SCHEMA_NODE.search(value)):
            raise UsageError(f"{group}={node.group(0)}: {node.group(0)} holds the defaults every {group} config "
                             f"starts from and is not a choice; choose one of: {', '.join(choices(group))}")


def _example(flag: str) -> str:
    return {"--algo": "fastsac", "--task": "g1_walk_flat", "--sim": "mjwarp", "--execution": "mps", "--num-envs": "4096",
            "--seed": "1", "--max-iterations": "1000", "--device": "cuda:0", "--run-name": "walk"}[flag]
