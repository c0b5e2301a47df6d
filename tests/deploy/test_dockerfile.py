"""The service image's Dockerfile: hadolint-clean, pinned, non-root, small, and its
build context holds everything ``pip install .`` needs (built here as a wheel).
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.deploy.support import REPO

DOCKERFILE = REPO / "Dockerfile"
TEXT = DOCKERFILE.read_text()
# Instructions with their continuation lines joined.
INSTRUCTIONS = [
    line.strip()
    for line in re.sub(r"\\\n", " ", TEXT).splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(keyword: str) -> list[str]:
    return [i.split(None, 1)[1] for i in INSTRUCTIONS if i.split(None, 1)[0].upper() == keyword]


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sysconfig.get_path("scripts")) / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_base_image_is_pinned_by_version_and_digest() -> None:
    [default] = [a for a in instructions("ARG") if a.startswith("PYTHON_IMAGE=")]
    image = default.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+@sha256:[0-9a-f]{64}", image), image
    assert instructions("FROM") == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_the_image_runs_as_an_unprivileged_user() -> None:
    final_stage = TEXT.rsplit("\nFROM ", 1)[1]
    [user] = [i.split(None, 1)[1] for i in INSTRUCTIONS if i.startswith("USER")]
    assert user in final_stage
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert int(uid) >= 1000


def test_nothing_is_fetched_with_add_and_only_the_package_is_installed() -> None:
    assert not instructions("ADD")
    [run] = [r for r in instructions("RUN") if "pip install" in r]
    assert re.search(r"pip install --no-compile \.( |$)", run), run
    assert "[" not in run.split("pip install", 1)[1].split("&&", 1)[0], "no extras in the image"
    assert instructions("ENTRYPOINT") == ['["remediate"]']
    # Each service has its own probe; the image declares none that would fit only one.
    assert instructions("HEALTHCHECK") == ["NONE"]


def _dockerignore() -> list[tuple[bool, str]]:
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            patterns.append((negated, line.lstrip("!").rstrip("/")))
    return patterns


def in_context(relative: str) -> bool:
    """Whether Docker sends ``relative`` to the build (last matching pattern wins)."""
    included = True
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for negated, pattern in _dockerignore():
        plain = pattern.removeprefix("**/")
        for candidate in candidates:
            name = candidate.rsplit("/", 1)[-1]
            if fnmatch.fnmatch(candidate, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(name, plain)
            ):
                included = negated
                break
    return included


def test_the_build_context_keeps_sources_and_drops_tests_and_local_state() -> None:
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in packages:
        package = pattern.rstrip("*")
        assert in_context(f"{package}/__init__.py"), package
        assert f"COPY {package} ./{package}" in INSTRUCTIONS
    for needed in (
        "pyproject.toml",
        "README.md",
        "worker.py",
        "gpu_remediation/default_policy.yaml",
    ):
        assert in_context(needed), needed
    for dropped in (
        "tests/conftest.py",
        ".venv/bin/python",
        "bench/run_all.py",
        ".git/HEAD",
        ".env",
        "deploy/rbac.yaml",
        "gpu_remediation/__pycache__/ids.cpython-311.pyc",
    ):
        assert not in_context(dropped), dropped


@pytest.mark.timeout(120)
def test_the_build_context_builds_a_complete_wheel(tmp_path: Path) -> None:
    context = tmp_path / "context"
    for path in REPO.rglob("*"):
        relative = path.relative_to(REPO).as_posix()
        if path.is_file() and not relative.startswith((".venv/", ".git/")) and in_context(relative):
            target = context / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(context),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [wheel] = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in (
        "worker.py",
        "cli/main.py",
        "gpu_remediation/default_policy.yaml",
        "workflows/metrics.py",
        "triggers/metrics.py",
        "gpu_remediation/telemetry.py",
    ):
        assert module in names, module
    [entry_points] = [n for n in names if n.endswith("entry_points.txt")]
    assert "remediate = cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
