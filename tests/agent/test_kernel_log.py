"""The incremental kernel-log scanner: every line format, rotation, reboots, garbage, kmsg."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from agent.kernel_log import CHUNK, ScanOutcome, XidHit, normalize_bus, scan_kernel_log
from tests.agent.lines import (
    BANNER,
    BOOT_LINE,
    GPU_AT_LINE,
    GPU_OFF_BUS_LINE,
    NOISE,
    PREFIXES,
    SXID_FATAL,
    SXID_NON_FATAL,
    XID_LINES,
    Expected,
    kmsg,
    syslog,
)


def scan_file(path: Path, saved: dict[str, Any] | None, boot_changed: bool = False) -> ScanOutcome:
    return scan_kernel_log(
        "file", str(path), saved, boot_changed=boot_changed, deadline=time.monotonic() + 10
    )


def append(path: Path, text: str | bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(text.encode() if isinstance(text, str) else text)


def as_expected(hit: XidHit) -> Expected:
    return Expected(hit.xid, hit.bus, hit.gpu_instance, hit.compute_instance)


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
@pytest.mark.parametrize(("line", "expected"), XID_LINES, ids=[str(e.xid) for _, e in XID_LINES])
def test_every_xid_line_variant_is_read_with_every_prefix(
    tmp_path: Path, prefix: str, line: str, expected: Expected
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(NOISE[0], prefix) + syslog(line, prefix) + syslog(NOISE[1], prefix))
    outcome = scan_file(log, None)
    assert [as_expected(h) for h in outcome.xids] == [expected._replace(action=None)]


@pytest.mark.parametrize(("line", "expected"), XID_LINES, ids=[str(e.xid) for _, e in XID_LINES])
def test_every_xid_line_variant_is_read_from_kmsg_records(
    tmp_path: Path, line: str, expected: Expected
) -> None:
    dev = tmp_path / "kmsg"
    dev.write_text(kmsg(1, NOISE[0]) + kmsg(2, line) + kmsg(3, NOISE[1]))
    outcome = scan_kernel_log("kmsg", str(dev), None, boot_changed=False, deadline=time.time() + 9)
    assert [as_expected(h) for h in outcome.xids] == [expected._replace(action=None)]
    assert outcome.position["seq"] == 3


def test_the_message_tail_drops_pid_name_and_channel(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(XID_LINES[5][0]) + syslog(XID_LINES[4][0]))
    tails = [h.tail for h in scan_file(log, None).xids]
    assert tails == [
        "Contained: CE User Channel (0x9). RST: No, D-RST: No",
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
    ]


def test_gpu_at_line_and_noise_report_nothing(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(syslog(line) for line in [*NOISE, GPU_AT_LINE]))
    outcome = scan_file(log, None)
    assert (outcome.xids, outcome.sxids) == ([], [])


def test_fallen_off_the_bus_banner_is_xid_79_on_the_bus_it_names(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(syslog(line) for line in BANNER))
    [hit] = scan_file(log, None).xids
    assert (hit.xid, hit.bus, hit.banner) == (79, "0000:cb:00", True)


def test_banner_split_across_two_runs_keeps_its_bus(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(syslog(line) for line in BANNER[:2]))
    first = scan_file(log, None)
    assert first.xids == []
    append(log, syslog(BANNER[2]))
    [hit] = scan_file(log, first.position).xids
    assert (hit.xid, hit.bus) == (79, "0000:cb:00")


def test_gpu_fallen_off_the_bus_line_without_xid_is_xid_79(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(GPU_OFF_BUS_LINE))
    [hit] = scan_file(log, None).xids
    assert (hit.xid, hit.bus) == (79, "0000:3b:00")


def test_xid_79_line_is_one_hit_although_it_holds_both_tokens(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(XID_LINES[0][0]))
    assert len(scan_file(log, None).xids) == 1


def test_nvswitch_sxid_lines_are_read_with_their_severity(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(SXID_FATAL) + syslog(SXID_NON_FATAL))
    sxids = scan_file(log, None).sxids
    assert [(s.device, s.bus, s.code, s.fatal) for s in sxids] == [
        ("nvidia-nvswitch2", "0000:07:00", 12028, True),
        ("nvidia-nvswitch0", "0000:05:00", 20034, False),
    ]


def test_hits_come_back_in_log_order(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(
        syslog(BANNER[0]) + syslog(XID_LINES[3][0]) + "".join(syslog(b) for b in BANNER[1:])
    )
    assert [h.xid for h in scan_file(log, None).xids] == [48, 79]


def test_nothing_is_read_twice(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(XID_LINES[0][0]))
    first = scan_file(log, None)
    second = scan_file(log, first.position)
    assert (len(first.xids), second.xids, second.bytes_read) == (1, [], 0)
    append(log, syslog(XID_LINES[3][0]))
    third = scan_file(log, second.position)
    assert [h.xid for h in third.xids] == [48]
    assert third.bytes_read == len(syslog(XID_LINES[3][0]))


def test_truncated_last_line_is_kept_for_the_next_run(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    line = syslog(XID_LINES[0][0])
    log.write_text(syslog(NOISE[0]) + line[:40])
    first = scan_file(log, None)
    assert first.xids == []
    assert first.position["offset"] == len(syslog(NOISE[0]))
    append(log, line[40:])
    assert [h.xid for h in scan_file(log, first.position).xids] == [79]


def test_rotation_mid_read_finishes_the_old_file_then_reads_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(NOISE[0]))
    first = scan_file(log, None)
    # More lines reach the old file, then logrotate renames it and starts a new one.
    append(log, syslog(XID_LINES[3][0]))
    os.rename(log, tmp_path / "kern.log.1")
    log.write_text(syslog(XID_LINES[0][0]))
    second = scan_file(log, first.position)
    assert [h.xid for h in second.xids] == [48, 79]
    assert any("rotated" in note for note in second.notes)
    assert scan_file(log, second.position).xids == []


def test_rotated_file_that_is_gone_is_noted_and_the_new_file_read(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(NOISE[0]))
    first = scan_file(log, None)
    log.unlink()
    log.write_text(syslog(XID_LINES[0][0]))
    second = scan_file(log, first.position)
    assert [h.xid for h in second.xids] == [79]
    assert any("old file is gone" in note for note in second.notes)


def test_truncated_file_is_read_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(NOISE[0]) * 10)
    first = scan_file(log, None)
    log.write_text(syslog(XID_LINES[3][0]))  # copytruncate: same inode, smaller
    second = scan_file(log, first.position)
    assert [h.xid for h in second.xids] == [48]


def test_after_a_reboot_only_lines_of_the_new_boot_count(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(NOISE[0]))
    first = scan_file(log, None)
    # The old boot's last lines were never read; then the new boot starts.
    append(log, syslog(XID_LINES[3][0]) + syslog(BOOT_LINE) + syslog(XID_LINES[0][0]))
    second = scan_file(log, first.position, boot_changed=True)
    assert [h.xid for h in second.xids] == [79]


def test_first_run_reads_the_current_boot_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(
        syslog(BOOT_LINE) + syslog(XID_LINES[3][0]) + syslog(BOOT_LINE) + syslog(XID_LINES[0][0])
    )
    assert [h.xid for h in scan_file(log, None).xids] == [79]


def test_garbage_bytes_are_tolerated(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    garbage = bytes(range(256)) * 50 + b"\x00" * 4096 + b"\xff\xfe Xid (PCI:zz): x\n"
    long_line = b"A" * (CHUNK + 123) + b"\n"
    log.write_bytes(garbage + long_line + syslog(XID_LINES[0][0]).encode() + b"\x00\x00\n")
    outcome = scan_file(log, None)
    assert [h.xid for h in outcome.xids] == [79]
    assert outcome.position["offset"] == log.stat().st_size


def test_xid_line_across_a_read_boundary_is_found_once(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    noise = syslog(NOISE[2]).encode()
    filler = noise * (CHUNK // len(noise))
    line = syslog(XID_LINES[3][0]).encode()
    pad = CHUNK - len(filler) - len(line) // 2  # the Xid line straddles the 1 MiB mark
    log.write_bytes(filler + b"x" * (pad - 1) + b"\n" + line + noise * 10)
    assert [h.xid for h in scan_file(log, None).xids] == [48]


def test_kmsg_records_read_before_are_skipped_and_a_reboot_starts_over(tmp_path: Path) -> None:
    dev = tmp_path / "kmsg"
    dev.write_text(kmsg(1, XID_LINES[3][0]) + kmsg(2, NOISE[0]))

    def scan(saved: dict[str, Any] | None, boot_changed: bool = False) -> ScanOutcome:
        return scan_kernel_log("kmsg", str(dev), saved, boot_changed=boot_changed, deadline=1e12)

    first = scan(None)
    assert [h.xid for h in first.xids] == [48]
    dev.write_text(dev.read_text() + kmsg(3, XID_LINES[0][0]))
    second = scan(first.position)
    assert [h.xid for h in second.xids] == [79]
    assert scan(second.position).xids == []
    # After a reboot the ring buffer starts at sequence 1 again.
    dev.write_text(kmsg(1, XID_LINES[8][0]))
    assert [h.xid for h in scan(second.position, boot_changed=True).xids] == [119]


def test_kmsg_sequence_going_back_without_a_reboot_is_read_again(tmp_path: Path) -> None:
    dev = tmp_path / "kmsg"
    dev.write_text(kmsg(10, NOISE[0]))
    first = scan_kernel_log("kmsg", str(dev), None, boot_changed=False, deadline=1e12)
    dev.write_text(kmsg(1, XID_LINES[3][0]))
    second = scan_kernel_log("kmsg", str(dev), first.position, boot_changed=False, deadline=1e12)
    assert [h.xid for h in second.xids] == [48]
    assert any("went back" in note for note in second.notes)


def test_missing_kernel_log_is_an_error_naming_it(tmp_path: Path) -> None:
    from agent.kernel_log import KernelLogError

    with pytest.raises(KernelLogError, match=r"kern\.log"):
        scan_file(tmp_path / "kern.log", None)


@pytest.mark.parametrize(
    ("raw", "bus"),
    [
        ("00000000:53:00.0", "0000:53:00"),
        ("0000:B3:00.0", "0000:b3:00"),
        ("PCI:0000:53:00", "0000:53:00"),
        ("0000:53:00", "0000:53:00"),
    ],
)
def test_bus_ids_are_normalised(raw: str, bus: str) -> None:
    assert normalize_bus(raw) == bus


def test_a_log_flood_past_the_deadline_is_left_for_the_next_run(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(syslog(NOISE[0]))
    first = scan_file(log, None)
    append(log, syslog(NOISE[1]) * 20000 + syslog(XID_LINES[0][0]))
    late = scan_kernel_log(
        "file", str(log), first.position, boot_changed=False, deadline=time.monotonic() - 1
    )
    assert (late.xids, late.position["offset"]) == ([], first.position["offset"])
    assert any("deadline reached" in note for note in late.notes)
    assert [h.xid for h in scan_file(log, late.position).xids] == [79]
