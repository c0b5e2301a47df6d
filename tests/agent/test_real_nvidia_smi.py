"""Real ``nvidia-smi`` outputs (fixtures/real/, source on each first line) read right."""

from __future__ import annotations

from pathlib import Path

from agent.checks.nvidia_smi import SmiOutcome, evaluate
from agent.config import load_config
from agent.runner import ToolResult

REAL = Path(__file__).parent / "fixtures" / "real"
EIGHT = load_config(env={"REMEDIATE_AGENT_EXPECTED_GPUS": "8"})
ANY = load_config(env={})


def real(name: str) -> bytes:
    first, _, rest = (REAL / name).read_bytes().partition(b"\n")
    assert first.startswith(b"#"), f"{name}: the first line must name the source"
    return rest


def run(stdout: bytes = b"", stderr: bytes = b"", code: int = 0, config=ANY) -> SmiOutcome:  # type: ignore[no-untyped-def]
    status = "ok" if code == 0 else "failed"
    result = ToolResult(("nvidia-smi", "-q"), status, code, stdout, stderr, 0.1, 5.0)  # type: ignore[arg-type]
    return evaluate(result, config, {})


def test_healthy_h100x8_on_driver_535_is_eight_gpus_and_no_problem() -> None:
    for name in ("nvsmi_q_h100x8_535_gpud.txt", "nvsmi_q_h100x8_535_161_gpud.txt"):
        outcome = run(real(name), config=EIGHT)
        assert (outcome.problems, outcome.unknown) == ([], None)
        assert outcome.buses is not None
        assert len(outcome.buses) == 8


def test_rtx4090x8_report_with_a_leading_blank_line_is_eight_gpus() -> None:
    outcome = run(real("nvsmi_q_4090x8_leading_blank_gpud.txt"), config=EIGHT)
    assert (outcome.problems, outcome.unknown) == ([], None)


def test_driver_575_recovery_action_none_is_not_a_problem() -> None:
    outcome = run(real("nvsmi_q_575_gtx1650_recovery_none_excerpt.txt"))
    assert outcome.problems == []
    assert outcome.recovery_none == {0}


def test_a10_pending_row_remap_is_dcgm_85() -> None:
    [problem] = run(real("nvsmi_q_a10_remap_pending_gpud.txt")).problems
    assert (problem.error_id, problem.gpu_index, problem.pci_bus) == (85, 0, "0000:07:00")


def test_titan_v_without_remapper_or_pending_pages_is_healthy() -> None:
    outcome = run(real("nvsmi_q_titanv_560_gpud.txt"))
    assert (outcome.problems, outcome.unknown) == ([], None)


def test_titan_v_pending_page_blacklist_yes_is_dcgm_6() -> None:
    text = real("nvsmi_q_titanv_560_gpud.txt").replace(
        b"Pending Page Blacklist            : N/A", b"Pending Page Blacklist            : Yes"
    )
    [problem] = run(text).problems
    assert (problem.error_id, problem.gpu_index) == (6, 0)


def test_output_cut_after_the_first_gpu_is_unknown_not_healthy() -> None:
    outcome = run(real("nvsmi_q_derived_truncated_after_gpu0_h100x8.txt"), config=EIGHT)
    assert outcome.unknown is not None
    assert "cut short (8 attached, 1 shown)" in outcome.unknown
    assert outcome.buses is None  # an incomplete run is not a GPU map to remember


def test_a100_excerpt_is_unknown_yet_keeps_its_pending_remap() -> None:
    outcome = run(real("nvsmi_q_a100_remap_pending_mlengineering_excerpt.txt"), config=EIGHT)
    assert outcome.unknown is not None
    assert [p.error_id for p in outcome.problems] == [85]


def test_a_lost_gpu_on_stderr_is_a_lost_gpu_not_unknown_state() -> None:
    for name in ("nvsmi_lost_gpu_gpud_readme.txt", "nvsmi_lost_gpu_old_format_ogkm387.txt"):
        outcome = run(stderr=real(name), code=15)
        [problem] = outcome.problems
        assert problem.error_id == 120, name
        assert outcome.unknown is None


def test_no_driver_is_a_problem_note() -> None:
    [problem] = run(stderr=real("nvsmi_no_driver_cheatsheet.txt"), code=9).problems
    assert problem.kind == "note"
    assert "cannot reach the NVIDIA driver" in problem.text
