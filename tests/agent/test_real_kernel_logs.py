"""Real kernel-log captures (fixtures/real/, source on each first line) yield the right hits."""

from __future__ import annotations

import time
from pathlib import Path

from agent.kernel_log import ScanOutcome, scan_kernel_log

REAL = Path(__file__).parent / "fixtures" / "real"


def scan(tmp_path: Path, name: str, kind: str = "file") -> ScanOutcome:
    first, _, rest = (REAL / name).read_bytes().partition(b"\n")
    assert first.startswith(b"#"), f"{name}: the first line must name the source"
    target = tmp_path / "log"
    target.write_bytes(rest)
    deadline = time.time() + 10 if kind == "kmsg" else time.monotonic() + 10
    return scan_kernel_log(kind, str(target), None, boot_changed=False, deadline=deadline)


def xids(outcome: ScanOutcome) -> list[tuple[int, str]]:
    return [(h.xid, h.bus) for h in outcome.xids]


def test_a_kmsg_fallen_off_bus_banner_names_its_gpu(tmp_path: Path) -> None:
    outcome = scan(tmp_path, "klog_kmsg_derived_banner_fallen_nvsentinel155.txt", "kmsg")
    [hit] = outcome.xids
    assert (hit.xid, hit.bus, hit.banner) == (79, "0000:b3:00", True)


def test_a_dmesg_fallen_off_bus_banner_names_its_gpu(tmp_path: Path) -> None:
    [hit] = scan(tmp_path, "klog_dmesg_banner_fallen_nvsentinel155.txt").xids
    assert (hit.xid, hit.bus, hit.banner) == (79, "0000:b3:00", True)


def test_h100_xid_79_line_gpu_line_and_banner_all_name_one_gpu(tmp_path: Path) -> None:
    hits = scan(tmp_path, "klog_dmesg_h100_xid79_banner_blog.txt").xids
    assert {(h.xid, h.bus) for h in hits} == {(79, "0000:5d:00")}


def test_syslog_and_localized_journal_xid_79_are_read(tmp_path: Path) -> None:
    assert set(xids(scan(tmp_path, "klog_syslog_kernel_ts_xid79_blog.txt"))) == {(79, "0000:01:00")}
    assert set(xids(scan(tmp_path, "klog_journal_localized_xid79_blog.txt"))) == {
        (79, "0000:c2:00")
    }


def test_dmesg_T_gsp_timeouts_are_xid_119(tmp_path: Path) -> None:
    assert set(xids(scan(tmp_path, "klog_dmesgT_xid119_gsp_gpud.txt"))) == {(119, "0000:9b:00")}


def test_dmesg_ctime_xid_13_and_109_are_read_in_order(tmp_path: Path) -> None:
    codes = [x for x, _ in xids(scan(tmp_path, "klog_dmesg_ctime_xid13_109_gpud_pr46.txt"))]
    assert codes == [13, 13, 13, 109]


def test_gb200_fatal_nvlink5_xid_149_and_recovery_action_154_are_read(tmp_path: Path) -> None:
    hits = scan(tmp_path, "klog_dmesg_gb200_xid149_154_gpud.txt").xids
    assert [h.xid for h in hits] == [149, 154, 149, 154, 149, 149, 149]
    assert "Fatal" in hits[0].tail
    assert "to 0x4 (Drain and Reset)" in hits[1].tail


def test_old_driver_xid_31_and_32_are_read(tmp_path: Path) -> None:
    codes = [x for x, _ in xids(scan(tmp_path, "klog_dmesg_old_xid31_32_bumblebee677.txt"))]
    assert codes == [32, 32, 31]


def test_mig_xid_94_keeps_its_gpu_instance_and_95_is_read(tmp_path: Path) -> None:
    hits = scan(tmp_path, "klog_driver_src_mig_94_95.txt").xids
    assert [(h.xid, h.gpu_instance) for h in hits] == [(94, 5), (94, None), (95, None)]


def test_journal_xid_45_lines_name_the_causing_xid(tmp_path: Path) -> None:
    hits = scan(tmp_path, "klog_journal_xid45_ogkm1150.txt").xids
    assert [h.xid for h in hits] == [45, 45, 45, 45]
    assert "caused by previous Xid 149" in hits[0].tail


def test_syslog_xid_63_row_remapper_line_is_read(tmp_path: Path) -> None:
    [hit] = scan(tmp_path, "klog_syslog_xid63_mlengineering.txt").xids
    assert hit.xid == 63
    assert "Row Remapper" in hit.tail


def test_fatal_nvswitch_sxid_20034_and_xid_79_on_one_host(tmp_path: Path) -> None:
    outcome = scan(tmp_path, "klog_dmesg_xid79_sxid20034_gpud.txt")
    assert set(xids(outcome)) == {(79, "0000:91:00")}
    assert {(s.code, s.fatal) for s in outcome.sxids} == {(20034, True)}


def test_non_fatal_sxid_22013_is_read_as_non_fatal(tmp_path: Path) -> None:
    sxids = scan(tmp_path, "klog_dmesg_sxid22013_nvtrust124.txt").sxids
    assert {(s.code, s.fatal, s.bus) for s in sxids} == {(22013, False, "0000:04:00")}


def test_an_sxid_data_continuation_line_is_not_a_second_event(tmp_path: Path) -> None:
    # gpud#338 quotes only the "12028, Data {...}" line of a multi-line report;
    # the 20034 capture above shows such lines follow the event's own line.
    outcome = scan(tmp_path, "klog_dmesg_iso_sxid12028_gpud_pr338.txt")
    assert (outcome.xids, outcome.sxids) == ([], [])


def test_gb200_nvlink5_lines_the_driver_marks_nonfatal_are_read_with_their_severity(
    tmp_path: Path,
) -> None:
    hits = scan(tmp_path, "klog_dmesg_gb200_nvlink5_nonfatal_gpud.txt").xids
    assert [(h.xid, h.bus) for h in hits] == [
        (149, "0018:01:00"),
        (145, "0018:01:00"),
        (145, "0019:01:00"),
        (149, "0008:01:00"),
        (145, "0019:01:00"),
        (149, "0019:01:00"),
    ]
    assert hits[1].tail.startswith("RLW_RXPIPE Nonfatal XC0 i0 Link 13")  # pid=, name= dropped
    assert [h.tail.split()[1] for h in hits] == ["Nonfatal"] * 5 + ["Fatal"]
