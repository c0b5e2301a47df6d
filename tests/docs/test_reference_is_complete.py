"""docs/reference.md names every command, policy section and setting the code has.

The reference is written by hand, for readers; the code is the authority on
what exists. A command, a policy section or a setting added without a line in
the reference fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from cli.main import app
from gpu_remediation.policy import Policy
from gpu_remediation.settings import Settings

REFERENCE = (Path(__file__).parents[2] / "docs" / "reference.md").read_text()


def section(title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## ``."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", REFERENCE, re.M | re.S)
    assert match is not None, f"docs/reference.md has no section '## {title}'"
    return match.group(1)


@pytest.mark.parametrize("command", sorted(typer.main.get_command(app).commands))  # type: ignore[attr-defined]
def test_every_remediate_command_is_in_the_reference(command: str) -> None:
    text = section("The `remediate` command")
    assert f"remediate {command}" in text or f"`{command}`" in text


@pytest.mark.parametrize("field", sorted(set(Policy.model_fields) - {"version"}))
def test_every_policy_section_is_in_the_reference(field: str) -> None:
    assert f"| `{field}` |" in section("Policy fields")


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_in_the_reference(field: str) -> None:
    text = section("Settings")
    variable = f"GPU_REMEDIATION_{field.upper()}"
    # The worker's tuning is listed as ``..._NAME`` after its first variable.
    assert variable in text or f"..._{field.upper()}" in text, variable
