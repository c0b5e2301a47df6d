"""The project's SSM Command document, checked and rendered the way SSM does.

One source of truth: the file ``deploy/aws/gpu-remediation-host-command.json``
that operators create in their account (``deploy/aws/README.md``) is the one
the simulated cloud creates in moto at start and runs. moto stores documents
but neither checks a command's parameters nor runs anything, so this module
does what SSM does with a ``SendCommand``: it refuses unknown or missing
parameters and values outside the document's ``allowedValues`` or
``allowedPattern`` (``InvalidParameters``: nothing runs), fills in defaults,
and substitutes ``{{ name }}`` in the script lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCUMENT_FILE = (
    Path(__file__).resolve().parents[1] / "deploy" / "aws" / "gpu-remediation-host-command.json"
)
"""The shipped document (a source checkout: the simulator runs from one)."""

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")


class InvalidParameters(ValueError):
    """Parameters the document refuses (SSM answers ``InvalidParameters``)."""


@dataclass(frozen=True)
class CommandDocument:
    """An SSM Command document of schema 2.2 with one ``aws:runShellScript`` step."""

    content: str
    parameters: Mapping[str, Mapping[str, Any]]
    run_command: Sequence[str]

    @classmethod
    def load(cls, path: Path = DOCUMENT_FILE) -> CommandDocument:
        """Read and check a document file.

        Raises:
            ValueError: The file is not a schema 2.2 document of one
                ``aws:runShellScript`` step whose parameters are all constrained.
        """
        content = path.read_text()
        parsed = json.loads(content)
        check_document(parsed)
        [step] = parsed["mainSteps"]
        return cls(content, parsed["parameters"], list(step["inputs"]["runCommand"]))

    def resolve(self, given: Mapping[str, Sequence[str]] | None) -> dict[str, str]:
        """The value of every parameter, as SSM would accept ``given``.

        Raises:
            InvalidParameters: An unknown parameter, a missing one without a
                default, more than one value, or a value the document refuses.
        """
        given = given or {}
        unknown = sorted(set(given) - set(self.parameters))
        if unknown:
            raise InvalidParameters(f"unknown parameters {unknown}")
        values: dict[str, str] = {}
        for name, spec in self.parameters.items():
            if name in given:
                sent = list(given[name])
                if len(sent) != 1:
                    raise InvalidParameters(f"{name}: one value expected, got {len(sent)}")
                value = str(sent[0])
            elif "default" in spec:
                value = str(spec["default"])
            else:
                raise InvalidParameters(f"{name}: required")
            allowed = spec.get("allowedValues")
            if allowed is not None and value not in allowed:
                raise InvalidParameters(f"{name}: {value!r} is not one of {allowed}")
            pattern = spec.get("allowedPattern")
            if pattern is not None and re.fullmatch(pattern, value) is None:
                raise InvalidParameters(f"{name}: {value!r} does not match {pattern}")
            values[name] = value
        return values

    def render(self, values: Mapping[str, str]) -> list[str]:
        """The script lines with ``{{ name }}`` replaced, as the agent runs them."""
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], line) for line in self.run_command]


def check_document(parsed: Mapping[str, Any]) -> None:
    """Refuse a document this project would not ship.

    Schema 2.2, exactly one ``aws:runShellScript`` step, every parameter a
    ``String`` constrained by ``allowedValues`` or ``allowedPattern``, and every
    placeholder in the script a declared parameter.

    Raises:
        ValueError: Naming what is wrong.
    """
    if parsed.get("schemaVersion") != "2.2":
        raise ValueError("schemaVersion must be 2.2")
    steps = parsed.get("mainSteps") or []
    if len(steps) != 1 or steps[0].get("action") != "aws:runShellScript":
        raise ValueError("exactly one aws:runShellScript step expected")
    parameters = parsed.get("parameters") or {}
    for name, spec in parameters.items():
        if spec.get("type") != "String":
            raise ValueError(f"parameter {name}: type String expected")
        if "allowedValues" not in spec and "allowedPattern" not in spec:
            raise ValueError(f"parameter {name}: neither allowedValues nor allowedPattern")
        pattern = spec.get("allowedPattern")
        if pattern is not None and not (pattern.startswith("^") and pattern.endswith("$")):
            raise ValueError(f"parameter {name}: allowedPattern must be anchored")
    inputs = steps[0].get("inputs") or {}
    lines = [*inputs.get("runCommand", []), str(inputs.get("timeoutSeconds", ""))]
    for line in lines:
        for used in _PLACEHOLDER.findall(line):
            if used not in parameters:
                raise ValueError(f"the script uses {{{{ {used} }}}}, not a parameter")
