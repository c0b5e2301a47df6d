"""Writing annotations files the way the kubelet's downward API does (``fieldpath.FormatMap``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

_NAMED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(value: str) -> str:
    """Go's ``strconv.Quote``: printable runes as they are, the rest escaped."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == " " or (ch.isprintable() and code != 0x7F):
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def format_map(annotations: Mapping[str, str]) -> str:
    """``key="value"`` lines, keys sorted, no newline after the last one."""
    return "\n".join(f"{key}={go_quote(annotations[key])}" for key in sorted(annotations))


def write_annotations(path: Path, annotations: Mapping[str, str]) -> Path:
    """Write the pod's annotations file (atomically, as the kubelet's symlink swap is)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(format_map(annotations))
    tmp.replace(path)
    return path
