"""Reading ``nvidia-smi -q``: recovery action, row remapping, lost GPUs, counts, indices."""

from __future__ import annotations

import pytest

from agent.checks.nvidia_smi import evaluate, parse_query
from agent.config import load_config
from agent.runner import ToolResult
from tests.agent.lines import BUSES, INDEX
from tests.agent.outputs import smi_output


def ran(stdout: str, status: str = "ok", code: int | None = 0) -> ToolResult:
    return ToolResult(("nvidia-smi", "-q"), status, code, stdout.encode(), b"", 0.1, 5.0)  # type: ignore[arg-type]


CONFIG = load_config(env={"REMEDIATE_AGENT_EXPECTED_GPUS": "8"})


def test_a_healthy_report_lists_every_gpu_in_bus_order() -> None:
    report = parse_query(smi_output())
    assert [g.bus for g in report.gpus] == BUSES
    assert report.attached == 8
    assert {g.recovery_action for g in report.gpus} == {"None"}
    outcome = evaluate(ran(smi_output()), CONFIG, {})
    assert (outcome.problems, outcome.unknown, outcome.buses) == ([], None, INDEX)


@pytest.mark.parametrize(
    ("word", "action"),
    [("Reset", 1), ("Reboot", 2), ("Drain P2P", 3), ("Drain and Reset", 4), ("0x2", 2)],
)
def test_recovery_action_words_become_the_nvml_numbers(word: str, action: int) -> None:
    outcome = evaluate(ran(smi_output(recovery={"0000:9a:00": word})), CONFIG, {})
    [problem] = outcome.problems
    assert (problem.kind, problem.xid, problem.gpu_index, problem.recovery_action) == (
        "xid",
        154,
        3,
        action,
    )


def test_recovery_action_not_supported_by_the_driver_is_not_a_problem() -> None:
    outcome = evaluate(ran(smi_output(recovery={"0000:9a:00": "N/A"})), CONFIG, {})
    assert outcome.problems == []


def test_unrecognised_recovery_action_is_a_note_not_silence() -> None:
    outcome = evaluate(ran(smi_output(recovery={"0000:9a:00": "Call Someone"})), CONFIG, {})
    [problem] = outcome.problems
    assert problem.kind == "note"
    assert "unrecognised recovery action 'Call Someone'" in problem.text


def test_pending_remap_outside_the_remapper_section_is_ignored() -> None:
    # "Pending" also appears under ECC Mode and MIG Mode: only Remapped Rows counts.
    assert evaluate(ran(smi_output()), CONFIG, {}).problems == []


def test_no_driver_is_a_problem() -> None:
    text = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    outcome = evaluate(ran(text, "failed", 9), CONFIG, {})
    [problem] = outcome.problems
    assert problem.text.startswith("nvidia-smi cannot reach the NVIDIA driver")


def test_no_devices_is_a_count_problem_when_gpus_are_expected() -> None:
    outcome = evaluate(ran("No devices were found\n", "failed", 6), CONFIG, {})
    assert [p.text for p in outcome.problems] == ["GPU count 0, expected 8 (configured)"]


def test_no_devices_without_an_expected_count_is_unknown() -> None:
    outcome = evaluate(ran("No devices were found\n", "failed", 6), load_config(env={}), {})
    assert outcome.unknown is not None
    assert "no GPU count is expected" in outcome.unknown


def test_failure_without_any_gpu_output_is_unknown() -> None:
    outcome = evaluate(ran("Segmentation fault\n", "failed", 139), CONFIG, {})
    assert outcome.unknown == (
        "GPU state unknown: nvidia-smi -q nvidia-smi failed with exit code 139: Segmentation fault"
    )


def test_more_gpus_than_expected_is_unknown_not_a_fault() -> None:
    config = load_config(env={"REMEDIATE_AGENT_EXPECTED_GPUS": "4"})
    outcome = evaluate(ran(smi_output()), config, {})
    assert (outcome.problems, outcome.unknown) == (
        [],
        "GPU count 8 above the expected 4 (configured)",
    )


def test_a_lost_gpu_keeps_its_bus_order_index() -> None:
    lost = {"0000:53:00": "GPU is lost. Reboot the system to recover this GPU"}
    outcome = evaluate(ran(smi_output(lost=lost), "failed", 15), CONFIG, {})
    [problem] = outcome.problems
    assert (problem.error_id, problem.gpu_index, problem.pci_bus) == (120, 2, "0000:53:00")
    assert outcome.buses == INDEX
