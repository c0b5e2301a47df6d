"""The NPD condition message: what the agent writes is what the watcher reads."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpu_remediation import catalog
from gpu_remediation.models import DcgmEvidence, EfaEvidence, Evidence, XidEvidence
from gpu_remediation.npd_message import (
    Note,
    format_finding,
    format_message,
    parse_condition_message,
    split_findings,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def xid(code: int, gpu: int | None = 3, **kw: object) -> XidEvidence:
    kw.setdefault("pci_bus", "0000:53:00")
    return XidEvidence(observed_at=T0, source="kernel-log", xid=code, gpu_index=gpu, **kw)  # type: ignore[arg-type]


def dcgm(error_id: int | None, gpu: int | None = 2, test: str | None = "Memory") -> DcgmEvidence:
    return DcgmEvidence(
        observed_at=T0,
        source="dcgmi-health",
        check="health",
        error_id=error_id,
        gpu_index=gpu,
        test=test,
    )


def efa(check: str, device: str | None = None, message: str = "") -> EfaEvidence:
    return EfaEvidence(
        observed_at=T0, source="efa-check", check=check, device=device, message=message
    )  # type: ignore[arg-type]


def fields(e: Evidence) -> tuple[object, ...]:
    if isinstance(e, XidEvidence):
        return ("xid", e.xid, e.gpu_index, e.pci_bus, e.recovery_action)
    if isinstance(e, DcgmEvidence):
        return ("dcgm", e.check, e.error_id, e.gpu_index, e.test)
    assert isinstance(e, EfaEvidence)
    return ("efa", e.check, e.device)


def test_xid_finding_has_the_shape_of_the_issue_example() -> None:
    assert format_finding(xid(79)) == (
        "Xid 79 on GPU 3 (0000:53:00): GPU has fallen off the bus, reboot required"
    )


@pytest.mark.parametrize(
    "evidence",
    [
        xid(79),
        xid(13, gpu=None, pci_bus=None),
        xid(154, recovery_action=2),
        xid(95, recovery_action=1, message="GPU-I 1 GPU-CI 0, 2 times"),
        xid(777, gpu=0, pci_bus="0000:18:00"),
        dcgm(85),
        dcgm(None, gpu=None),
        dcgm(120, test="nvidia-smi"),
        efa("device_count", message="31 EFA devices, expected 32 (p5.48xlarge)"),
        efa("link", device="rdmap79s0/1", message="state DOWN, physical state Polling"),
        efa("provider"),
        efa("counters", device="rdmap80s0/1", message="rx_drops +5000"),
    ],
    ids=lambda e: e.key,
)
def test_every_finding_reads_back_as_the_same_evidence(evidence: Evidence) -> None:
    message = format_message([evidence], max_bytes=1024)
    [parsed] = parse_condition_message(message, observed_at=T0, source="npd")
    assert fields(parsed) == fields(evidence)
    assert parsed.message == message


def test_most_severe_finding_comes_first() -> None:
    message = format_message(
        [xid(13, gpu=1), dcgm(85), xid(79), efa("counters", message="rx_drops +5000")],
        max_bytes=1024,
    )
    items = split_findings(message)
    assert items[0].startswith("Xid 79 on GPU 3")
    assert items[-1].startswith(("Xid 13", "EFA counters"))
    # The classifier's own reading of a condition message sees the worst Xid.
    assert catalog.parse_message_xid(message) == (79, 3)


def test_findings_that_do_not_fit_are_counted() -> None:
    findings = [xid(code, gpu=i) for i, code in enumerate((79, 48, 95, 119, 13, 31))]
    message = format_message(findings, max_bytes=160)
    assert len(message.encode()) <= 160
    assert message.endswith(" more")
    assert len(parse_condition_message(message, observed_at=T0)) == len(split_findings(message))


def test_a_single_long_finding_is_shortened_but_keeps_its_head() -> None:
    message = format_message([efa("link", "rdmap79s0/1", "x" * 300)], max_bytes=60)
    assert len(message) <= 60
    assert message.startswith("EFA link (rdmap79s0/1): ")


def test_a_message_cut_anywhere_never_yields_a_wrong_code() -> None:
    message = format_message(
        [xid(79), xid(154, gpu=12, recovery_action=7), dcgm(85)], max_bytes=1024
    )
    whole = {fields(e) for e in parse_condition_message(message, observed_at=T0)}
    for cut in range(len(message)):
        for e in parse_condition_message(message[:cut], observed_at=T0):
            assert fields(e)[:3] in {f[:3] for f in whole}, message[:cut]


def test_notes_are_not_evidence_even_when_they_look_like_it() -> None:
    notes = [Note(text="GPU count 7, expected 8 (p5.48xlarge)"), Note(text="Xid 79 on GPU 1: x")]
    message = format_message(notes, max_bytes=1024)
    assert message == "GPU count 7, expected 8 (p5.48xlarge); note: Xid 79 on GPU 1: x"
    assert parse_condition_message(message, observed_at=T0) == []


def test_separators_and_non_ascii_in_text_cannot_break_the_grammar() -> None:
    message = format_message([efa("link", "rdma;0/1", "state; DOWN\u00e9\n")], max_bytes=1024)
    assert message == "EFA link (rdma,0/1): state, DOWN?"
    assert [fields(e) for e in parse_condition_message(message, observed_at=T0)] == [
        ("efa", "link", "rdma,0/1")
    ]


def test_out_of_range_values_are_not_evidence() -> None:
    assert parse_condition_message("Xid 79 on GPU 99 (0000:53:00): x", observed_at=T0) == []


def test_other_evidence_kinds_are_refused() -> None:
    from gpu_remediation.models import ManualEvidence

    with pytest.raises(ValueError, match="manual"):
        format_finding(ManualEvidence(observed_at=T0, source="cli", runbook="reboot"))


def test_tiny_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 40"):
        format_message([xid(79)], max_bytes=10)
