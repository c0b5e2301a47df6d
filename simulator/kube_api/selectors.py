"""Label and field selectors, parsed and matched like ``k8s.io/apimachinery``.

Label selector strings support ``=``, ``==``, ``!=``, ``in``, ``notin``, existence (``key``)
and non-existence (``!key``); ``!=`` and ``notin`` also match objects without the label, as
in the real API. Field selectors support ``=``, ``==`` and ``!=`` on the fields each
resource declares; other fields are rejected with 400, as the real server does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

JSON = dict[str, Any]

_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[A-Za-z0-9_./-]+)")


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``key op values``."""

    key: str
    op: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Return whether ``labels`` satisfy this requirement."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op == "in":
            return present and labels[self.key] in self.values
        # notin / != : an absent label satisfies it.
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Return whether every requirement holds for ``labels``."""
        current = labels or {}
        return all(r.matches(current) for r in self.requirements)


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if m is None:
            raise bad_request(f"unable to parse requirement: invalid label selector: {text!r}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query string.

    Raises:
        ApiError: 400 when the string is not a valid selector.
    """
    if not text or not text.strip():
        return LabelSelector()
    tokens = _tokenize(text)
    reqs: list[Requirement] = []
    i = 0

    def fail() -> ApiError:
        return bad_request(f"unable to parse requirement: invalid label selector: {text!r}")

    def is_word(tok: str) -> bool:
        return tok not in {"!=", "==", "=", "!", "(", ")", ","}

    while i < len(tokens):
        if tokens[i] == "!":
            if i + 1 >= len(tokens) or not is_word(tokens[i + 1]):
                raise fail()
            reqs.append(Requirement(tokens[i + 1], "!exists"))
            i += 2
        elif is_word(tokens[i]):
            key = tokens[i]
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
                i += 1
            elif nxt in {"=", "==", "!="}:
                # An empty value (``key=``) is legal and matches the empty string.
                value = ""
                j = i + 2
                if j < len(tokens) and is_word(tokens[j]):
                    value = tokens[j]
                    j += 1
                op = "notin" if nxt == "!=" else "in"
                reqs.append(Requirement(key, op, frozenset({value})))
                i = j
            elif nxt in {"in", "notin"}:
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    raise fail()
                j = i + 3
                values: set[str] = set()
                expect_value = True
                while j < len(tokens) and tokens[j] != ")":
                    tok = tokens[j]
                    if tok == ",":
                        expect_value = True
                    elif is_word(tok) and expect_value:
                        values.add(tok)
                        expect_value = False
                    else:
                        raise fail()
                    j += 1
                if j >= len(tokens):
                    raise fail()
                reqs.append(Requirement(key, nxt, frozenset(values)))
                i = j + 1
            else:
                raise fail()
        else:
            raise fail()
        if i < len(tokens):
            if tokens[i] != ",":
                raise fail()
            i += 1
    return LabelSelector(tuple(reqs))


def selector_from_object(selector: JSON | None) -> LabelSelector | None:
    """Convert a ``metav1.LabelSelector`` object; ``None`` (null selector) matches nothing.

    Raises:
        ApiError: 400 for an unknown operator or a malformed expression.
    """
    if selector is None:
        return None
    reqs = [
        Requirement(str(k), "in", frozenset({str(v)}))
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(str(expr.get("operator")))
        if op is None or "key" not in expr:
            raise bad_request(f"invalid label selector expression: {expr!r}")
        values = frozenset(str(v) for v in expr.get("values") or [])
        reqs.append(Requirement(str(expr["key"]), op, values))
    return LabelSelector(tuple(reqs))


FieldGetter = Callable[[JSON], str]


@dataclass(frozen=True)
class FieldRequirement:
    """One field requirement: ``field == value`` or ``field != value``."""

    field: str
    value: str
    negate: bool


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field requirements, bound to the resource's field getters."""

    requirements: tuple[FieldRequirement, ...]
    getters: Mapping[str, FieldGetter]

    def matches(self, obj: JSON) -> bool:
        """Return whether ``obj`` satisfies every requirement."""
        for req in self.requirements:
            equal = self.getters[req.field](obj) == req.value
            if equal == req.negate:
                return False
        return True


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str | None, getters: Mapping[str, FieldGetter]) -> FieldSelector:
    """Parse a ``fieldSelector`` against the fields a resource supports.

    Raises:
        ApiError: 400 for a malformed selector or an unsupported field.
    """
    reqs: list[FieldRequirement] = []
    if text and text.strip():
        for part in _split_unescaped(text, ","):
            m = re.fullmatch(r"\s*([^=!\s]+)\s*(!=|==|=)(.*)", part)
            if m is None:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
            field, op, value = m.group(1), m.group(2), m.group(3).strip()
            if field not in getters:
                raise bad_request(f"field label not supported: {field}")
            reqs.append(FieldRequirement(field, value, op == "!="))
    return FieldSelector(tuple(reqs), getters)


def path_getter(*path: str) -> FieldGetter:
    """Build a getter returning the string form of a nested field ("" when absent)."""

    def get(obj: JSON) -> str:
        cur: Any = obj
        for key in path:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(key)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            # Go formats booleans lowercase: spec.unschedulable=true.
            return "true" if cur else "false"
        return str(cur)

    return get


__all__ = [
    "ApiError",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "parse_field_selector",
    "parse_label_selector",
    "path_getter",
    "selector_from_object",
]
