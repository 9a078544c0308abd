"""The package's shape holds: no import cycle between modules, and the layer list a newcomer reads
in ``ragtrail/__init__.py`` is the one import-linter enforces (pyproject.toml), and git tracks
no link or environment."""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

import ragtrail

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "include" / "ragtrail"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the ragtrail modules it imports anywhere in its source (function-local imports
    included, package ``__init__`` imports of a parent excluded)."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = module.split(".") if is_package else module.split(".")[:-1]
                    parent = parent[: len(parent) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                found = resolve(target) if target.startswith("ragtrail.") else None
                if found and found != module and not module.startswith(found + "."):
                    graph[module].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    assert graph.get("ragtrail.pipeline.tasks")
    assert cycles(graph) == []


def _contract_layers(name_prefix: str) -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(
        c for c in config["tool"]["importlinter"]["contracts"] if c["name"].startswith(name_prefix)
    )
    return [layer.replace("ragtrail.", "") for layer in contract["layers"]]


def test_package_docstring_lists_the_enforced_layers() -> None:
    doc = ragtrail.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    listed = []
    for line in block.splitlines():
        head = re.split(r"\s{2,}", line.strip())[0]
        if line.startswith("    ") and not line.startswith("     ") and head:
            listed.append(head)
    assert listed == _contract_layers("ragtrail layers")


def test_the_repository_tracks_no_link_and_no_environment() -> None:
    """A committed link (a worktree's ``.venv`` pointing at another checkout, say) replaces
    whatever stands at its path in every clone: a fresh clone's ``make setup`` then fails, and a
    checkout that had a real virtualenv there loses it."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "--stage"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in listed if line.startswith("120000 ")]
    environments = [
        line.split("\t", 1)[1]
        for line in listed
        if line.split("\t", 1)[1].split("/", 1)[0] in {".venv", "venv", ".ragtrail"}
    ]
    assert links == [] and environments == []
