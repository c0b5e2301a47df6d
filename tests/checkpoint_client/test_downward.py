"""The downward API's annotations file is read back exactly, and bad files are named."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint_client.downward import (
    MAX_FILE_BYTES,
    AnnotationsFormatError,
    go_unquote,
    parse_annotations,
    read_annotations,
)

from .downward_files import format_map, go_quote


def test_a_kubelet_file_with_a_json_request_parses() -> None:
    # As `cat /etc/podinfo/annotations` shows it on a real node.
    text = (
        'gpu-remediation.io/checkpoint="supported"\n'
        'gpu-remediation.io/checkpoint-request="{\\"version\\":1,\\"incident\\":\\"a/b\\"}"\n'
        'kubernetes.io/config.seen="2026-12-04T13:00:00.123456789Z"'
    )
    assert parse_annotations(text) == {
        "gpu-remediation.io/checkpoint": "supported",
        "gpu-remediation.io/checkpoint-request": '{"version":1,"incident":"a/b"}',
        "kubernetes.io/config.seen": "2026-12-04T13:00:00.123456789Z",
    }


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        ('"tab\\there"', "tab\there"),
        ('"line\\nbreak"', "line\nbreak"),
        ('"caf\u00e9"', "caf\u00e9"),
        ('"\\x01\\x7f"', "\x01\x7f"),
        ('"\\u200b"', "\u200b"),
        ('"\\U0001f600"', "\U0001f600"),
        ('"\\xc3\\xa9"', "\u00e9"),  # bytes of a UTF-8 sequence, escaped one by one
        ('"\\101"', "A"),
        ('"back\\\\slash \\"q\\""', 'back\\slash "q"'),
    ],
)
def test_go_escapes_decode(quoted: str, value: str) -> None:
    assert go_unquote(quoted) == value


@pytest.mark.parametrize(
    ("quoted", "why"),
    [
        ("unquoted", "double-quoted"),
        ('"ends in \\"', "inside an escape"),
        ('"a"b"', "unescaped quote"),
        ('"\\q"', "unknown escape"),
        ('"\\x4"', "bad \\x escape"),
        ('"\\ud800"', "not a character"),
        ('"\\xff"', "not UTF-8"),
    ],
)
def test_bad_quoting_is_refused_with_the_reason(quoted: str, why: str) -> None:
    with pytest.raises(AnnotationsFormatError) as err:
        go_unquote(quoted)
    assert why in str(err.value)


@given(
    st.dictionaries(st.from_regex(r"[a-z0-9.\-]{1,20}/[a-z0-9\-]{1,20}", fullmatch=True), st.text())
)
def test_any_annotations_survive_the_round_trip(annotations: dict[str, str]) -> None:
    assert parse_annotations(format_map(annotations)) == annotations


def test_a_bad_line_is_named_by_number(tmp_path: Path) -> None:
    path = tmp_path / "annotations"
    path.write_text(f"a={go_quote('x')}\nno-equals-sign\n")
    with pytest.raises(AnnotationsFormatError, match=r"annotations: line 2: expected key="):
        read_annotations(path)


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "annotations"
    path.write_text(f"a={go_quote('x' * MAX_FILE_BYTES)}")
    with pytest.raises(AnnotationsFormatError, match="larger than"):
        read_annotations(path)
