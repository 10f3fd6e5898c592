"""Docs check: every `train` / `unilab` / `torchrun ... -m unilab.cli.train` command in a shell block of the
READMEs and docs/{en,zh} composes (Hydra, without running the probe) or parses (argparse; torchrun's own
options through torchrun's parser). Commands with shell
variables are skipped; `<placeholders>` are fine (they are plain strings to the parsers).
The cluster examples, the metrics glossary, the words the docs must not use, the A/B sweep's
form, the Chinese README's commands and the links between pages are checked below."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from train_compose import check_command

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "README.zh.md", *sorted((ROOT / "docs").glob("*/*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|text)?\n(.*?)```", re.S)


def _commands():
    """One case per distinct command (the Chinese pages repeat the English ones), named by the first page that
    shows it."""
    seen = {}
    for doc in DOCS:
        for block in BLOCK.findall(doc.read_text()):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("$ "):
                    line = line[2:]
                if re.match(r"^(train|unilab|torchrun)\s", line) and "$" not in line:
                    seen.setdefault(line, doc)
    return [pytest.param(line, id=f"{doc.relative_to(ROOT)}: {line[:60]}") for line, doc in seen.items()]


COMMANDS = list(_commands())


def test_the_docs_have_commands():
    assert len(COMMANDS) >= 8


@pytest.mark.parametrize("line", COMMANDS)
def test_documented_command_is_valid(line):
    check_command(line)


# ---------------------------------------------------------------- the cluster examples

EXAMPLES = ROOT / "examples"
SBATCH = EXAMPLES / "slurm" / "train_mps.sbatch"
K8S_JOB = EXAMPLES / "k8s" / "train-mps.yaml"
K8S_PLUGIN = EXAMPLES / "k8s" / "device-plugin-mps.yaml"


def _script_commands(script: str) -> list[str]:
    """The `train` / `unilab` / `torchrun` commands of a shell script: whole lines (continuations joined), and
    those inside $(...) and trap '...'. Shell variables become a placeholder word, for the parsers."""
    text = re.sub(r"\\\n\s*", " ", script)
    found = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip().rstrip("&").strip()
        found += re.findall(r"\$\(((?:train|unilab)\s[^)]*)\)", line)
        found += re.findall(r"trap '((?:train|unilab)\s[^']*)'", line)
        if re.match(r"^(train|unilab|torchrun)\s", line):
            found.append(line)
    return [re.sub(r"\$\{?\w+\}?|\$\([^)]*\)", "X", cmd) for cmd in found]


def _job_script() -> str:
    import yaml

    job = [d for d in yaml.safe_load_all(K8S_JOB.read_text()) if d["kind"] == "Job"][0]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container["args"][0]


def test_the_sbatch_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)


def test_the_k8s_job_script_is_valid_bash():
    subprocess.run(["bash", "-n", "-c", _job_script()], check=True)


@pytest.mark.parametrize("source", ["sbatch", "k8s"])
def test_the_example_commands_parse(source):
    script = SBATCH.read_text() if source == "sbatch" else _job_script()
    commands = _script_commands(script)
    # start, stop and train must all be found: an extraction that finds nothing checks nothing
    assert [c.split()[:3] for c in commands] == [["unilab", "mps", "start"], ["unilab", "mps", "stop"],
                                                  ["train", "--algo", "fastsac"]]
    assert "+execution=mps" in commands[-1].split()
    for command in commands:
        check_command(command)


def _multi_node_script(lang: str) -> str:
    """The Slurm batch script of the cluster reference's several-nodes section (a bash block with #SBATCH --nodes)."""
    text = (ROOT / "docs" / lang / "cluster-reference.md").read_text()
    (script,) = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "#SBATCH --nodes=" in b]
    return script


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_multi_node_slurm_script_is_valid_bash(lang):
    script = _multi_node_script(lang)
    assert script.startswith("#!/bin/bash\n") and script == _multi_node_script("en")  # the twins run the same job
    subprocess.run(["bash", "-n", "-c", script], check=True)
    commands = _script_commands(script)
    # the node's daemon started and stopped by the job, torchrun under srun: an extraction that finds less checks less
    assert [shlex.split(c)[:3] for c in commands] == [["unilab", "mps", "start"], ["unilab", "mps", "stop"],
                                                      ["torchrun", "--nnodes", "X"]]
    assert "--all-gpus" in commands[0].split() and "srun" in script and "bash -c node_task" in script
    assert "+execution=mps" in commands[-1].split()
    for command in commands:
        check_command(command)


def test_torchrun_commands_are_checked():
    torchrun = [p for p in COMMANDS if p.values[0].startswith("torchrun ")]
    assert torchrun  # cluster.md shows one
    with pytest.raises(SystemExit):  # torchrun's parser sees its options
        check_command("torchrun --nnodes 2 --no-such-option -m unilab.cli.train")
    with pytest.raises(Exception, match="no_such_key"):  # and train's overrides compose
        check_command("torchrun --nnodes 2 -m unilab.cli.train training.no_such_key=1")


def test_the_example_yaml_files_have_the_expected_kinds():
    import yaml

    job_docs = list(yaml.safe_load_all(K8S_JOB.read_text()))
    assert [d["kind"] for d in job_docs] == ["PersistentVolumeClaim", "Job"]
    (container,) = job_docs[1]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1  # the whole GPU: the pod's own daemon
    (plugin,) = yaml.safe_load_all(K8S_PLUGIN.read_text())
    assert plugin["kind"] == "ConfigMap"
    for config in plugin["data"].values():
        (resource,) = yaml.safe_load(config)["sharing"]["mps"]["resources"]
        assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] >= 2


# ---------------------------------------------------------------- the metrics glossary

def _dict_keys(node) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _function(tree, name: str):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _tree(rel: str):
    return ast.parse((ROOT / rel).read_text())


def _iteration_keys() -> set[str]:
    """The keys of a metrics.jsonl row, as the code declares them (no training run)."""
    from unilab.rundir.metrics import METRIC_KEYS

    keys = set(METRIC_KEYS)
    row = _function(_tree("unilab/runtime/learner_report.py"), "iteration_values")  # the keys beyond METRIC_KEYS
    keys |= {k for n in ast.walk(row) if isinstance(n, ast.Dict) for k in _dict_keys(n)}
    collector = _tree("unilab/runtime/collector.py")
    for name in ("_chunk_timings", "_sim_checks"):
        keys |= {k for n in ast.walk(_function(collector, name)) if isinstance(n, ast.Dict) for k in _dict_keys(n)}
    for n in ast.walk(collector):  # self.timings.update(key=...) and self.timings["key"] = ...
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "update" \
                and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "timings":
            keys |= {kw.arg for kw in n.keywords if kw.arg}
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "timings" \
                and isinstance(n.slice, ast.Constant):
            keys.add(n.slice.value)
    return keys


def _task_keys() -> set[str]:
    """metrics/* and term/* keys of the tasks, and their reward term names (rew/<term>)."""
    keys = set()
    for env in sorted((ROOT / "unilab" / "tasks").glob("*/env.py")) + [ROOT / "unilab/tasks/common/base.py"]:
        tree = ast.parse(env.read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"(metrics|term)/\w+", n.value):
                keys.add(n.value)
            if isinstance(n, ast.FunctionDef) and n.name.startswith("_reward_"):
                keys.add(n.name[len("_reward_"):])
            if isinstance(n, ast.FunctionDef) and n.name == "tracking_errors":
                assert 'f"metrics/{k}_error"' in env.read_text()  # how its keys become metric names
                ret = next(r for r in ast.walk(n) if isinstance(r, ast.Return))
                keys |= {f"metrics/{k}_error" for k in _dict_keys(ret.value)}
    return keys


def _report_keys() -> set[str]:
    """Keys of eval.json's rows, play.json, run_summary.json and bench compare's checks."""
    from unilab.rundir.summary import RunSummary

    functions = [(_tree("unilab/eval/walk.py"), "rollout"), (_tree("unilab/tasks/g1_walk_flat/evaluation.py"), "overall")]
    keys = {k for tree, name in functions for n in ast.walk(_function(tree, name))
            if isinstance(n, ast.Dict) for k in _dict_keys(n)}
    keys |= {k for n in ast.walk(_function(_tree("unilab/runtime/play.py"), "play"))
             if isinstance(n, ast.Dict) for k in _dict_keys(n)}
    keys |= set(RunSummary.model_fields)
    keys |= {n.args[0].value for n in ast.walk(_tree("unilab/bench/compare.py"))
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_gate" and isinstance(n.args[0], ast.Constant)}
    return keys


METRIC_GROUPS = {"iteration": _iteration_keys, "task": _task_keys, "report": _report_keys}


@pytest.mark.parametrize("group", METRIC_GROUPS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_metric_key_is_in_the_glossary(group, lang):
    keys = METRIC_GROUPS[group]()
    assert len(keys) >= 8, keys  # the collection found the declarations
    glossary = (ROOT / "docs" / lang / "metrics.md").read_text()
    missing = sorted(k for k in keys if f"`{k}`" not in glossary)
    assert not missing, f"docs/{lang}/metrics.md does not explain: {', '.join(missing)}"


def test_the_glossary_knows_the_task_metric_keys():
    # the keys the envs put into their info, spelled out: a change of the collection above must not hide them
    assert {"metrics/lin_vel_error", "metrics/yaw_rate_error", "metrics/body_pos_error",
            "term/anchor_height", "track_lin_vel_xy"} <= _task_keys()
    assert {"env_steps_per_s", "ingress_backpressure", "nan_guard_trips", "collector_backend_step_ms",
            "episodes_finished", "sim_overflow"} <= _iteration_keys()


# ---------------------------------------------------------------- words the docs must not use

# Words of the work that made the docs, not of the product: numbered issues and work sessions,
# machine loans, paths outside the repository. Precise patterns, so that e.g. "gpu_session.sh" or
# "a Slurm session" stay allowed.
FORBIDDEN = {
    r"(?i)\bissues? ?\d+": "an issue number",
    r"(?i)\bsessions? \d+": "a numbered work session",
    r"(?i)\b(first|second|third|fourth|fifth|sixth|seventh|next|this|that|each|every) session\b": "a work session",
    r"(?i)\bloans?\b": "a machine loan",
    r"(?i)\blent\b": "a lent machine",
    r"(?i)device tool": "the device tool",
    r"\.\./shared": "a path outside the repository",
    r"(?i)\bworkplace\b": "the workplace",
    r"(?i)\bhelpers?\b": "a helper",
    r"第[一二三四五六七八九十\d]+\s*次\s*会话": "a work session (zh)",
    r"会话\s*\d": "a numbered work session (zh)",
    r"租借": "a machine loan (zh)",
}
# Pages owned elsewhere that still carry such words: listed, not skipped (strict xfail fails once
# they are clean, so that the entry is removed).
KNOWN_HITS: dict[str, str] = {}
ALL_DOCS = [*sorted(ROOT.glob("README*.md")), *sorted((ROOT / "docs").rglob("*.md"))]


def _hits(text: str) -> list[str]:
    return [f"{why}: {m.group(0)!r}" for pattern, why in FORBIDDEN.items() for m in re.finditer(pattern, text)]


@pytest.mark.parametrize("doc", [
    pytest.param(d, id=str(d.relative_to(ROOT)),
                 marks=[pytest.mark.xfail(strict=True, reason=KNOWN_HITS[str(d.relative_to(ROOT))])]
                 if str(d.relative_to(ROOT)) in KNOWN_HITS else [])
    for d in ALL_DOCS])
def test_the_docs_use_no_work_words(doc):
    hits = _hits(doc.read_text())
    assert not hits, f"{doc.relative_to(ROOT)}: " + "; ".join(hits)


def test_the_forbidden_words_are_found():
    assert _hits("see issue 4, session 6, three loans, ../shared/x, 第六次会话") != []
    assert len(_hits("see issue 4, session 6, three loans, ../shared/x, 第六次会话")) == 5
    assert _hits("bash benchmarks/gpu_session.sh gate; /tmp/session; a Slurm session; 会话层") == []


def test_the_known_hits_are_pages_that_exist():
    assert all((ROOT / path).is_file() for path in KNOWN_HITS)


# ---------------------------------------------------------------- the A/B sweep

AB_SWEEP = re.compile(r"\btrain\s+-m\b.*\+?execution=(default,mps|mps,default)\b")


def _ab_lines():
    for doc in ALL_DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if AB_SWEEP.search(line):
                yield doc, n, line


def test_every_ab_sweep_keeps_the_baseline_off_mps():
    # +bench=offpolicy_gate sets training.mps.block_ambient_mps: with a daemon running, the default arm
    # is still no MPS client
    lines = list(_ab_lines())
    assert len(lines) >= 4  # the READMEs, the guide, performance: the check sees them
    bad = [f"{d.relative_to(ROOT)}:{n}" for d, n, line in lines if "+bench=offpolicy_gate" not in line]
    assert not bad, "A/B sweeps without +bench=offpolicy_gate: " + ", ".join(bad)


# ---------------------------------------------------------------- README.zh.md

def _block_commands(path: Path) -> set[str]:
    lines = set()
    for block in re.findall(r"```[a-z]*\n(.*?)```", path.read_text(), re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line:
                lines.add(line)
    return lines


def test_the_chinese_readme_has_the_same_commands():
    en, zh = _block_commands(ROOT / "README.md"), _block_commands(ROOT / "README.zh.md")
    assert len(en) >= 10
    assert en == zh, f"only in README.md: {sorted(en - zh)}; only in README.zh.md: {sorted(zh - en)}"


def test_every_english_page_has_a_chinese_twin():
    en = {p.name for p in (ROOT / "docs" / "en").glob("*.md")}
    zh = {p.name for p in (ROOT / "docs" / "zh").glob("*.md")}
    assert en == zh


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_list_names_every_page(lang):
    # a page that the docs' index does not list is a page nobody finds
    pages = {p.name for p in (ROOT / "docs" / lang).glob("*.md")} - {"README.md"}
    index = (ROOT / "docs" / lang / "README.md").read_text()
    missing = sorted(name for name in pages if f"]({name})" not in index)
    assert pages and not missing, f"docs/{lang}/README.md does not list: {', '.join(missing)}"


def test_the_history_index_names_every_history_page():
    history = ROOT / "docs" / "history"
    pages = {p.name for p in history.glob("*.md")} - {"README.md"}
    index = (history / "README.md").read_text()
    missing = sorted(name for name in pages if f"]({name})" not in index)
    assert pages and not missing, f"docs/history/README.md does not list: {', '.join(missing)}"


# ---------------------------------------------------------------- links between pages

def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"(?m)^#{1,6} (.*)$", text)}


def _links():
    for doc in ALL_DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"^[a-z]+:", target):
                yield pytest.param(doc, target, id=f"{doc.relative_to(ROOT)} -> {target}")


@pytest.mark.parametrize("doc,target", list(_links()))
def test_links_between_pages_resolve(doc, target):
    path, _, anchor = target.partition("#")
    dest = (doc.parent / path).resolve() if path else doc
    assert dest.exists(), f"{target}: no such file"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}"
