"""Load a remediation policy from YAML, and describe the ladder it implies.

A user's file is merged over the packaged defaults (``default_policy.yaml``):
mappings merge key by key, recursively; any other value (a scalar, a list, an
explicit ``null``) replaces the default. So a file holds only what it changes,
and ``start_rung: null`` turns a class into notify-only. An empty file is an
error rather than "all defaults", so a wrong path to an empty file is noticed.

Every problem is a ``PolicyError`` naming the file and, for validation errors,
each bad field by its dotted path. A pool's override is checked by building
that pool's effective policy, so its problems are named under ``pools.<pool>``.
"""

from __future__ import annotations

from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpu_remediation.models import FaultClass, Rung
from gpu_remediation.policy import Policy
from gpu_remediation.policy_override import PoolOverrideError, deep_merge
from gpu_remediation.rungs import (
    ComponentCheck,
    RungAction,
    Verification,
    can_fix,
    check_for,
    rung_spec,
)

DEFAULT_POLICY_RESOURCE = "default_policy.yaml"


class PolicyError(Exception):
    """A policy file that cannot be read, parsed or validated.

    Attributes:
        source: The file (or "<defaults>"/"<string>") the policy came from.
        problems: One line per problem, e.g. ``rungs.reboot.max_attempts: ...``.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        if len(problems) == 1:
            message = f"{source}: {problems[0]}"
        else:
            message = f"{source}: {len(problems)} problems:\n" + "\n".join(
                f"  {p}" for p in problems
            )
        super().__init__(message)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def default_policy_text() -> str:
    """Return the packaged default policy YAML, comments included."""
    return resources.files("gpu_remediation").joinpath(DEFAULT_POLICY_RESOURCE).read_text("utf-8")


def _parse_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = err.problem or err.context or "invalid YAML"
        kind = (
            "YAML error"
            if isinstance(err, yaml.constructor.ConstructorError)
            else "YAML syntax error"
        )
        raise PolicyError(source, [f"{where}{kind}: {problem}"]) from err
    except yaml.YAMLError as err:
        raise PolicyError(source, [f"YAML syntax error: {err}"]) from err
    if not isinstance(data, dict):
        found = "an empty document" if data is None else f"a {type(data).__name__}"
        raise PolicyError(source, [f"the policy must be a mapping at the top level, got {found}"])
    return data


def _dotted(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}]"]
        elif item == "[key]":  # pydantic's marker for a bad mapping key
            parts.append("(key)")
        else:
            parts.append(str(item))
    return ".".join(parts)


def _problems(err: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[str]:
    problems = []
    for error in err.errors(include_url=False):
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, PoolOverrideError):
            # A pool's effective policy is invalid: its problems, at their paths in the pool.
            problems += _problems(cause.error, (*prefix, *error["loc"], "pools", cause.pool))
            continue
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] not in ("extra_forbidden", "missing") and not isinstance(
            error.get("input"), dict | list
        ):
            message += f" (got {error.get('input')!r})"
        if error["type"].startswith("time_delta"):
            message += '; write durations like "30s", "10m", "2h", "7d"'
        path = _dotted((*prefix, *error["loc"]))
        problems.append(f"{path}: {message}" if path else message)
    return problems


def parse_policy(text: str, source: str = "<string>") -> Policy:
    """Parse and validate policy YAML merged over the packaged defaults.

    Args:
        text: YAML holding the settings that differ from the defaults.
        source: Name used in error messages (usually the file path).

    Raises:
        PolicyError: On a YAML syntax error, a non-mapping document or invalid values.
    """
    defaults = _parse_yaml(default_policy_text(), "<defaults>")
    merged = deep_merge(defaults, _parse_yaml(text, source))
    try:
        return Policy.model_validate(merged)
    except ValidationError as err:
        raise PolicyError(source, _problems(err)) from err


def load_policy(path: Path | None = None) -> Policy:
    """Load the policy from ``path`` merged over the packaged defaults.

    Args:
        path: A YAML policy file; None loads the packaged defaults alone.

    Raises:
        PolicyError: If the file cannot be read, is not valid YAML, is not a
            mapping, or does not validate (every bad field named by its path).
    """
    if path is None:
        try:
            return Policy.model_validate(_parse_yaml(default_policy_text(), "<defaults>"))
        except ValidationError as err:  # only if the shipped file itself is broken
            raise PolicyError("<defaults>", _problems(err)) from err
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        detail = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise PolicyError(str(path), [f"cannot read the policy file: {detail}"]) from err
    return parse_policy(text, str(path))


# ------------------------------------------------------------------ effective ladder


class LadderStep(BaseModel):
    """One rung of the ladder a fault class would climb, as the policy shapes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rung: Rung
    runs: bool
    """False when the rung is disabled or above the class's max_rung."""
    enabled: bool
    requires_approval: bool
    timeout: timedelta
    max_attempts: int
    window: timedelta
    note: str = ""


def _verified_by(policy: Policy, fault_class: FaultClass) -> str:
    check = check_for(fault_class)
    if check == ComponentCheck.DCGM_DIAG:
        return f"DCGM diag level {policy.verification.diag_level}"
    if check == ComponentCheck.EFA_CHECK:
        return "the node agent's EFA checks"
    return "the node Ready on its boot"


def _step(policy: Policy, fault_class: FaultClass, rung: Rung, runs: bool, note: str) -> LadderStep:
    rp = policy.rung(rung)
    spec = rung_spec(rung)
    notes = [note] if note else []
    if runs:
        if rp.requires_approval:
            notes.append("waits for an operator's approval")
        if spec.disruptive:
            notes.append("blocked while the pool's breaker is open")
        if rung == Rung.REPLACE:
            notes.append(
                f"needs a replacement permit (at most {policy.replacement.max_concurrent} at once)"
            )
        changes = spec.action not in (RungAction.NONE, RungAction.HAND_OVER)
        if changes and spec.verification == Verification.COMPONENT and policy.verification.enabled:
            notes.append(f"then verified ({_verified_by(policy, fault_class)})")
    return LadderStep(
        rung=rung,
        runs=runs,
        enabled=rp.enabled,
        requires_approval=rp.requires_approval,
        timeout=rp.timeout,
        max_attempts=rp.max_attempts,
        window=rp.window,
        note="; ".join(notes),
    )


def effective_ladder(policy: Policy, fault_class: FaultClass) -> list[LadderStep]:
    """Describe the rungs an incident of ``fault_class`` would climb under ``policy``.

    Quarantine comes first; stopping GPU work precedes diagnosis and every
    corrective rung; then each rung from the class's start_rung upwards is run,
    skipped (disabled) or not run (above max_rung); escalation is always last.
    Pure: it only reads its arguments.

    Args:
        policy: The policy to describe.
        fault_class: The class whose ladder to describe.

    Returns:
        The steps in order, or an empty list when the class's start_rung is
        None (notify only, the node is not touched).
    """
    fc_policy = policy.fault_class(fault_class)
    start, ceiling = fc_policy.start_rung, fc_policy.max_rung
    if start is None:
        return []
    rungs: list[Rung] = [Rung.QUARANTINE]
    if start != Rung.ESCALATE:
        rungs.append(Rung.STOP_GPU_WORK)
    rungs += [r for r in Rung if r.order >= max(start.order, Rung.DIAGNOSE.order)]
    steps = []
    fc = fault_class
    for rung in rungs:
        if rung == Rung.ESCALATE:
            steps.append(_step(policy, fc, rung, True, "hand over to a human; always last"))
        elif not policy.rung(rung).enabled:
            steps.append(_step(policy, fc, rung, False, "disabled by policy, skipped"))
        elif rung.order > ceiling.order:
            steps.append(_step(policy, fc, rung, False, f"above max_rung {ceiling}, not run"))
        elif not rung_spec(rung).preparation and not can_fix(rung, fault_class):
            steps.append(_step(policy, fc, rung, False, f"cannot fix a {fault_class} fault"))
        elif rung == Rung.DIAGNOSE:
            note = f"checks with {_verified_by(policy, fault_class)}; its findings may reclassify"
            steps.append(_step(policy, fc, rung, True, note))
        else:
            steps.append(_step(policy, fc, rung, True, ""))
    return steps
