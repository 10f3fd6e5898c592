"""`train --algo X --task Y --sim Z ...` maps onto the Hydra groups (algo=X task=Y sim=Z)."""

from __future__ import annotations

GROUP_FLAGS = {"--algo": "algo", "--task": "task", "--sim": "sim", "--execution": "+execution"}


class UsageError(ValueError):
    pass


def expand_short_form(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in GROUP_FLAGS:
            if not eq:
                if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                    raise UsageError(f"{flag} needs a value, e.g. {flag} {_example(flag)}")
                value = argv[i + 1]
                i += 1
            out.append(f"{GROUP_FLAGS[flag]}={value}")
        else:
            out.append(arg)
        i += 1
    _reject_duplicates(out)
    return out


def _reject_duplicates(overrides: list[str]) -> None:
    groups: dict[str, str] = {}
    for arg in overrides:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key in ("algo", "task", "sim", "execution"):
            if key in groups:
                raise UsageError(f"'{key}' is chosen twice: {groups[key]} and {arg}")
            groups[key] = arg


def _example(flag: str) -> str:
    return {"--algo": "fastsac", "--task": "g1_walk_flat", "--sim": "mjwarp", "--execution": "mps"}[flag]
