"""docker-compose.yml as Compose reads it: variable interpolation and merged services.

Interpolation follows the Compose Specification: ``$VAR``, ``${VAR}``,
``${VAR:-default}`` / ``${VAR-default}`` (defaults may nest), ``${VAR:?err}``
/ ``${VAR?err}`` (required), ``${VAR:+alt}`` / ``${VAR+alt}``, and ``$$`` for
a literal ``$``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from tests.deploy.support import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class MissingVariableError(Exception):
    """A required variable (``${VAR:?...}``) has no value."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"required variable {name} is missing a value: {message}")
        self.name = name


def raw() -> dict[str, Any]:
    """The file as YAML (anchors and merge keys resolved, nothing interpolated)."""
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


def _braced(text: str, start: int, env: Mapping[str, str]) -> tuple[str, int]:
    """Resolve ``${...}`` whose body starts at ``start``; return (value, end index)."""
    match = _NAME.match(text, start)
    if match is None:
        raise ValueError(f"invalid interpolation at {text[start - 2 :]!r}")
    name, i = match.group(), match.end()
    if text[i] == "}":
        return env.get(name, ""), i + 1
    operator = text[i : i + 2] if text[i] == ":" else text[i]
    i += len(operator)
    # The operand runs to the matching brace; it may hold interpolations itself.
    depth, j = 1, i
    while depth:
        if text.startswith("${", j):
            depth, j = depth + 1, j + 2
            continue
        if text[j] == "}":
            depth -= 1
        j += 1
    operand = text[i : j - 1]
    value = env.get(name)
    empty_counts = operator.startswith(":")
    unset = value is None or (empty_counts and value == "")
    kind = operator[-1]
    if kind == "-":
        return (interpolate(operand, env) if unset else value or ""), j
    if kind == "?":
        if unset:
            raise MissingVariableError(name, interpolate(operand, env))
        return value or "", j
    if kind == "+":
        return ("" if unset else interpolate(operand, env)), j
    raise ValueError(f"unsupported operator {operator!r} in {text!r}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """``text`` with every variable replaced from ``env``.

    Raises:
        MissingVariableError: For the first required variable without a value.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            value, i = _braced(text, i + 2, env)
            out.append(value)
        elif text[i] == "$" and (match := _NAME.match(text, i + 1)):
            out.append(env.get(match.group(), ""))
            i = match.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def interpolated(env: Mapping[str, str]) -> dict[str, Any]:
    """The whole file with ``env``'s values (every string, keys excluded)."""

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return interpolate(node, env)
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items()}
        return node

    result: dict[str, Any] = walk(raw())
    return result


def required_variables() -> set[str]:
    """Every variable Compose refuses to start without."""
    missing: set[str] = set()
    env: dict[str, str] = {}
    while True:
        try:
            interpolated(env)
        except MissingVariableError as err:
            missing.add(err.name)
            env[err.name] = "x"
        else:
            return missing


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of a service's bind mounts (long syntax only)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict) and volume.get("type") == "bind":
            mounts.append((volume["source"], volume["target"], bool(volume.get("read_only"))))
    return mounts
