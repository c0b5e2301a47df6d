"""Kernel-log hits become Xid problems: GPU index, recovery action, repeats, informational Xids."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config import load_config
from agent.cycle import sxid_problems, xid_problems
from agent.findings import render
from agent.kernel_log import XidHit, scan_kernel_log
from gpu_remediation.catalog import NPD_GPU_CONDITION
from gpu_remediation.classifier import classify
from gpu_remediation.models import ConditionEvidence, FaultClass, XidEvidence
from gpu_remediation.npd_message import parse_condition_message
from gpu_remediation.policy_loader import load_policy
from tests.agent.lines import INDEX, SXID_FATAL, SXID_NON_FATAL, XID_LINES, Expected, syslog

CONFIG = load_config(env={})


def hits_of(tmp_path: Path, text: str) -> list[XidHit]:
    log = tmp_path / "kern.log"
    log.write_text(text)
    return scan_kernel_log("file", str(log), None, boot_changed=False, deadline=1e18).xids


@pytest.mark.parametrize(("line", "expected"), XID_LINES, ids=[str(e.xid) for _, e in XID_LINES])
def test_each_line_names_its_gpu_and_the_drivers_recovery_action(
    tmp_path: Path, line: str, expected: Expected
) -> None:
    problems, _, _ = xid_problems(hits_of(tmp_path, syslog(line)), INDEX, CONFIG, time.time())
    [problem] = problems
    assert (problem.xid, problem.gpu_index, problem.pci_bus, problem.recovery_action) == (
        expected.xid,
        INDEX[expected.bus],
        expected.bus,
        expected.action,
    )
    if expected.gi is not None:
        assert f"GPU-I {expected.gi}" in problem.text


def test_repeats_in_one_cycle_are_one_problem_that_counts_them(tmp_path: Path) -> None:
    hits = hits_of(tmp_path, syslog(XID_LINES[3][0]) * 3)
    problems, log, _ = xid_problems(hits, INDEX, CONFIG, time.time())
    assert [(p.xid, p.text) for p in problems] == [(48, "3 times")]
    assert log == [
        "Xid 48 on 0000:b3:00 x3: An uncorrectable double bit error (DBE) has been detected on "
        "GPU in the framebuffer at partition 6, subpartition 0."
    ]


def test_recovery_action_back_to_none_clears_instead_of_reporting(tmp_path: Path) -> None:
    line = "NVRM: Xid (PCI:0000:db:00): 154, GPU recovery action changed from 0x2 (Node Reboot "
    line += "Required) to 0x0 (None)"
    problems, _, cleared = xid_problems(hits_of(tmp_path, syslog(line)), INDEX, CONFIG, 0.0)
    assert (problems, cleared) == ([], ["xid/154/7"])


def test_informational_xids_are_only_logged_unless_asked_for(tmp_path: Path) -> None:
    hits = hits_of(tmp_path, syslog("NVRM: Xid (PCI:0000:18:00): 92, High single-bit ECC error"))
    assert xid_problems(hits, INDEX, CONFIG, 0.0)[0] == []
    wanted = load_config(env={"REMEDIATE_AGENT_REPORT_INFORMATIONAL_XIDS": "true"})
    assert [p.xid for p in xid_problems(hits, INDEX, wanted, 0.0)[0]] == [92]


def test_unknown_bus_keeps_the_bus_without_a_gpu_index(tmp_path: Path) -> None:
    hits = hits_of(tmp_path, syslog("NVRM: Xid (PCI:0000:e1:00): 79, GPU has fallen off the bus."))
    [problem] = xid_problems(hits, INDEX, CONFIG, 0.0)[0]
    assert (problem.gpu_index, problem.pci_bus) == (None, "0000:e1:00")


def test_only_fatal_nvswitch_errors_are_problems(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(SXID_FATAL) + syslog(SXID_NON_FATAL))
    sxids = scan_kernel_log("file", str(log), None, boot_changed=False, deadline=1e18).sxids
    problems, log_lines = sxid_problems(sxids, 0.0)
    assert [p.text for p in problems] == [
        "NVSwitch nvidia-nvswitch2 (0000:07:00) SXid 12028 fatal: Link 33 egress non-posted "
        "PRIV error"
    ]
    assert len(log_lines) == 2


# ------------------------------------------- issue 37: NVLink5 Xids the driver marks Nonfatal

_NVLINK5 = (
    Path(__file__).parent / "fixtures" / "real" / "klog_dmesg_gb200_nvlink5_nonfatal_gpud.txt"
)


def _gb200_hits(tmp_path: Path) -> list[XidHit]:
    # Real GB200 lines (gpud's production examples): four GPUs, five Nonfatal, one Fatal.
    _, _, lines = _NVLINK5.read_text().partition("\n")
    return hits_of(tmp_path, lines)


def test_nonfatal_nvlink5_xids_are_only_logged_and_a_fatal_one_is_a_problem(
    tmp_path: Path,
) -> None:
    problems, log, _ = xid_problems(_gb200_hits(tmp_path), {}, CONFIG, 0.0)
    assert [(p.xid, p.pci_bus, p.text) for p in problems] == [(149, "0019:01:00", "")]
    assert len(log) == 5  # every (Xid, GPU) is still logged


def test_reported_nonfatal_nvlink5_xids_stay_informational_through_the_condition_message(
    tmp_path: Path,
) -> None:
    wanted = load_config(env={"REMEDIATE_AGENT_REPORT_INFORMATIONAL_XIDS": "true"})
    problems, _, _ = xid_problems(_gb200_hits(tmp_path), {}, wanted, 0.0)
    texts = {(p.xid, p.pci_bus): p.text for p in problems}
    assert texts[(145, "0018:01:00")] == "RLW_RXPIPE Nonfatal"
    assert texts[(145, "0019:01:00")] == "RLW_SRC_TRACK Nonfatal, 2 times"
    assert texts[(149, "0019:01:00")] == ""  # the Fatal one names no severity word
    policy = load_policy()
    _, message = render(problems, [], ok_text="ok", max_bytes=4096)
    assert message.startswith("Xid 149 (0019:01:00): NVLink5 error, ")  # the Fatal one first
    assert "Xid 145 (0018:01:00): NVLink5 error (RLW_RXPIPE Nonfatal), no action needed" in message
    verdicts = {
        (e.xid, e.pci_bus): classify([e], policy).fault_class
        for e in parse_condition_message(message, observed_at=datetime.now(UTC))
        if isinstance(e, XidEvidence)
    }
    assert verdicts == {
        (149, "0019:01:00"): FaultClass.GPU_RESET_REQUIRED,
        (145, "0018:01:00"): FaultClass.INFORMATIONAL,
        (145, "0019:01:00"): FaultClass.INFORMATIONAL,
        (149, "0018:01:00"): FaultClass.INFORMATIONAL,
        (149, "0008:01:00"): FaultClass.INFORMATIONAL,
    }
    # The watcher's condition, when a Nonfatal one is all it names, is no fault either.
    nonfatal_only = [p for p in problems if p.text.startswith(("RLW", "NETIR_BER"))]
    _, quiet = render(nonfatal_only, [], ok_text="ok", max_bytes=4096)
    condition = ConditionEvidence(
        observed_at=datetime.now(UTC),
        source="test",
        type=NPD_GPU_CONDITION,
        status="True",
        reason="GpuHealthCheckFailed",
        message=quiet,
    )
    assert classify([condition], policy).fault_class == FaultClass.INFORMATIONAL
