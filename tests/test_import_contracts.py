"""Import contracts: which part of the project may import which, and no import circles.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts,
including those under ``if TYPE_CHECKING:`` and inside functions, since a
reader follows those just the same. ``from package import name`` counts as an
import of ``package.name`` when that is a module of ours, else of ``package``.

An allowed exception names the exact import and why it is still there; an
exception that no longer happens fails, so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "gpu_remediation",
    "workflows",
    "activities",
    "triggers",
    "cli",
    "simulator",
    "agent",
    "demo",
    "bench",
)
MODULES = ("worker",)

DOMAIN = "gpu_remediation"


@dataclass(frozen=True)
class Rule:
    """Modules under ``importer`` may not import modules under any of ``forbidden``."""

    importer: str
    forbidden: tuple[str, ...]
    why: str


RULES = (
    Rule(
        DOMAIN,
        tuple(p for p in (*PACKAGES, *MODULES) if p != DOMAIN),
        "the domain package is what everything else shares: it imports nothing of ours",
    ),
    Rule("workflows", ("activities",), "workflows call activities by name, never by import"),
    Rule("activities", ("workflows",), "activities start workflows by type name"),
    Rule(
        "simulator",
        ("activities", "workflows", "triggers", "cli"),
        "the simulator stands in for the world the production code acts on",
    ),
)

ALLOWED_IMPORTS: Mapping[tuple[str, str], str] = {}
"""(importer, imported) module pairs that break a rule for now, with the reason."""

ALLOWED_CYCLES: Mapping[frozenset[str], str] = {}
"""Import circles (their modules) that exist for now, with the reason."""


# ---------------------------------------------------------------- the graph


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files(root: Path, packages: Iterable[str], modules: Iterable[str]) -> dict[str, Path]:
    """Every module of the project by dotted name."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[_module_name(path, root)] = path
    for module in modules:
        path = root / f"{module}.py"
        if path.exists():
            found[module] = path
    return found


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _ours(name: str, known: set[str]) -> str | None:
    # ``import a.b.c`` where only ``a.b`` is a module of ours (``c`` a name in it).
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(files: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """For each module, the modules of ours it imports and the line of the first import."""
    known = set(files)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    targets.append(sub if sub in known else base)
            for target in targets:
                ours = _ours(target, known)
                if ours is not None and ours != module:
                    edges.setdefault(ours, node.lineno)
        graph[module] = edges
    return graph


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@dataclass(frozen=True)
class Violation:
    """One import that breaks a rule."""

    importer: str
    imported: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} -> {self.imported} ({self.why})"


def violations(graph: Mapping[str, Mapping[str, int]], rules: Iterable[Rule]) -> list[Violation]:
    """Every import that breaks one of ``rules``."""
    found = []
    for rule in rules:
        for module, edges in sorted(graph.items()):
            if not _under(module, rule.importer):
                continue
            for target, line in sorted(edges.items()):
                if any(_under(target, f) for f in rule.forbidden):
                    found.append(Violation(module, target, line, rule.why))
    return found


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[frozenset[str]]:
    """The import circles: strongly connected groups of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0

    for start in sorted(graph):
        if start in index:
            continue
        # Iterative, so a deep import chain cannot hit the recursion limit.
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def _describe(group: frozenset[str], graph: Mapping[str, Mapping[str, int]]) -> str:
    inside = [
        f"{m}:{line} -> {t}"
        for m in sorted(group)
        for t, line in sorted(graph[m].items())
        if t in group
    ]
    return "{" + ", ".join(sorted(group)) + "}: " + "; ".join(inside)


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph(project_files(ROOT, PACKAGES, MODULES))


# ---------------------------------------------------------------- contracts


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.importer)
def test_each_part_imports_only_what_its_rule_allows(
    graph: dict[str, dict[str, int]], rule: Rule
) -> None:
    broken = [
        str(v) for v in violations(graph, [rule]) if (v.importer, v.imported) not in ALLOWED_IMPORTS
    ]
    assert broken == []


def test_the_project_has_no_import_circle(graph: dict[str, dict[str, int]]) -> None:
    found = [_describe(g, graph) for g in cycles(graph) if g not in ALLOWED_CYCLES]
    assert found == []


def test_every_allowed_exception_still_happens(graph: dict[str, dict[str, int]]) -> None:
    stale_imports = [pair for pair in ALLOWED_IMPORTS if pair[1] not in graph.get(pair[0], {})]
    stale_cycles = [sorted(g) for g in ALLOWED_CYCLES if g not in cycles(graph)]
    assert stale_imports == []
    assert stale_cycles == []


def test_the_graph_sees_every_kind_of_import(graph: dict[str, dict[str, int]]) -> None:
    # Guards the checker on the real tree: with no edges found, every rule would pass.
    assert "gpu_remediation.ids" in graph["activities.temporal"]  # from module import name
    assert "simulator.fleet.agent" in graph["simulator.fleet.reboots"]  # under TYPE_CHECKING
    assert "simulator.fleet.dcgm" in graph["simulator.fleet.host"]  # from package import module
    assert (
        "simulator.kube_api.seeding.base" in graph["simulator.kube_api.seeding.nodes"]
    )  # relative


# ---------------------------------------------------------- the checker itself


def _tree(root: Path, files: Mapping[str, str]) -> dict[str, dict[str, int]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(project_files(root, ["pkg", "other"], []))


def test_a_circle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import B\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
            ),
            "pkg/c.py": "from pkg import a\n",
        },
    )
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]


def test_a_forbidden_import_inside_a_function_is_found(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    import other.x.thing\n",
            "other/__init__.py": "",
            "other/x.py": "import os\n",
        },
    )
    rule = Rule("pkg", ("other",), "test")
    assert [str(v) for v in violations(graph, [rule])] == ["pkg.a:2 -> other.x (test)"]
