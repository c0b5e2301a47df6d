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


def run(
    stdout: bytes = b"", stderr: bytes = b"", code: int = 0, config=ANY, saved=None
) -> SmiOutcome:  # type: ignore[no-untyped-def]
    status = "ok" if code == 0 else "failed"
    result = ToolResult(("nvidia-smi", "-q"), status, code, stdout, stderr, 0.1, 5.0)  # type: ignore[arg-type]
    return evaluate(result, config, saved or {})


def in_gpu(text: bytes, gpu: int, old: bytes, new: bytes) -> bytes:
    """``text`` with the first ``old`` in the ``gpu``-th GPU section (0-based) set to ``new``."""
    start = -1
    for _ in range(gpu + 1):
        start = text.index(b"\nGPU 0", start + 1)
    at = text.index(old, start)
    return text[:at] + new + text[at + len(old) :]


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
    for name in (
        "nvsmi_lost_gpu_gpud_readme.txt",
        "nvsmi_lost_gpu_old_format_ogkm387.txt",
        "nvsmi_lost_gpu_is_lost_reboot_marian251.txt",
    ):
        outcome = run(stderr=real(name), code=15)
        [problem] = outcome.problems
        assert problem.error_id == 120, name
        assert outcome.unknown is None


def test_no_driver_is_a_problem_note() -> None:
    [problem] = run(stderr=real("nvsmi_no_driver_cheatsheet.txt"), code=9).problems
    assert problem.kind == "note"
    assert "cannot reach the NVIDIA driver" in problem.text


# ------------------------------------------------- issue 37: what older and newer drivers print


def test_a_v100_on_driver_410_without_pending_pages_is_healthy() -> None:
    # Before about 418 the key is "Pending"; the "Pending" of Driver Model, GPU
    # Operation Mode and Ecc Mode (N/A, Enabled) are other sections.
    outcome = run(real("nvsmi_q_v100_410_retired_pages_pending_microway.txt"))
    assert outcome.problems == []
    assert (
        outcome.unknown == "GPU state unknown: nvidia-smi -q output cut short (4 attached, 1 shown)"
    )


def test_a_v100_on_driver_410_with_pages_pending_retirement_is_dcgm_6() -> None:
    # NVIDIA's Dynamic Page Retirement guide: after a DBE the pending status becomes Yes.
    text = real("nvsmi_q_v100_410_retired_pages_pending_microway.txt").replace(
        b"Pending                     : No", b"Pending                     : Yes"
    )
    [problem] = run(text).problems
    assert (problem.kind, problem.error_id, problem.gpu_index, problem.pci_bus) == (
        "dcgm",
        6,
        0,
        "0000:18:00",
    )


def test_eight_pre_ampere_gpus_without_a_pending_page_blacklist_are_healthy() -> None:
    outcome = run(real("nvsmi_q_v100x8_535_page_retirement_azurehpc.txt"), config=EIGHT)
    assert (outcome.problems, outcome.unknown) == ([], None)
    assert outcome.buses is not None
    assert len(outcome.buses) == 8


def test_a_pending_page_blacklist_names_its_gpu_among_eight() -> None:
    text = in_gpu(
        real("nvsmi_q_v100x8_535_page_retirement_azurehpc.txt"),
        3,
        b"Pending Page Blacklist            : No",
        b"Pending Page Blacklist            : Yes",
    )
    [problem] = run(text, config=EIGHT).problems
    assert (problem.error_id, problem.gpu_index, problem.pci_bus) == (6, 3, "0004:00:00")


def test_driver_535_reset_status_no_is_no_recovery_needed() -> None:
    outcome = run(real("nvsmi_q_h100x8_535_gpud.txt"), config=EIGHT)
    assert outcome.problems == []
    assert outcome.recovery_none == set(range(8))  # a held Xid 154 is stale


def _reset_required_line() -> bytes:
    # The real 535.247.01 line, quoted 4 spaces less indented than nvidia-smi prints it.
    excerpt = real("nvsmi_q_535_3090_reset_required_excerpt.txt").splitlines()
    [line] = [line for line in excerpt if line.strip().startswith(b"Reset Required")]
    return b"    " + line


def test_driver_535_reset_required_is_the_gpu_reset_recovery_action() -> None:
    # Before 550 nvidia-smi prints no GPU Recovery Action: GPU Reset Status is the signal.
    text = in_gpu(
        real("nvsmi_q_h100x8_535_gpud.txt"),
        2,
        b"        Reset Required                    : No",
        _reset_required_line(),
    )
    outcome = run(text, config=EIGHT)
    [problem] = outcome.problems
    assert (problem.kind, problem.xid, problem.gpu_index, problem.recovery_action) == (
        "xid",
        154,
        2,
        1,
    )
    assert problem.text == "nvidia-smi GPU Reset Status"
    assert outcome.recovery_none == set(range(8)) - {2}


def test_driver_535_drain_and_reset_recommended_is_the_drain_and_reset_action() -> None:
    text = in_gpu(
        real("nvsmi_q_h100x8_535_gpud.txt"),
        5,
        b"Drain and Reset Recommended       : No",
        b"Drain and Reset Recommended       : Yes",
    )
    [problem] = run(text, config=EIGHT).problems
    assert (problem.xid, problem.gpu_index, problem.recovery_action) == (154, 5, 4)


def test_driver_575_deprecated_reset_status_defers_to_the_recovery_action() -> None:
    # "Requested functionality has been deprecated" next to "GPU Recovery Action : None".
    outcome = run(real("nvsmi_q_575_gtx1650_recovery_none_excerpt.txt"))
    assert (outcome.problems, outcome.recovery_none) == ([], {0})


def test_driver_580_lost_gpu_printed_with_its_index_is_fallen_off_the_bus() -> None:
    # "Unable to determine the device handle for GPU1: 0000:04:00.0: Unknown Error"
    outcome = run(real("nvsmi_q_580_lost_gpu1_index_form_btpc_excerpt.txt"))
    [problem] = outcome.problems
    assert (problem.error_id, problem.gpu_index, problem.pci_bus) == (120, 1, "0000:04:00")
    assert problem.text == "GPU 0000:04:00 lost: Unknown Error"
    assert (outcome.unknown, outcome.buses) == (None, {"0000:03:00": 0, "0000:04:00": 1})


def test_two_lost_gpus_keep_the_indices_nvidia_smi_prints() -> None:
    # Only the lost GPUs' lines (on stderr): NVML's indices 0 and 2, not bus order 0 and 1.
    outcome = run(stderr=real("nvsmi_lost_gpus_index_form_h100x8_report.txt"), code=15)
    lost = [(p.error_id, p.gpu_index, p.pci_bus) for p in outcome.problems]
    assert lost == [(120, 0, "0000:23:00"), (120, 2, "0000:43:00")]


def test_a_lost_gpu_printed_without_a_bus_is_still_lost() -> None:
    outcome = run(stderr=real("nvsmi_lost_gpu_no_bus_notes.txt"), code=15)
    [problem] = outcome.problems
    assert (problem.error_id, problem.gpu_index, problem.pci_bus) == (120, 0, None)
    assert problem.text == "GPU0 lost (no bus printed): Unknown Error"
    assert outcome.buses is None  # no bus map can be trusted from it


def test_a_lost_gpu_printed_without_a_bus_is_placed_by_the_last_complete_run() -> None:
    saved = {"0000:18:00": 0, "0000:3b:00": 1}
    outcome = run(stderr=real("nvsmi_lost_gpu_no_bus_notes.txt"), code=15, saved=saved)
    [problem] = outcome.problems
    assert (problem.error_id, problem.gpu_index, problem.pci_bus) == (120, 0, "0000:18:00")
