"""The floor plan: unilab's packages in one order, top to bottom, and every import runs down it.

A package may import the packages on the floors below its own, never one above or beside it, and the files of one
package import each other in no loop. Every import counts: at module level, inside a function, or under
TYPE_CHECKING. docs/en/architecture.md and docs/zh/architecture.md draw the same floors (checked below).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Top to bottom. A name is a package under unilab/ (or a module unilab/<name>.py); hydra_plugins is Hydra's door
# into the packed launcher. Names on one floor are peers: neither imports the other.
FLOORS: list[tuple[str, ...]] = [
    ("hydra_plugins",),
    ("cli",),
    ("bench",),
    ("jobs",),
    ("eval", "launcher"),
    ("runtime",),
    ("config",),
    ("deploy",),
    ("viz",),
    ("tasks",),
    ("motion",),
    ("assets", "rundir"),
    ("algos", "mps", "sim"),
    ("atomic", "checks", "exit_codes", "kernel_cache", "processes", "registry", "world"),
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """(module imported, line) of every import in the file, relative ones resolved; `from X import Y` also yields
    X.Y (Y may be a module)."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((module, node.lineno))
            found += [(f"{module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _room(module: str) -> str | None:
    """The floor plan's name for a module of the project (None: not one of ours, or the package face)."""
    parts = module.split(".")
    if parts[0] == "hydra_plugins":
        return "hydra_plugins"
    if parts[0] != "unilab" or len(parts) < 2:
        return None
    return parts[1]


def _sources() -> list[Path]:
    files = sorted((ROOT / "unilab").rglob("*.py")) + sorted((ROOT / "hydra_plugins").rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts]


def _is_module(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_every_room_has_a_floor():
    rooms = {_room(_module_name(f)) for f in _sources()} - {None}
    assert rooms - set(FLOOR) == set(), "add the new package to FLOORS (and to docs/*/architecture.md)"
    assert set(FLOOR) - rooms == set(), "a floor names a package that no longer exists"


def upward_imports() -> list[str]:
    """'file:line: A -> B' for each import from a floor to the same floor or one above it."""
    found = []
    for f in _sources():
        here = _room(_module_name(f))
        if here is None:
            continue
        for module, line in _imports(f):
            there = _room(module)
            if there is None or there == here or not _is_module(module):
                continue
            if FLOOR[there] <= FLOOR[here]:
                found.append(f"{f.relative_to(ROOT)}:{line}: {here} -> {there} ({module})")
    return sorted(set(found))


def test_imports_run_down_the_floors():
    assert upward_imports() == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def file_cycles() -> list[list[str]]:
    """Files of one package that import each other in a loop."""
    graph: dict[str, set[str]] = {}
    for f in _sources():
        me = _module_name(f)
        for module, _ in _imports(f):
            if _room(module) == _room(me) and _is_module(module) and module != me:
                # `from pkg import name` resolves to the package face: the face itself is no file of the loop
                if not (ROOT.joinpath(*module.split(".")) / "__init__.py").exists():
                    graph.setdefault(me, set()).add(module)
    return _cycles(graph)


def test_no_files_import_each_other_in_a_loop():
    assert file_cycles() == []


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_check_finds_an_upward_import_and_a_loop(tmp_path, monkeypatch):
    """The checks fail on what they forbid: an import from a low floor to a high one, a lazy one inside a function
    included, and two files that import each other."""
    _write(tmp_path, "unilab/__init__.py", "")
    _write(tmp_path, "unilab/atomic.py", "def f():\n    from unilab.cli import train\n")
    _write(tmp_path, "unilab/cli/__init__.py", "")
    _write(tmp_path, "unilab/cli/train.py", "from unilab import atomic\nfrom .short import x\n")
    _write(tmp_path, "unilab/cli/short.py", "from unilab.cli.train import y\n")
    _write(tmp_path, "hydra_plugins/__init__.py", "")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert upward_imports() == ["unilab/atomic.py:2: atomic -> cli (unilab.cli)",
                                "unilab/atomic.py:2: atomic -> cli (unilab.cli.train)"]
    assert file_cycles() == [["unilab.cli.short", "unilab.cli.train"]]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_architecture_page_draws_these_floors(lang):
    """The page's floor list (the lines `N. name, name` inside its ```floors block) is FLOORS."""
    text = (ROOT / "docs" / lang / "architecture.md").read_text()
    block = re.search(r"```floors\n(.*?)```", text, re.S)
    assert block, f"docs/{lang}/architecture.md: no ```floors block"
    drawn = [tuple(name.strip() for name in re.sub(r"^\s*\d+\.\s*", "", line).split("#")[0].split(","))
             for line in block.group(1).splitlines() if line.strip()]
    assert drawn == FLOORS
