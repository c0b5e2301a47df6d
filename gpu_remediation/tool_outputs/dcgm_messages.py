"""DCGM error id of a message, recognised by DCGM's own message templates.

``dcgmi health -j`` prints an incident's message but not its error id. Every
``_MSG`` template of ``dcgm_errors.h`` (``gpu_remediation.dcgm_errors``) is
turned into a pattern: its printf conversions match any text, its literal words
must all be there in order. dcgmi splits long messages into ``overflow`` chunks
and may drop a punctuation mark at a split (``Health.cpp``, ``AddErrorMessage``),
so case, punctuation and spacing are ignored. The most specific template (the
most literal text) wins: "Detected XID 48 for GPU 2" is ``XID_ERROR`` (101),
not the shorter "Detected %ld %s for GPU %u" (102).
"""

from __future__ import annotations

import re

from gpu_remediation.dcgm_errors import DCGM_ERROR_META

__all__ = ["message_error_id"]

_CONVERSION = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?[diouxXeEfgGcsp]")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
# Templates with less literal text than this say too little to name an id.
_MIN_LITERAL = 14


def _normalise(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", text.lower()).split())


def _pattern(template: str) -> tuple[int, re.Pattern[str]] | None:
    pieces = [_normalise(p) for p in _CONVERSION.split(template.replace("%%", "%"))]
    literal = sum(len(p) for p in pieces)
    if literal < _MIN_LITERAL:
        return None
    body = r".*?".join(r"\s*".join(re.escape(w) for w in p.split(" ")) if p else "" for p in pieces)
    return literal, re.compile(r"(?<![a-z0-9])" + body)


def _build() -> tuple[tuple[re.Pattern[str], int], ...]:
    found: list[tuple[int, int, re.Pattern[str]]] = []
    for error_id, meta in DCGM_ERROR_META.items():
        compiled = _pattern(meta.message) if error_id > 0 else None
        if compiled is not None:
            found.append((compiled[0], error_id, compiled[1]))
    found.sort(key=lambda row: (-row[0], row[1]))
    return tuple((pattern, error_id) for _, error_id, pattern in found)


_PATTERNS = _build()


def message_error_id(message: str) -> int | None:
    """Return the DCGM error id whose template ``message`` was formatted from, if any."""
    text = _normalise(message)
    for pattern, error_id in _PATTERNS:
        if pattern.search(text):
            return error_id
    return None
