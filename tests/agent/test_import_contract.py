"""The node agent and the tool-output parsers import no Temporal, Kubernetes or AWS code.

Read from the source (AST), so a lazy import inside a function counts too.
Followed through the project's own modules: whatever the agent imports of
``gpu_remediation`` must keep the contract as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FORBIDDEN = ("temporalio", "kubernetes", "boto3", "botocore", "activities", "workflows")
OURS = ("agent", "gpu_remediation")


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _closure(start: list[Path]) -> dict[str, str]:
    """Every module reached from ``start`` -> the file that imports it first."""
    reached: dict[str, str] = {}
    todo = list(start)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path):
            reached.setdefault(module, str(path.relative_to(ROOT)))
            if module.split(".")[0] in OURS and (found := _module_file(module)):
                todo.append(found)
    return reached


PACKAGES = ["agent", "gpu_remediation/tool_outputs"]


def _forbidden(reached: dict[str, str]) -> dict[str, str]:
    return {m: by for m, by in reached.items() if m.split(".")[0] in FORBIDDEN}


@pytest.mark.parametrize("package", PACKAGES)
def test_package_itself_imports_nothing_from_temporal_kubernetes_aws_activities_or_workflows(
    package: str,
) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    direct = {m: str(f.relative_to(ROOT)) for f in files for m in _imports(f)}
    assert not _forbidden(direct)


@pytest.mark.parametrize("package", PACKAGES)
def test_nothing_the_package_reaches_imports_temporal_kubernetes_or_aws(package: str) -> None:
    reached = _closure(sorted((ROOT / package).rglob("*.py")))
    assert not _forbidden(reached), _forbidden(reached)


def test_the_agent_uses_the_shared_parser_package() -> None:
    reached = _closure([ROOT / "agent" / "checks" / "dcgm.py"])
    assert "gpu_remediation.tool_outputs.dcgm_health" in reached
