"""``remediate-agent check --check gpu`` as NPD runs it: exit code and message every time."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from agent.runner import KILL_GRACE
from gpu_remediation.models import DcgmEvidence, XidEvidence
from gpu_remediation.npd_message import parse_condition_message
from tests.agent.conftest import Node
from tests.agent.lines import BOOT_LINE, BUSES, NOISE, XID_LINES, syslog
from tests.agent.outputs import ROW_REMAP_PENDING_GPU2, smi_output

XID_79 = XID_LINES[0][0]  # GPU 2 (0000:53:00)
XID_48 = XID_LINES[3][0]  # GPU 4 (0000:b3:00)
# Python start-up of the agent process, on a busy 2-core machine.
STARTUP_ALLOWANCE = 3.0


def test_healthy_node_exits_0(node: Node) -> None:
    result = node.agent()
    assert result.code == 0, result
    assert result.stdout.startswith("GPU health OK: 8 GPU(s) answer nvidia-smi; DCGM healthy")
    assert node.tools.calls("dcgmi") == ["health -c -j"]
    assert node.tools.calls("nvidia-smi") == ["-q"]


def test_dcgm_failure_is_read_from_the_json_although_dcgmi_exits_0(node: Node) -> None:
    node.tools.respond("dcgmi", ROW_REMAP_PENDING_GPU2, exit_code=0)
    result = node.agent()
    assert result.code == 1
    assert result.stdout.startswith("DCGM error 85 on GPU 2 [Memory]: pending row remap")


def test_dcgm_host_is_passed_to_dcgmi(node: Node) -> None:
    node.configure(dcgm_host="10.0.0.7")
    assert node.agent().code == 0
    assert node.tools.calls("dcgmi") == ["health --host 10.0.0.7 -c -j"]


def test_hanging_dcgmi_is_reported_as_a_hang_within_its_timeout(node: Node) -> None:
    node.tools.hang("dcgmi", 30)
    node.configure(dcgm_timeout=1.0)
    result = node.agent()
    assert result.code == 2
    assert "dcgmi hung: no answer within 1 s, killed" in result.stdout
    assert result.seconds < 1.0 + KILL_GRACE + STARTUP_ALLOWANCE


def test_missing_dcgmi_is_unknown_and_named(node: Node) -> None:
    node.tools.remove("dcgmi")
    result = node.agent()
    assert (result.code, result.stdout) == (2, "DCGM health unknown: dcgmi not found (dcgmi)")


def test_dcgm_check_can_be_turned_off(node: Node) -> None:
    node.tools.remove("dcgmi")
    node.configure(dcgm_enabled=False)
    result = node.agent()
    assert result.code == 0
    assert "DCGM check off" in result.stdout


def test_health_watches_that_are_off_get_enabled(node: Node) -> None:
    node.tools.script(
        "dcgmi",
        'case "$*" in\n'
        '  *-s*) echo "Health monitor systems set successfully."; exit 0;;\n'
        '  *) echo "Error: Health watches are not enabled for this group."; exit 255;;\n'
        "esac\n",
    )
    result = node.agent()
    assert result.code == 2
    assert "watches were off, enabled now" in result.stdout
    assert node.tools.calls("dcgmi") == ["health -c -j", "health -s a"]


def test_xid_from_the_kernel_log_is_reported_when_nvidia_smi_hangs(node: Node) -> None:
    node.tools.hang("nvidia-smi", 30)
    node.configure(nvidia_smi_timeout=1.0)
    node.log(syslog(NOISE[0]) + syslog(XID_79))
    result = node.agent()
    assert result.code == 1
    assert result.stdout.startswith(
        "Xid 79 on GPU 2 (0000:53:00): GPU has fallen off the bus, reboot required; "
    )
    assert "nvidia-smi hung: no answer within 1 s" in result.stdout
    assert result.seconds < 1.0 + KILL_GRACE + STARTUP_ALLOWANCE


def test_a_tool_that_keeps_hanging_is_reported_as_a_wedged_driver(node: Node) -> None:
    node.tools.hang("nvidia-smi", 30)
    node.configure(nvidia_smi_timeout=0.5, hang_cycles_to_problem=2)
    assert node.agent().code == 2
    result = node.agent()
    assert result.code == 1
    assert result.stdout.startswith(
        "nvidia-smi hangs: 2+ cycles in a row without an answer within 0.5 s, "
        "GPU driver may be wedged"
    )


def test_an_xid_is_never_reported_twice(node: Node) -> None:
    node.configure(xid_hold=0)
    node.log(syslog(XID_48))
    first = node.agent()
    assert first.code == 1
    assert first.stdout.startswith("Xid 48 on GPU 4 (0000:b3:00): double-bit ECC error")
    assert node.agent().code == 0
    # The same code again is a new event.
    node.log(syslog(XID_48))
    assert node.agent().code == 1


def test_a_held_xid_keeps_the_same_message_while_it_is_held(node: Node) -> None:
    node.log(syslog(XID_48))
    first = node.agent()
    second = node.agent()
    assert (first.code, second.code) == (1, 1)
    assert first.stdout == second.stdout  # NPD sees no change, the watcher no new event
    state = json.loads(node.agent("state", "show", "--config", str(node.config_file())).stdout)
    assert [entry["problem"]["xid"] for entry in state["held"]] == [48]


def test_a_reboot_clears_held_xids_and_the_old_boots_last_lines(node: Node) -> None:
    node.log(syslog(XID_79))
    assert node.agent().code == 1
    node.log(syslog(XID_48) + syslog(BOOT_LINE) + syslog(NOISE[0]))
    node.reboot()
    result = node.agent()
    assert result.code == 0, result
    assert "new boot" in result.stderr


def test_driver_recovery_action_from_nvidia_smi_names_gpu_and_action(node: Node) -> None:
    node.tools.respond("nvidia-smi", smi_output(recovery={"0000:53:00": "Reboot"}))
    result = node.agent()
    assert result.code == 1
    assert result.stdout.startswith("Xid 154 on GPU 2 (0000:53:00): ")
    assert "recovery action 2 (node reboot required)" in result.stdout


def test_row_remap_failure_comes_before_a_pending_remap(node: Node) -> None:
    node.tools.respond("nvidia-smi", smi_output(pending=["0000:18:00"], failure=["0000:b3:00"]))
    result = node.agent()
    assert result.code == 1
    assert result.stdout == (
        "DCGM error 80 on GPU 4 [nvidia-smi row remapper]: row remap failure; "
        "DCGM error 85 on GPU 0 [nvidia-smi row remapper]: pending row remap"
    )


def test_missing_gpu_is_named_from_the_last_complete_run(node: Node) -> None:
    assert node.agent().code == 0
    node.tools.respond("nvidia-smi", smi_output([b for b in BUSES if b != "0000:53:00"]))
    result = node.agent()
    assert result.code == 1
    assert result.stdout == "GPU count 7, expected 8 (p5.48xlarge): missing 0000:53:00"


def test_lost_gpu_is_fallen_off_the_bus_with_its_index(node: Node) -> None:
    lost = {"0000:53:00": "GPU is lost. Reboot the system to recover this GPU"}
    node.tools.respond("nvidia-smi", smi_output(lost=lost), exit_code=15)
    result = node.agent()
    assert result.code == 1
    assert result.stdout.startswith("DCGM error 120 on GPU 2 [nvidia-smi]: GPU fallen off the bus")


def test_message_fits_max_output_length_and_says_how_many_were_left_out(node: Node) -> None:
    node.configure(max_output_length=120)
    node.log("".join(syslog(line) for line, _ in XID_LINES))
    result = node.agent()
    assert result.code == 1
    assert len(result.stdout.encode()) <= 120
    assert result.stdout.endswith(" more")
    assert result.stdout.startswith("Xid 79 on GPU 2 (0000:53:00)")


def test_the_watcher_reads_codes_gpus_and_actions_back_from_the_message(node: Node) -> None:
    node.tools.respond("dcgmi", ROW_REMAP_PENDING_GPU2)
    node.log(syslog(XID_79) + syslog(XID_LINES[9][0]))
    result = node.agent()
    evidence = parse_condition_message(result.stdout, observed_at=datetime.now(UTC))
    xids = {(e.xid, e.gpu_index, e.recovery_action) for e in evidence if isinstance(e, XidEvidence)}
    dcgm = {(e.error_id, e.gpu_index) for e in evidence if isinstance(e, DcgmEvidence)}
    assert xids == {(79, 2, None), (154, 7, 2)}
    assert dcgm == {(85, 2)}


def test_journal_source_reads_only_entries_after_its_cursor(node: Node) -> None:
    node.configure(kernel_log="journal", xid_hold=0)
    node.tools.journal(syslog(XID_48, "journal"))
    assert node.agent().code == 1
    assert node.agent().code == 0
    assert node.tools.calls("journalctl")[-1].endswith("--after-cursor=s=1")


def test_unreadable_kernel_log_is_unknown(node: Node) -> None:
    node.kern_log.unlink()
    result = node.agent()
    assert result.code == 2
    assert result.stdout.startswith("kernel log unreadable: kernel log ")


def test_corrupt_state_file_is_set_aside_and_the_check_still_runs(node: Node) -> None:
    node.state_dir.mkdir()
    (node.state_dir / "gpu.json").write_bytes(b"\x00garbage{")
    result = node.agent()
    assert result.code == 0
    assert "unreadable" in result.stderr
    assert (node.state_dir / "gpu.corrupt").exists()


def test_invalid_config_is_unknown_naming_the_setting(node: Node) -> None:
    node.configure(dcgm_timeout="soon")
    result = node.agent()
    assert result.code == 2
    assert "dcgm_timeout: expected a number of seconds" in result.stdout


def test_recovery_action_back_to_none_ends_the_report(node: Node) -> None:
    node.log(syslog(XID_LINES[9][0]))
    assert node.agent().code == 1
    node.log(
        syslog(
            "NVRM: Xid (PCI:0000:db:00): 154, GPU recovery action changed from 0x2 "
            "(Node Reboot Required) to 0x0 (None)"
        )
    )
    assert node.agent().code == 0
