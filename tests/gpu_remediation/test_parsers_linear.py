"""Guard: every parser of what a node prints reads 64 KB of hostile text in bounded time.

Not a benchmark (issue 35): the bound (``hostile_inputs.BOUND_SECONDS``, one
second per 64 KB input) is far above what the linear parsers take and far below
what a backtracking one takes on the same input, so the test only fails when a
parser stops being linear in its input. The node agent's parsers have their own
guard (tests/agent/test_parsers_linear.py).

Parsers covered here, each fed every known hostile shape and hypothesis' picks:

* ``tool_outputs.dcgm_messages.message_error_id`` (DCGM template matching);
* ``tool_outputs.dcgm_health.parse_dcgm_health``: raw output, and the text in a
  health document, as one message (a chunk a line) and as a failing system a line;
* ``tool_outputs.dcgm_diag.parse_dcgm_diag``: raw output, and the text as a
  warning of a DCGM 4.x and of a 3.x document (GPU ids, GPU named in the text);
* ``tool_outputs.gpu_reset.parse_gpu_reset`` (stdout and stderr);
* ``activities.host``'s verdict of a diagnostic (decode, both parsers, combine);
* ``npd_message.parse_condition_message`` and ``split_findings``;
* ``catalog``: ``parse_message_xid``, ``parse_message_dcgm``, ``parse_message_efa``,
  ``recovery_action_from_message``, ``dcgm_message_xid``, ``nvlink5_nonfatal``,
  ``eks_reason_xid``;
* ``classifier._xid_item`` (the finding of a condition message that names its
  first Xid, read for an NVLink5 Xid's Nonfatal word) and the classification of
  a GPU condition carrying the text;
* ``admission_nccl.judge`` (the NCCL burn-in's reading of ``all_reduce_perf``);
* ``tool_outputs.efa_loopback.judge_efa_loopback`` (the EFA loopback's report):
  raw, and the text as the output of a device's ``fi_pingpong`` and as its
  report lines.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.host import _diagnostic_verdict
from activities.host_commands import CommandOutcome, encode_output
from gpu_remediation import catalog, classifier
from gpu_remediation.admission_nccl import NcclOutputError, judge
from gpu_remediation.dcgm_errors import DCGM_ERROR_META
from gpu_remediation.host_command import EFA_REPORT
from gpu_remediation.models import ConditionEvidence, DcgmEvidence
from gpu_remediation.npd_message import (
    Note,
    format_message,
    parse_condition_message,
    split_findings,
)
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.tool_outputs.common import DiagnosticParseError
from gpu_remediation.tool_outputs.dcgm_diag import _gpu_named_in, parse_dcgm_diag
from gpu_remediation.tool_outputs.dcgm_health import parse_dcgm_health
from gpu_remediation.tool_outputs.dcgm_messages import MAX_MATCHED_MESSAGE, message_error_id
from gpu_remediation.tool_outputs.efa_loopback import judge_efa_loopback
from gpu_remediation.tool_outputs.gpu_reset import parse_gpu_reset
from tests.gpu_remediation.hostile_inputs import (
    KNOWN_SHAPES,
    SIZE,
    health_document,
    health_document_of_systems,
    hostile_texts,
    timed,
)

pytestmark = pytest.mark.linear_guard

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
_POLICY = load_policy()


def _diag4_document(text: str) -> str:
    warning = {"warning": text, "error_id": 85, "error_severity": 6}
    result = {"status": "Fail", "warnings": [warning]}  # node-wide: the GPU is read from the text
    test = {"name": "memory", "results": [result], "test_summary": {"status": "Fail"}}
    return json.dumps(
        {"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [{"tests": [test]}]}}
    )


def _diag3_document(text: str) -> str:
    result = {"status": "FAIL", "gpu_ids": text, "warnings": [text]}
    return json.dumps(
        {
            "DCGM GPU Diagnostic": {
                "test_categories": [{"tests": [{"name": "m", "results": [result]}]}]
            }
        }
    )


def _host_verdict(text: str) -> None:
    diag = CommandOutcome(command_id="d", exit_code=1, stdout=encode_output(_diag4_document(text)))
    health = CommandOutcome(
        command_id="h", exit_code=0, stdout=encode_output(health_document(text))
    )
    _diagnostic_verdict("gpu-1", diag, health, NOW)


def _efa_loopback(text: str) -> None:
    judge_efa_loopback(text, max_counter_increase=100, min_bandwidth_fraction=0.5, observed_at=NOW)


def _efa_loopback_device(text: str) -> None:
    _efa_loopback(f"{EFA_REPORT} device rdmap0s31\n{text}\n{EFA_REPORT} exit 0\n")


def _efa_loopback_report_lines(text: str) -> None:
    lines = "\n".join(f"{EFA_REPORT} {line}" for line in text.splitlines())
    _efa_loopback(f"{EFA_REPORT} device rdmap0s31\n{lines}\n")


def _classify_condition(text: str) -> None:
    condition = ConditionEvidence(
        observed_at=NOW,
        source="t",
        type=catalog.NPD_GPU_CONDITION,
        status="True",
        message=text[:4096],
    )
    classifier.classify([condition], _POLICY)


def _allowed(call: Callable[[str], object], *errors: type[Exception]) -> Callable[[str], None]:
    """``call``, where raising one of its documented ``errors`` is a fine outcome."""

    def run(text: str) -> None:
        with contextlib.suppress(*errors):
            call(text)

    return run


PARSERS: dict[str, Callable[[str], None]] = {
    "dcgm_messages.message_error_id": _allowed(message_error_id),
    "dcgm_health.parse_dcgm_health (raw output)": _allowed(
        lambda t: parse_dcgm_health(t, observed_at=NOW), DiagnosticParseError
    ),
    "dcgm_health.parse_dcgm_health (a message a chunk a line)": _allowed(
        lambda t: parse_dcgm_health(health_document(t), observed_at=NOW)
    ),
    "dcgm_health.parse_dcgm_health (a system a line)": _allowed(
        lambda t: parse_dcgm_health(health_document_of_systems(t), observed_at=NOW)
    ),
    "dcgm_diag.parse_dcgm_diag (raw output)": _allowed(
        lambda t: parse_dcgm_diag(t, 1, observed_at=NOW), DiagnosticParseError
    ),
    "dcgm_diag.parse_dcgm_diag (4.x warning)": _allowed(
        lambda t: parse_dcgm_diag(_diag4_document(t), 1, observed_at=NOW)
    ),
    "dcgm_diag.parse_dcgm_diag (3.x GPU ids and warning)": _allowed(
        lambda t: parse_dcgm_diag(_diag3_document(t), 1, observed_at=NOW)
    ),
    "gpu_reset.parse_gpu_reset": _allowed(lambda t: parse_gpu_reset(1, t, t, command_id="c")),
    "activities.host diagnostic verdict": _allowed(_host_verdict),
    "npd_message.parse_condition_message": _allowed(
        lambda t: parse_condition_message(t, observed_at=NOW)
    ),
    "npd_message.split_findings": _allowed(split_findings),
    "catalog.parse_message_xid": _allowed(catalog.parse_message_xid),
    "catalog.parse_message_dcgm": _allowed(catalog.parse_message_dcgm),
    "catalog.parse_message_efa": _allowed(catalog.parse_message_efa),
    "catalog.recovery_action_from_message": _allowed(catalog.recovery_action_from_message),
    "catalog.dcgm_message_xid": _allowed(catalog.dcgm_message_xid),
    "catalog.nvlink5_nonfatal": _allowed(lambda t: catalog.nvlink5_nonfatal(145, t)),
    "catalog.eks_reason_xid": _allowed(catalog.eks_reason_xid),
    "classifier._xid_item": _allowed(classifier._xid_item),
    "classifier.classify (GPU condition message)": _allowed(_classify_condition),
    "admission_nccl.judge": _allowed(lambda t: judge(0, t, 100.0, 8), NcclOutputError),
    "efa_loopback.judge_efa_loopback (raw report)": _allowed(_efa_loopback),
    "efa_loopback.judge_efa_loopback (a device's fi_pingpong output)": _allowed(
        _efa_loopback_device
    ),
    "efa_loopback.judge_efa_loopback (report lines)": _allowed(_efa_loopback_report_lines),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_parser_reads_every_known_hostile_shape_within_the_bound(name: str) -> None:
    parse = PARSERS[name]
    for shape, text in KNOWN_SHAPES.items():
        timed(f"{name} on {shape}", parse, text)


@settings(max_examples=15, deadline=None, database=None, derandomize=True)
@given(text=hostile_texts())
def test_every_parser_reads_hypothesis_hostile_inputs_within_the_bound(text: str) -> None:
    assert len(text) == SIZE
    for name, parse in PARSERS.items():
        timed(name, parse, text)


# ------------------------------------------------ the template matcher's results


def _reference_patterns() -> list[tuple[re.Pattern[str], int]]:
    """The matcher before issue 35: each template as ONE regex, pieces joined by ``.*?``.

    Exact but cubic in the message's length; fine on the short messages below.
    """
    conversion = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?[diouxXeEfgGcsp]")
    found: list[tuple[int, int, re.Pattern[str]]] = []
    for error_id, meta in DCGM_ERROR_META.items():
        if error_id <= 0:
            continue
        pieces = [_normalise(p) for p in conversion.split(meta.message.replace("%%", "%"))]
        literal = sum(len(p) for p in pieces)
        if literal < 14:
            continue
        body = r".*?".join(
            r"\s*".join(re.escape(w) for w in p.split(" ")) if p else "" for p in pieces
        )
        found.append((literal, error_id, re.compile(r"(?<![a-z0-9])" + body)))
    found.sort(key=lambda row: (-row[0], row[1]))
    return [(pattern, error_id) for _, error_id, pattern in found]


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


_REFERENCE = _reference_patterns()


def _reference_error_id(message: str) -> int | None:
    text = _normalise(message)
    return next((error_id for pattern, error_id in _REFERENCE if pattern.search(text)), None)


def _formatted(template: str, argument: str) -> str:
    text = template.replace("%%", "\x00")
    text = re.sub(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?[diouxXeEfgGcsp]", argument, text)
    return text.replace("\x00", "%")


_TEMPLATES = [meta.message for meta in DCGM_ERROR_META.values() if meta.message]
_WORDS = sorted(
    {w for template in _TEMPLATES for w in re.findall(r"[A-Za-z0-9']+", template)} | {"12", "x"}
)


def test_every_template_formatted_gets_the_id_the_old_matcher_gave() -> None:
    for template in _TEMPLATES:
        for argument in ("0", "7", "12.50", "XID", "volatile DBE errors", ""):
            for advice in ("", " Run a field diagnostic on the GPU."):
                message = _formatted(template, argument) + advice
                assert message_error_id(message) == _reference_error_id(message), message


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    words=st.lists(st.sampled_from(_WORDS), max_size=24),
    glue=st.lists(st.sampled_from(["", " ", "'", ": ", "%", ". "]), min_size=1),
)
def test_word_soups_of_template_words_get_the_id_the_old_matcher_gave(
    words: list[str], glue: list[str]
) -> None:
    # Words glued together or apart: pieces starting inside a word, "%dX", "%.1f%%".
    message = "".join(word + glue[i % len(glue)] for i, word in enumerate(words))
    assert message_error_id(message) == _reference_error_id(message)


def test_only_the_head_of_a_message_is_matched() -> None:
    template = "GPU 2 had memory errors and row remappings are pending"
    assert message_error_id(template) == 85
    assert message_error_id("x" * (MAX_MATCHED_MESSAGE - len(template)) + " " + template) is None
    head = "y " * ((MAX_MATCHED_MESSAGE - len(template) - 8) // 2)
    assert message_error_id(head + template) == 85


def test_a_health_message_beyond_the_head_is_not_identified_by_the_loose_phrasings_either() -> None:
    near = "x" * 100 + " row remapping failed"
    far = "x" * MAX_MATCHED_MESSAGE + " row remapping failed"
    for message, error_id in ((near, 80), (far, None)):
        result = parse_dcgm_health(health_document(message), observed_at=NOW)
        assert [f.error_id for f in result.failures if isinstance(f, DcgmEvidence)] == [error_id]


# ------------------------------------------- the other rewritten patterns' results

_OLD_RECOVERY_CHANGE = re.compile(
    r"recovery action changed from 0x[0-9a-f]+.*? to 0x([0-9a-f]+)", re.I
)


@settings(max_examples=500, deadline=None, database=None, derandomize=True)
@given(
    st.lists(
        st.sampled_from(
            [
                "recovery action changed from 0x",
                "RECOVERY ACTION CHANGED FROM 0X",
                "0",
                "ff",
                "g",
                " to 0x",
                " TO 0X",
                " to ",
                "\n",
                " (None)",
            ]
        ),
        max_size=14,
    ).map("".join)
)
def test_the_recovery_action_of_an_xid_154_line_is_the_old_regexs(message: str) -> None:
    old = _OLD_RECOVERY_CHANGE.search(message)
    assert catalog.recovery_action_from_message(message) == (int(old.group(1), 16) if old else None)


def test_a_number_of_thousands_of_digits_is_no_id_and_no_error() -> None:
    digits = "9" * 5000  # Python refuses to convert more than 4300
    assert catalog.parse_message_xid(f"Xid {digits} on GPU 3") is None
    assert catalog.parse_message_dcgm(f"DCGM error {digits}") is None
    assert catalog.parse_message_xid(f"Xid 79 on GPU {digits}") == (79, None)
    assert catalog.parse_message_xid("Xid 0079 on GPU 03 (0000:53:00): x") == (79, 3)
    assert _gpu_named_in(f"GPU {digits} and GPU {digits}") is None
    assert _gpu_named_in("GPU 02 failed, GPU 2 again") == 2
    assert _gpu_named_in("GPU 2 and GPU 3") is None


@pytest.mark.parametrize(
    "stdout", ['{"body": ' + "9" * 5000 + "}", '{"body": ' + "[" * 5000 + "]" * 5000 + "}"]
)
def test_json_no_dcgm_tool_writes_is_unreadable_not_an_error(stdout: str) -> None:
    with pytest.raises(DiagnosticParseError, match="no DCGM tool writes"):
        parse_dcgm_health(stdout, observed_at=NOW)
    with pytest.raises(DiagnosticParseError, match="no DCGM tool writes"):
        parse_dcgm_diag(stdout, 0, observed_at=NOW)


def test_a_message_of_thousands_of_findings_is_written_in_bounded_time() -> None:
    notes = [Note(text=f"note {i} " + "y" * 50) for i in range(20_000)]
    write = functools.partial(format_message, [], max_bytes=1024, trailer=notes)
    timed("format_message of 20,000 notes", write)
    message = write()
    assert len(message) <= 1024
    assert message.startswith("note 0 ")
    assert message.endswith(" more")
