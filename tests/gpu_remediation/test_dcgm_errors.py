"""DCGM's error table as data matches DCGM's own source (dcgm_errors.c / .h)."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_remediation import catalog
from gpu_remediation.dcgm_errors import DCGM_ERROR_META, DcgmSeverity
from gpu_remediation.models import FaultClass as FC

REAL = Path(__file__).parent / "fixtures" / "real"
_SEVERITY = {f"DCGM_ERROR_{s.name}": s for s in DcgmSeverity}


def _source() -> dict[int, tuple[str, DcgmSeverity]]:
    header = (REAL / "dcgm_errors.h.txt").read_text()
    ids = dict(re.findall(r"\b(DCGM_FR_(?!EC_)[A-Z0-9_]+)\s*=\s*(\d+)\s*,", header))
    table = (REAL / "dcgm_errors.c.txt").read_text()
    rows = re.findall(r"DCGM_ERROR_TABLE_ENTRY\((DCGM_FR_\w+),\s*(DCGM_ERROR_\w+),", table)
    return {int(ids[name]): (name.removeprefix("DCGM_FR_"), _SEVERITY[sev]) for name, sev in rows}


def test_every_dcgm_error_id_has_dcgms_own_name_and_severity() -> None:
    source = _source()
    assert len(source) == 133
    assert {i: (m.name, m.severity) for i, m in DCGM_ERROR_META.items()} == source


def test_an_id_without_a_project_row_takes_dcgms_severity() -> None:
    # 83: pending page retirements with a DBE, DCGM severity RESET.
    assert 83 not in catalog.DCGM_ERRORS
    assert catalog.dcgm_class(83, None)[0] == FC.GPU_RESET_REQUIRED
    # 102: single-bit error violation, ISOLATE on hardware memory.
    assert catalog.dcgm_class(102, None)[0] == FC.HARDWARE_FAILURE
    # 119: effective BER threshold, ISOLATE on NVLink.
    assert catalog.dcgm_class(119, None)[0] == FC.NVLINK_ERROR
    # 24: NVML library bad, ISOLATE but software: diagnose.
    assert catalog.dcgm_class(24, None)[0] == FC.UNKNOWN


def test_issue_18_ids_take_the_class_dcgm_and_nvidia_say() -> None:
    expected = {
        84: FC.ROW_REMAP_PENDING,
        132: FC.ROW_REMAP_FAILURE,
        **dict.fromkeys((52, 57, 58, 7, 8), FC.HARDWARE_FAILURE),
        **dict.fromkeys((13, 70, 71, 15, 109), FC.NVLINK_ERROR),
        **dict.fromkeys((29, 46, 112), FC.CONFIGURATION),
        127: FC.GPU_RESET_REQUIRED,
    }
    assert {i: catalog.dcgm_class(i, None)[0] for i in expected} == expected
