r"""Reading the pod's annotations from a downward-API volume file.

The kubelet writes ``metadata.annotations`` as one ``key="value"`` line per
annotation, keys sorted, each value quoted the way Go's ``%q`` does
(``strconv.Quote``: ``\"``, ``\\``, ``\n``, ``\t``, ``\xNN``, ``\uNNNN``...;
printable Unicode kept as UTF-8). The kubelet refreshes the file when the
annotations change (within its sync period, typically under a minute).
"""

from __future__ import annotations

from pathlib import Path

MAX_FILE_BYTES = 512 * 1024
"""Kubernetes caps a pod's annotations at 256 KiB; quoting can grow them."""

_SIMPLE = {
    "a": b"\a",
    "b": b"\b",
    "f": b"\f",
    "n": b"\n",
    "r": b"\r",
    "t": b"\t",
    "v": b"\v",
    "\\": b"\\",
    '"': b'"',
    "'": b"'",
}
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"


class AnnotationsFormatError(ValueError):
    """The file is not in the downward API's format; the message says where."""


def go_unquote(quoted: str) -> str:
    """Undo Go's ``strconv.Quote`` (a double-quoted Go string literal).

    Raises:
        AnnotationsFormatError: Not a complete double-quoted literal, a bad escape,
            or bytes that are not UTF-8.
    """
    if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
        raise AnnotationsFormatError(f"expected a double-quoted string, got {quoted[:40]!r}")
    body = quoted[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            raise AnnotationsFormatError(f"unescaped quote at offset {i + 1}")
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        if i + 1 >= len(body):
            raise AnnotationsFormatError("the string ends inside an escape")
        kind = body[i + 1]
        if kind in _SIMPLE:
            out += _SIMPLE[kind]
            i += 2
        elif kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                raise AnnotationsFormatError(f"bad \\{kind} escape at offset {i + 1}")
            number = int(digits, 16)
            if kind == "x":
                out.append(number)
            else:
                try:
                    out += chr(number).encode()
                except (ValueError, UnicodeEncodeError) as err:
                    raise AnnotationsFormatError(
                        f"\\{kind}{digits} is not a character (offset {i + 1})"
                    ) from err
            i += 2 + width
        elif kind in _OCTAL:
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(d not in _OCTAL for d in digits) or int(digits, 8) > 255:
                raise AnnotationsFormatError(f"bad octal escape at offset {i + 1}")
            out.append(int(digits, 8))
            i += 4
        else:
            raise AnnotationsFormatError(f"unknown escape \\{kind} at offset {i + 1}")
    try:
        return out.decode()
    except UnicodeDecodeError as err:
        raise AnnotationsFormatError(f"the value is not UTF-8 ({err.reason})") from err


def parse_annotations(text: str) -> dict[str, str]:
    """Parse the downward API's ``key="value"`` lines (blank lines are skipped).

    Raises:
        AnnotationsFormatError: A line that is not ``key="value"``; the message gives
            the line number.
    """
    found: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        key, sep, quoted = line.partition("=")
        if not sep or not key:
            raise AnnotationsFormatError(f'line {number}: expected key="value"')
        try:
            found[key] = go_unquote(quoted)
        except AnnotationsFormatError as err:
            raise AnnotationsFormatError(f"line {number} ({key}): {err}") from err
    return found


def read_annotations(path: Path) -> dict[str, str]:
    """Read and parse the annotations file at ``path``.

    Raises:
        OSError: The file cannot be read (e.g. the volume is not mounted).
        AnnotationsFormatError: Larger than :data:`MAX_FILE_BYTES`, or not in the format.
    """
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise AnnotationsFormatError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        raise AnnotationsFormatError(f"{path}: not UTF-8 ({err.reason})") from err
    try:
        return parse_annotations(text)
    except AnnotationsFormatError as err:
        raise AnnotationsFormatError(f"{path}: {err}") from err
