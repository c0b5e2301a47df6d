"""NVIDIA's whole Xid catalog is data, no live code is missing (issue 18), and every
row of the Xid table cites the cell of the catalog it follows or says why it departs
(issue 33)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_remediation import catalog
from gpu_remediation.classifier import classify
from gpu_remediation.models import DcgmEvidence, Rung, XidEvidence
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.xid_catalog import (
    NVIDIA_XID_CATALOG,
    SOURCE_BUCKETS,
    SOURCE_DESCRIPTION,
    SOURCE_IMMEDIATE,
    SOURCE_NVLINK5_DECODE,
    SOURCE_PROJECT,
    SOURCE_TRIGGER,
    SOURCES,
    XID_CATALOG_VERSION,
)

FIXTURES = Path(__file__).parent / "fixtures" / "real"
SOURCE = FIXTURES / "nvidia_xid_catalog_via_gpud.txt"
# NVIDIA's workbook itself (the sheet "Xids" and the NVLink5 decode), as tab-separated text.
WORKBOOK = FIXTURES / "nvidia_xid_catalog_workbook_xids.tsv"
NVLINK5_DECODE = FIXTURES / "nvidia_xid_144_150_decode.tsv"
_ROW = re.compile(
    r'\{Code: (\d+), Mnemonic: "(?:[^"\\]|\\.)*", Description: "((?:[^"\\]|\\.)*)", '
    r'ImmediateResolution: "((?:[^"\\]|\\.)*)"'
)
POLICY = load_policy()
NOW = datetime(2026, 12, 4, tzinfo=UTC)
# The project's one deliberate departure from NVIDIA's IGNORE (catalog.py says why).
QUARANTINING_IGNORE = {63}


def _nvidia_rows() -> dict[int, tuple[str, str]]:
    text = SOURCE.read_text().split("var catalogEntries")[1].split("\n}\n")[0]
    return {int(code): (desc, action) for code, desc, action in _ROW.findall(text)}


def _tsv(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# source: ")
    return [line.split("\t") for line in lines[2:]]  # after the source line and the header


NVIDIA_ROWS = _nvidia_rows()
# code -> (mnemonic, description, immediate, investigatory, trigger conditions)
WORKBOOK_ROWS = {int(row[0]): tuple(row[1:]) for row in _tsv(WORKBOOK)}
# (xid, subcode, error status, resolution, action 2, severity)
DECODE_ROWS: list[tuple[int, str, str, str, str, str]] = [
    (int(xid), subcode, status, resolution, action2, severity)
    for xid, subcode, status, resolution, action2, severity in _tsv(NVLINK5_DECODE)
]
LIVE = {code for code, (desc, _) in NVIDIA_ROWS.items() if desc != "Unused"}
APP_OR_IGNORE = sorted(code for code in LIVE if NVIDIA_ROWS[code][1] in ("RESTART_APP", "IGNORE"))


def test_the_source_copy_lists_172_codes_of_which_109_are_live() -> None:
    assert (len(NVIDIA_ROWS), len(LIVE)) == (172, 109)


def test_no_live_code_of_nvidias_catalog_is_missing_from_the_table() -> None:
    assert set(NVIDIA_XID_CATALOG) == LIVE
    assert set(catalog.XID_TABLE) == LIVE


def test_every_code_keeps_nvidias_immediate_action() -> None:
    for code in LIVE:
        assert NVIDIA_XID_CATALOG[code].immediate == NVIDIA_ROWS[code][1].replace("\\n", " / ")


def test_the_catalog_says_which_version_it_is() -> None:
    assert "2025-10-29" in XID_CATALOG_VERSION


@given(st.sampled_from(APP_OR_IGNORE), st.integers(0, 7))
def test_a_restart_app_or_ignore_xid_never_quarantines_a_node_on_its_own(
    xid: int, gpu: int
) -> None:
    result = classify([XidEvidence(observed_at=NOW, source="t", xid=xid, gpu_index=gpu)], POLICY)
    if xid in QUARANTINING_IGNORE:
        assert result.fault_class == FC.ROW_REMAP_PENDING
    else:
        assert result.start_rung is None, result.reasons


def test_copy_engine_decoder_and_jpeg_exceptions_are_application_faults() -> None:
    for xid in (39, 70, 75, 83, 86, 99, 126, 139):
        assert catalog.xid_info(xid).fault_class == FC.APPLICATION  # type: ignore[union-attr]


def test_new_non_application_codes_have_a_class_that_acts() -> None:
    assert catalog.xid_info(167).fault_class == FC.REBOOT_REQUIRED  # type: ignore[union-attr]
    for xid in (169, 171, 172):
        assert catalog.xid_info(xid).fault_class == FC.GPU_RESET_REQUIRED  # type: ignore[union-attr]


def test_a_nonfatal_nvlink5_xid_is_informational_and_a_fatal_one_acts() -> None:
    def xid149(tail: str) -> FC:
        e = XidEvidence(observed_at=NOW, source="t", xid=149, gpu_index=0, message=tail)
        return classify([e], POLICY).fault_class

    assert xid149("NETIR_BER_EVENT  Nonfatal  XC0 i0 Link 01 (0x0)") == FC.INFORMATIONAL
    # Issue 33: NVIDIA's decode says RESET_GPU for a fatal one (was nvlink_error).
    assert xid149("NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6)") == FC.GPU_RESET_REQUIRED


# ------------------------------------------------ issue 33: each row cites its source


def _cited(xid: int) -> tuple[str, str]:
    label, _, says = catalog.XID_TABLE[xid].source.partition(": ")
    return label, says


def _start(fault_class: FC) -> Rung | None:
    return POLICY.fault_class(fault_class).start_rung


def _xid(xid: int, message: str = "", recovery_action: int | None = None) -> XidEvidence:
    return XidEvidence(
        observed_at=NOW,
        source="t",
        xid=xid,
        gpu_index=4,
        message=message,
        recovery_action=recovery_action,
    )


def test_the_workbook_and_the_copy_agree_on_every_live_codes_actions() -> None:
    live = {code for code, row in WORKBOOK_ROWS.items() if row[1] != "Unused"}
    assert len(WORKBOOK_ROWS) == 172
    assert live == set(NVIDIA_XID_CATALOG)
    for code in live:
        entry = NVIDIA_XID_CATALOG[code]
        assert WORKBOOK_ROWS[code][2:4] == (entry.immediate, entry.investigatory), code


def test_every_xid_row_cites_a_source() -> None:
    for xid, info in catalog.XID_TABLE.items():
        label, says = _cited(xid)
        assert label in SOURCES, (xid, info.source)
        assert says.strip(), (xid, info.source)


def test_a_row_citing_nvidias_immediate_action_quotes_the_codes_own() -> None:
    citing = [xid for xid in catalog.XID_TABLE if _cited(xid)[0] == SOURCE_IMMEDIATE]
    assert len(citing) > 80
    for xid in citing:
        assert _cited(xid)[1] == (WORKBOOK_ROWS[xid][2] or "none"), xid


def test_a_row_following_nvidias_immediate_action_starts_where_that_action_starts() -> None:
    wrong = {
        xid: (info.fault_class, info.action)
        for xid, info in catalog.XID_TABLE.items()
        if _cited(xid)[0] == SOURCE_IMMEDIATE
        and _start(info.fault_class) != _start(catalog.ACTION_CLASSES[info.action])
    }
    assert wrong == {}


def test_a_row_citing_a_resolution_bucket_names_the_codes_bucket() -> None:
    citing = [xid for xid in catalog.XID_TABLE if _cited(xid)[0] == SOURCE_BUCKETS]
    assert sorted(citing) == [48, 154]
    for xid in citing:
        assert _cited(xid)[1].split(",")[0] == WORKBOOK_ROWS[xid][2]


def test_a_row_citing_a_description_or_trigger_conditions_quotes_the_workbook() -> None:
    for xid in catalog.XID_TABLE:
        label, says = _cited(xid)
        if label == SOURCE_DESCRIPTION:
            assert says.split(" (")[0] in WORKBOOK_ROWS[xid][1], xid
        elif label == SOURCE_TRIGGER:
            assert says in WORKBOOK_ROWS[xid][4], xid


def test_the_projects_departures_from_the_catalog_are_the_known_few() -> None:
    # 45: no Fabric Manager rung; 63: reset to apply the remap; 167/169: no action given.
    departing = {xid for xid in catalog.XID_TABLE if _cited(xid)[0] == SOURCE_PROJECT}
    assert departing == {45, 63, 167, 169}


@pytest.mark.parametrize("xid", [119, 120])
def test_a_gsp_xid_starts_at_a_gpu_reset_and_may_climb_to_a_power_cycle(xid: int) -> None:
    _mnemonic, _description, immediate, _investigatory, trigger = WORKBOOK_ROWS[xid]
    assert immediate == "RESET_GPU"
    assert "A GPU reset or node power cycle may be needed if the error persists" in trigger
    result = classify([_xid(xid, "Timeout waiting for RPC from GSP!")], POLICY)
    assert result.fault_class == FC.GPU_RESET_REQUIRED
    assert result.start_rung == Rung.GPU_RESET
    assert result.max_rung.order >= Rung.REBOOT.order
    assert catalog.XID_TABLE[xid].source == f"{SOURCE_IMMEDIATE}: RESET_GPU"


@pytest.mark.parametrize("xid", [119, 120])
def test_dcgm_reporting_a_gsp_xid_starts_at_a_gpu_reset(xid: int) -> None:
    message = f"Detected XID {xid} for GPU 4 Please consult the documentation for details"
    e = DcgmEvidence(
        observed_at=NOW,
        source="t",
        check="health",
        error_id=catalog.DCGM_XID_ERROR,
        gpu_index=4,
        message=message,
    )
    result = classify([e], POLICY)
    assert (result.fault_class, result.start_rung) == (FC.GPU_RESET_REQUIRED, Rung.GPU_RESET)


def test_nvidias_nvlink5_decode_resets_a_fatal_unit_error_and_ignores_a_nonfatal_one() -> None:
    assert {row[0] for row in DECODE_ROWS} == set(range(144, 151))
    for xid, subcode, status, resolution, _action2, severity in DECODE_ROWS:
        row = (xid, subcode, status, severity)
        if severity.lower().startswith("non-fatal"):
            assert resolution in ("IGNORE", "XID_154_EVAL"), row
        else:
            assert "Fatal" in severity, row
            assert resolution in ("RESET_GPU", "IGNORE"), row
    fatal_rows = [row for row in DECODE_ROWS if "non" not in row[5].lower()]
    assert {row[0] for row in fatal_rows} == {144, 145, 146, 149, 150}  # 147, 148: non-fatal only
    for xid in (144, 145, 146, 149, 150):
        assert "RESET_GPU" in {row[3] for row in fatal_rows if row[0] == xid}, xid


@pytest.mark.parametrize("xid", range(144, 151))
def test_an_nvlink5_xid_resets_when_fatal_and_only_notifies_when_not(xid: int) -> None:
    assert _cited(xid)[0] == SOURCE_NVLINK5_DECODE
    fatal = classify([_xid(xid, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6)")], POLICY)
    nonfatal = classify([_xid(xid, "NETIR_BER_EVENT  Nonfatal  XC0 i0 Link 01 (0x0)")], POLICY)
    assert (fatal.fault_class, fatal.start_rung) == (FC.GPU_RESET_REQUIRED, Rung.GPU_RESET)
    assert (nonfatal.fault_class, nonfatal.start_rung) == (FC.INFORMATIONAL, None)


def test_a_real_gb200_fatal_xid_149_with_drain_and_reset_starts_at_a_gpu_reset() -> None:
    # klog_dmesg_gb200_xid149_154_gpud: the driver itself asks for a drain and reset.
    burst = [
        _xid(149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000)"),
        _xid(
            154,
            "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
            recovery_action=4,
        ),
    ]
    result = classify(burst, POLICY)
    assert (result.fault_class, result.start_rung) == (FC.GPU_RESET_REQUIRED, Rung.GPU_RESET)
