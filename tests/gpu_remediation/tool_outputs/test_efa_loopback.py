"""The EFA loopback's report is read as fi_pingpong prints it and judged per device (issue 37).

The tables come from real output (AWS's efa_test.sh in aws/aws-cdi-sdk's install
guide) or are built with fi_pingpong's own format strings (``src_`` fixtures);
each fixture names its source on its first line.
"""

from __future__ import annotations

import pytest

from gpu_remediation.classifier import classify
from gpu_remediation.contracts import EfaLoopbackResult
from gpu_remediation.host_command import EFA_COUNTERS, EFA_REPORT
from gpu_remediation.models import EfaEvidence
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.tool_outputs.efa_loopback import (
    MAX_DEVICES,
    MAX_ROWS,
    PingpongRow,
    judge_efa_loopback,
    parse_efa_loopback,
    parse_pingpong_row,
)
from tests.gpu_remediation.tool_outputs.support import NOW, real

REAL_TABLE = "efa_test_sh_loopback_cdisdk.txt"
ROW_1M = "1m      10k     =10k     19g         1.75s  12000.00      87.38       0.01"


def device(
    name: str,
    output: str = ROW_1M,
    exit_code: int | None = 0,
    retrans: tuple[int | str, int | str] = (12, 12),
    drops: tuple[int | str, int | str] = (0, 0),
) -> str:
    """One device's part of the report, as the host script writes it."""
    lines = [f"{EFA_REPORT} device {name}"]
    lines += [f"{EFA_REPORT} before {EFA_COUNTERS[0]} {retrans[0]}".rstrip()]
    lines += [f"{EFA_REPORT} before {EFA_COUNTERS[1]} {drops[0]}".rstrip()]
    lines += [output.rstrip("\n")]
    if exit_code is not None:
        lines += [f"{EFA_REPORT} exit {exit_code}"]
        lines += [f"{EFA_REPORT} after {EFA_COUNTERS[0]} {retrans[1]}".rstrip()]
        lines += [f"{EFA_REPORT} after {EFA_COUNTERS[1]} {drops[1]}".rstrip()]
    return "\n".join(lines) + "\n"


def judge(report: str, max_counter_increase: int = 100, fraction: float = 0.5) -> EfaLoopbackResult:
    return judge_efa_loopback(
        report,
        max_counter_increase=max_counter_increase,
        min_bandwidth_fraction=fraction,
        observed_at=NOW,
    )


def failed_devices(
    report: str, max_counter_increase: int = 100, fraction: float = 0.5
) -> dict[str | None, str]:
    result = judge(report, max_counter_increase, fraction)
    assert result.passed == (not result.failures)
    found: dict[str | None, str] = {}
    for evidence in result.failures:
        assert isinstance(evidence, EfaEvidence)
        assert (evidence.check, evidence.source) == ("loopback", "efa-loopback")
        found[evidence.device] = evidence.message
    return found


# ------------------------------------------------------------ fi_pingpong's table


def test_aws_efa_test_sh_output_reads_as_six_acknowledged_sizes() -> None:
    rows = [r for r in map(parse_pingpong_row, real(REAL_TABLE).splitlines()) if r]
    assert [r.size for r in rows] == [64, 256, 1024, 4096, 65536, 1 << 20]
    assert all((r.sent, r.unacknowledged) == (10, 0) for r in rows)
    assert rows[-1].mb_per_s == 2359.00


def test_counts_and_sizes_read_with_fi_pingpong_s_units() -> None:
    assert parse_pingpong_row(ROW_1M) == PingpongRow(1 << 20, 10_000, 0, 12000.0)
    row = parse_pingpong_row(
        "1.5k    2m      =2m      5.7g        9.10s   1320.41       2.27       0.44"
    )
    assert row == PingpongRow(1536, 2_000_000, 0, 1320.41)


def test_the_ack_column_tells_lost_and_extra_acknowledgements_apart() -> None:
    lost = real("efa_pingpong_src_unacknowledged.txt").splitlines()[1]
    assert parse_pingpong_row(lost) == PingpongRow(1 << 20, 10_000, 37, 5957.82)
    extra = "64      10      -2       1.2k        0.00s      1.77      36.25       0.03"
    assert parse_pingpong_row(extra) == PingpongRow(64, 10, -2, 1.77)
    plain = "64      10      8        1.2k        0.00s      1.77      36.25       0.03"
    assert parse_pingpong_row(plain) == PingpongRow(64, 10, 2, 1.77)


@pytest.mark.parametrize(
    "line",
    [
        "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec",
        "Starting client...",
        "1m      10k     =10k     19g         1.75   12000.00      87.38       0.01",  # no 's'
        "1m      10k     =10k     19g         1.75s  12000.00      87.38",  # a field short
        "1m      10k     =10k     19g         1.75s  12000.00      87.38       0.01  x",
        "1q      10k     =10k     19g         1.75s  12000.00      87.38       0.01",
        "1m      " + "9" * 40 + " =10k 19g 1.75s 12000.00 87.38 0.01",
        "1m      10k     =10k     19g         1.75s  " + "1" * 33 + " 87.38 0.01",
        "1m      10k     =10k     19g         1.75s  1e400      87.38       0.01",
        "1m      10k     =10k     19g         1.75s  ١٢       87.38       0.01",  # not ASCII
    ],
)
def test_anything_but_a_result_row_is_not_read_as_one(line: str) -> None:
    assert parse_pingpong_row(line) is None


# --------------------------------------------------------------- the report


def test_healthy_devices_pass_with_the_median_in_the_summary() -> None:
    report = "".join(device(f"rdmap{n}s0") for n in (79, 80, 81))
    result = judge(report)
    assert result.passed
    assert result.summary == ("EFA loopback under load: 3 devices, 0 failed (median 12,000 MB/s)")


def test_the_real_table_in_a_report_passes() -> None:
    table = real(REAL_TABLE)
    [run] = parse_efa_loopback(device("rdmap0s31", output=table))
    assert (run.device, run.exit_code, len(run.rows)) == ("rdmap0s31", 0, 6)
    assert run.before == {"retrans_timeout_events": 12, "rx_drops": 0}
    assert run.messages == ["Starting server...", "Starting client..."]
    assert failed_devices(device("rdmap0s31", output=table)) == {}


def test_unacknowledged_messages_fail_the_device_with_the_count() -> None:
    lossy = device("rdmap80s0", output=real("efa_pingpong_src_unacknowledged.txt"))
    found = failed_devices(device("rdmap79s0") + lossy)
    assert found == {
        "rdmap80s0": "EFA loopback under load failed: 37 of 10,000 messages not acknowledged"
    }


def test_a_counter_rising_past_the_allowance_fails_and_one_at_it_passes() -> None:
    at = device("rdmap79s0", retrans=(12, 112))
    over = device("rdmap80s0", retrans=(12, 113))
    drops = device("rdmap81s0", drops=(0, 101))
    found = failed_devices(at + over + drops)
    assert list(found) == ["rdmap80s0", "rdmap81s0"]
    assert "retrans_timeout_events rose by 101 under the load (more than 100)" in found["rdmap80s0"]
    assert "rx_drops rose by 101" in found["rdmap81s0"]
    assert failed_devices(over, max_counter_increase=101) == {}


def test_a_counter_that_went_down_or_is_unreadable_is_not_judged_but_named() -> None:
    reset = device("rdmap79s0", retrans=(5000, 3))
    unreadable = device("rdmap80s0", drops=("", ""))
    result = judge(reset + unreadable)
    assert result.passed
    assert "counters not readable: rx_drops" in result.summary


def test_a_device_far_below_its_siblings_fails_and_two_devices_are_not_compared() -> None:
    slow = ROW_1M.replace("12000.00", " 5000.00")
    report = device("rdmap79s0") + device("rdmap80s0") + device("rdmap81s0", output=slow)
    found = failed_devices(report)
    assert list(found) == ["rdmap81s0"]
    assert (
        "5,000 MB/s, below 50% of the median 12,000 MB/s of the node's 3 devices"
        in (found["rdmap81s0"])
    )
    assert failed_devices(report, fraction=0.4) == {}
    assert failed_devices(device("rdmap79s0") + device("rdmap81s0", output=slow)) == {}


def test_a_client_that_failed_or_timed_out_fails_with_what_it_said() -> None:
    getinfo = real("efa_pingpong_src_getinfo_enodata.txt")
    report = device("rdmap79s0", output=getinfo, exit_code=61) + device(
        "rdmap80s0", output="", exit_code=124
    )
    found = failed_devices(report)
    assert found["rdmap79s0"] == (
        "EFA loopback under load failed: fi_pingpong exited 61: "
        "fi_getinfo(): util/pingpong.c:1893, ret=-61 (No data available)"
    )
    assert found["rdmap80s0"].endswith("fi_pingpong did not finish within 30 s")


def test_a_device_with_no_result_row_or_no_exit_fails() -> None:
    report = device("rdmap79s0", output="Starting client...") + device("rdmap80s0", exit_code=None)
    found = failed_devices(report)
    assert found["rdmap79s0"].endswith("fi_pingpong printed no result: Starting client...")
    assert found["rdmap80s0"].endswith("the report ends before its test did")


def test_no_efa_device_fails_and_a_host_without_fi_pingpong_is_not_a_verdict() -> None:
    nothing = judge("")
    assert not nothing.passed
    assert nothing.ran
    assert failed_devices("") == {
        None: "EFA loopback under load failed: no EFA device found on the host"
    }
    missing = "timeout: failed to run command 'fi_pingpong': No such file or directory"
    result = judge(
        device("rdmap79s0", output=missing, exit_code=127)
        + device("rdmap80s0", output=missing, exit_code=127)
    )
    assert (result.passed, result.ran, result.failures) == (False, False, [])
    assert result.summary == f"EFA loopback not run: {missing}"


def test_a_failed_loopback_classifies_as_a_slow_efa_port() -> None:
    result = judge(device("rdmap79s0", retrans=(0, 500)))
    assert classify(result.failures, load_policy()).fault_class == FC.EFA_DEGRADED


# ----------------------------------------------------------- hostile reports


def test_a_device_name_that_is_not_a_name_is_not_repeated() -> None:
    [run] = parse_efa_loopback(device("$(reboot);x"))
    assert run.device == "unnamed"
    [run] = parse_efa_loopback(device("a" * 65))
    assert run.device == "unnamed"


def test_devices_past_the_limit_are_not_read() -> None:
    report = "".join(device(f"d{n}") for n in range(MAX_DEVICES + 5))
    runs = parse_efa_loopback(report)
    assert len(runs) == MAX_DEVICES
    assert runs[-1].device == f"d{MAX_DEVICES - 1}"


def test_report_lines_that_are_not_ours_change_nothing() -> None:
    junk = "\n".join(
        [
            f"{EFA_REPORT} exit 99999",
            f"{EFA_REPORT} before not_a_counter 5",
            f"{EFA_REPORT} after retrans_timeout_events {'9' * 30}",
            f"{EFA_REPORT} device",
            f"{EFA_REPORT} device a b",
        ]
    )
    [run] = parse_efa_loopback(f"{EFA_REPORT} device rdmap79s0\n{junk}\n")
    assert (run.exit_code, run.before, run.after) == (None, {}, {"retrans_timeout_events": None})
    assert parse_efa_loopback(f"{ROW_1M}\n{EFA_REPORT} exit 0\n") == []  # before any device


def test_only_a_few_other_lines_are_kept_per_device() -> None:
    noise = "\n".join(f"warning {n}" for n in range(1000))
    [run] = parse_efa_loopback(device("rdmap79s0", output=noise + "\n" + ROW_1M))
    assert run.messages == ["warning 0", "warning 1", "warning 2"]
    assert len(run.rows) == 1


def test_every_device_failing_alike_before_any_result_is_the_host_not_a_port() -> None:
    # An image whose libfabric has no EFA provider fails every device the same way:
    # no verdict on the ports (the agent's EFA checks are read next), nothing climbs.
    getinfo = real("efa_pingpong_src_getinfo_enodata.txt")
    alike = "".join(device(f"rdmap{n}s0", output=getinfo, exit_code=61) for n in (79, 80, 81))
    result = judge(alike)
    assert (result.passed, result.ran, result.failures) == (False, False, [])
    assert result.summary.startswith(
        "EFA loopback not run: fi_pingpong exited 61 on all 3 devices alike: fi_getinfo()"
    )
    # One device that ran, or two failing differently, are the ports' own verdicts.
    assert judge(alike + device("rdmap82s0")).ran
    apart = device("rdmap79s0", output=getinfo, exit_code=61) + device(
        "rdmap80s0", output="", exit_code=1
    )
    assert failed_devices(apart).keys() == {"rdmap79s0", "rdmap80s0"}


def test_a_device_printing_endless_rows_keeps_only_a_bounded_number() -> None:
    rows = "\n".join([ROW_1M] * (MAX_ROWS + 100))
    [run] = parse_efa_loopback(device("rdmap79s0", output=rows))
    assert len(run.rows) == MAX_ROWS


def test_devices_under_one_name_are_each_compared_with_the_median() -> None:
    slow = ROW_1M.replace("12000.00", " 5000.00")
    report = device("unnamed") + device("unnamed") + device("unnamed", output=slow)
    result = judge(report)
    assert not result.passed
    assert "median 12,000 MB/s" in result.summary
