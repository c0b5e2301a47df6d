"""NVIDIA's whole Xid catalog is data, and no live code is missing (issue 18)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpu_remediation import catalog
from gpu_remediation.classifier import classify
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import XidEvidence
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.xid_catalog import NVIDIA_XID_CATALOG, XID_CATALOG_VERSION

SOURCE = Path(__file__).parent / "fixtures" / "real" / "nvidia_xid_catalog_via_gpud.txt"
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


NVIDIA_ROWS = _nvidia_rows()
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
    assert xid149("NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6)") == FC.NVLINK_ERROR
