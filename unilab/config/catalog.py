"""What `train` can be told to use: the config groups' choices (conf/<group>/*.yaml and the registry's members)
and the short form's flags, for `unilab list`, `train --help` and the short form's checks. The schema nodes that ConfigStore holds as
`<group>/<name>_schema` are the defaults a choice's file starts from, never a choice themselves."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
SCHEMA_SUFFIX = "_schema"
# group -> what it picks (`unilab list` and `train --help` show them in this order)
GROUPS = {
    "algo": "off-policy algorithm (and its per-task settings)",
    "task": "task",
    "sim": "simulator backend",
    "execution": "execution mode, opt-in: +execution=NAME",
    "preset": "a bundle of overrides: +preset=NAME",
    "bench": "a benchmark setting: +bench=NAME",
}
# The short form: `train --algo X --task Y` -> algo=X task=Y (unilab.cli.short_form expands it)
GROUP_FLAGS = {"--algo": "algo", "--task": "task", "--sim": "sim", "--execution": "+execution"}
# flag -> (the key it sets, its metavar)
VALUE_FLAGS = {
    "--num-envs": ("task.num_envs", "N"),
    "--seed": ("training.run.seed", "N"),
    "--max-iterations": ("algo.max_iterations", "N"),
    "--device": ("training.run.device", "DEV"),
    "--run-name": ("training.run.run_name", "NAME"),
}


def choices(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    """The names `group` accepts: its YAML files and the registry's members, schema nodes left out."""
    from unilab.registry import GROUPS as REGISTRY

    names = {p.stem for p in (conf_dir / group).glob("*.yaml")}
    if group in REGISTRY:
        names |= set(REGISTRY[group].entries)
    return sorted(n for n in names if not n.endswith(SCHEMA_SUFFIX))


def describe(group: str, name: str, conf_dir: Path = CONF_DIR) -> str:
    """The first sentence of the choice's file comment (its own words), or "" without one."""
    path = conf_dir / group / f"{name}.yaml"
    if not path.exists():
        return ""
    words = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text.startswith("#"):
            break
        text = text.lstrip("#").strip()
        if text.startswith("@package"):
            continue
        if not text:
            break
        words.append(text)
    comment = " ".join(words)
    end = comment.find(". ")
    sentence = comment if end < 0 else comment[:end + 1]
    return sentence.split(": train", 1)[0].rstrip(":").strip()


def catalog(conf_dir: Path = CONF_DIR) -> dict[str, list[dict[str, str]]]:
    return {group: [{"name": n, "about": describe(group, n, conf_dir)} for n in choices(group, conf_dir)]
            for group in GROUPS}


def render_list(conf_dir: Path = CONF_DIR) -> str:
    lines = []
    for group, members in catalog(conf_dir).items():
        lines.append(f"{group}: {GROUPS[group]}")
        width = max((len(m["name"]) for m in members), default=0)
        lines += [f"  {m['name']:<{width}}  {m['about']}".rstrip() for m in members]
    return "\n".join(lines)


def help_text() -> str:
    """`train --help` (hydra.help.template). No dollar sign: Hydra's template substitution would read it."""
    groups = "\n".join(f"  {group:<10} {', '.join(choices(group))}" for group in GROUPS)
    flags = [(f"{flag} NAME", f"{key}=NAME") for flag, key in GROUP_FLAGS.items()]
    flags += [(f"{flag} {meta}", f"{key}={meta}") for flag, (key, meta) in VALUE_FLAGS.items()]
    width = max(len(f) for f, _ in flags)
    short = "\n".join(f"  {f:<{width}}  {o}" for f, o in flags)
    return f"""train: off-policy RL for humanoid robots on MuJoCo Warp (a Hydra app).

Usage:
  train [--algo NAME] [--task NAME] [--sim NAME] [--execution NAME] [--num-envs N] [--seed N]
        [--max-iterations N] [--device DEV] [--run-name NAME] [key=value ...]
  train -m ... key=a,b        a sweep: one run per combination

Short form (each flag stands for the override beside it):
{short}

Choices (unilab list describes them):
{groups}

Examples:
  train +preset=cpu_smoke
  train --algo flashsac --task g1_walk_flat --num-envs 4096 --seed 1 --run-name walk
  train -m +execution=default,mps +bench=offpolicy_gate --algo fastsac --task g1_walk_flat training.run.device=cuda:0

More:
  train --cfg job [overrides]   the composed config, every key that can be overridden (nothing runs)
  train --hydra-help            Hydra's own flags (-m, --cfg, --resolve, --info, shell completion)
  unilab list                   the choices above, described
"""
