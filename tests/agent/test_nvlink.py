"""``nvidia-smi nvlink -s`` / ``-e`` (issue 37): NVLink links down and error counters rising.

Every output is a real capture in fixtures/real/ (source on its first line); where
no public capture shows the state a test needs, the test changes one field of a
real one and says so.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.checks.gpu_degraded import DegradedOutcome, evaluate
from agent.checks.nvlink import LinkStatus, parse_errors, parse_status
from agent.config import AgentConfig, ConfigError, load_config
from agent.findings import degraded_text
from agent.runner import ToolResult
from tests.agent.test_real_nvidia_smi import real
from tests.gpu_remediation.hostile_inputs import SIZE, fill, timed

START = 1_800_000_000.0
NPD_INTERVAL = 30.0
A100_Q = real("nvsmi_q_a100sxm4x4_555_dram_corr353_remap_pending_thamada.txt")  # GPU 0: 68:00
A100_UP = real("nvsmi_nvlink_s_a100_tab_azurehpc_good.txt").decode()  # GPU 7, 12 links up
A100_ALL_DOWN = real("nvsmi_nvlink_s_a100_all_inactive_azurehpc.txt").decode()  # GPU 6
H100_ERRORS = real("nvsmi_nvlink_e_h100_mlengineering.txt").decode()  # GPU 0, all 0
V100_TWO_DOWN = real("nvsmi_nvlink_s_v100_inactive_links_azhpcdiag73.txt").decode()  # GPU 3
V100_ERRORS = real("nvsmi_nvlink_e_v100_580_nonzero_replay_crc65535_scuffed.txt").decode()


def as_gpu(text: str, index: int) -> str:
    """The capture's one GPU renumbered (the -q capture it is paired with has GPUs 0-3)."""
    first, _, tail = text.partition("\n")
    if first.startswith("...."):
        first, _, tail = tail.partition("\n")
    return f"GPU {index}: " + first.partition(": ")[2] + "\n" + tail


def ran(stdout: str | bytes, status: str = "ok") -> ToolResult:
    data = stdout.encode() if isinstance(stdout, str) else stdout
    code = {"ok": 0, "failed": 3}.get(status)
    return ToolResult(("nvidia-smi", "nvlink"), status, code, data, b"", 0.1, 10.0)  # type: ignore[arg-type]


def cycles(
    pairs: list[tuple[str | None, str | None]], config: AgentConfig | None = None
) -> list[DegradedOutcome]:
    """One gpu-degraded cycle per (nvlink -s, nvlink -e) pair, beside the A100 -q capture."""
    config = config or load_config(env={})
    saved: dict[str, Any] = {}
    outcomes = []
    q = ToolResult(("nvidia-smi", "-q"), "ok", 0, A100_Q, b"", 0.1, 10.0)
    for n, (status, errors) in enumerate(pairs):
        outcome = evaluate(
            q,
            config,
            saved,
            START + n * NPD_INTERVAL,
            ran(status) if status is not None else None,
            ran(errors) if errors is not None else None,
        )
        saved = json.loads(json.dumps(outcome.state()))
        outcomes.append(outcome)
    return outcomes


def nvlink_found(outcome: DegradedOutcome) -> list[tuple[int | None, str | None, str | None]]:
    return [
        (p.gpu_index, p.what, p.observed)
        for p in outcome.problems
        if (p.what or "").startswith("nvlink")
    ]


# ------------------------------------------------------------------ the formats


def test_link_status_is_read_from_real_outputs() -> None:
    assert parse_status(A100_UP) == {7: LinkStatus(frozenset(range(12)), frozenset(), False)}
    assert parse_status(V100_TWO_DOWN) == {
        3: LinkStatus(frozenset({0, 1, 2, 4}), frozenset({3, 5}), False)
    }
    assert parse_status(A100_ALL_DOWN) == {6: LinkStatus(frozenset(), frozenset(), True)}
    gb200 = parse_status(real("nvsmi_nvlink_s_gb200_k8stestinfra371.txt").decode())
    assert len(gb200[0].up) >= 3
    assert not gb200[0].down
    h100 = parse_status(real("nvsmi_nvlink_status_h100_mlengineering.txt").decode())
    assert 0 in h100[0].up
    eight = parse_status(real("nvsmi_nvlink_status_a100x8_gpud.txt").decode())
    assert sorted(eight) == list(range(8))
    assert all(len(s.up) == 12 for s in eight.values())
    # A GPU without NVLink (an A10) prints nothing at all.
    assert parse_status(real("nvsmi_nvlink_status_a10_empty_gpud.txt").decode()) == {}


def test_the_all_down_line_is_read_whatever_its_casing() -> None:
    # Azure's health checks later rewrote the real "inActive" as "inactive".
    assert parse_status(A100_ALL_DOWN.replace("inActive", "inactive"))[6].all_down


def test_error_counters_are_summed_per_gpu_from_real_outputs() -> None:
    assert parse_errors(V100_ERRORS) == {
        0: {"replay": 211, "recovery": 0, "crc": 0},
        2: {"replay": 2, "recovery": 0, "crc": 65535},
    }
    # The H100's 18 links, the author's "[...]" skipped.
    assert parse_errors(H100_ERRORS) == {0: {"replay": 0, "recovery": 0, "crc": 0}}


@pytest.mark.parametrize("parse", [parse_status, parse_errors])
def test_hostile_nvlink_output_is_parsed_in_bounded_time(parse: Any) -> None:
    lines = "GPU 0: x\n" + "\t Link 1: " + "9" * SIZE + "\n" + " " * SIZE + "Link\n"
    timed("nvlink", parse, lines)
    timed("nvlink", parse, fill("GPU 1: \n\t Link 2: Replay Errors: 5\n"))
    many = "".join(
        f"GPU {n}: x\n\t Link 0: 25 GB/s\n\t Link 0: CRC Errors: 1\n" for n in range(999)
    )
    assert len(parse(many)) <= 64


# ------------------------------------------------------------------ links down


def test_a_link_that_was_up_and_goes_down_is_a_finding() -> None:
    # The V100 capture with links 3 and 5 down, after a cycle with them up (the same
    # capture with "<inactive>" set to the others' 25.781 GB/s: derived).
    down = as_gpu(V100_TWO_DOWN, 0)
    up = down.replace("<inactive>", "25.781 GB/s")
    outcomes = cycles([(up, None), (down, None), (down, None)])
    assert nvlink_found(outcomes[1]) == []  # one reading is not yet a finding
    assert nvlink_found(outcomes[2]) == [(0, "nvlink_down", "4 of 6 up")]
    [problem] = [p for p in outcomes[2].problems if p.what == "nvlink_down"]
    assert degraded_text(problem) == (
        "Degraded on GPU 0 (0000:68:00) [nvlink_down]: 4 of 6 up, expected all up (2+ cycles)"
    )
    back = cycles([(up, None), (down, None), (down, None), (up, None)])[-1]
    assert nvlink_found(back) == []


def test_links_never_up_this_boot_are_no_finding_unless_a_count_is_expected() -> None:
    # A PCIe A100 without a bridge reads all links down from the start (NVSentinel #1481).
    never = as_gpu(A100_ALL_DOWN, 0)
    assert all(nvlink_found(o) == [] for o in cycles([(never, None)] * 5))
    expected = load_config(env={"REMEDIATE_AGENT_DEGRADED_NVLINK_EXPECTED_LINKS": "12"})
    assert nvlink_found(cycles([(never, None)] * 2, expected)[-1]) == [
        (0, "nvlink_down", "0 of 12 up")
    ]


def test_a_gpu_without_nvlink_or_an_unread_tool_is_not_judged() -> None:
    empty = cycles([("", "")] * 12)
    assert all(o.problems == [] for o in empty)
    failed = evaluate(
        ToolResult(("nvidia-smi", "-q"), "ok", 0, A100_Q, b"", 0.1, 10.0),
        load_config(env={}),
        {},
        START,
        ran("", "failed"),
        ran("", "failed"),
    )
    assert failed.problems == []
    assert failed.unknowns == []
    assert any(line.startswith("nvidia-smi nvlink -s not read") for line in failed.log)


# ------------------------------------------------------------------ error counters


def replays(count: int) -> str:
    """The H100's `nvlink -e` with link 1's replay count set to ``count`` (derived)."""
    old = "Link 1: Replay Errors: 0"
    assert old in H100_ERRORS
    return H100_ERRORS.replace(old, f"Link 1: Replay Errors: {count}")


def test_replay_errors_rising_over_five_minutes_are_a_finding() -> None:
    # 1 a cycle, 2 a minute (threshold 1 a minute, DCGM fails on any).
    outcomes = cycles([(A100_UP.replace("GPU 7:", "GPU 0:"), replays(n)) for n in range(12)])
    assert all(nvlink_found(o) == [] for o in outcomes[:10])
    assert nvlink_found(outcomes[10]) == [(0, "nvlink_errors:replay", "1+/min")]
    assert any("+10 in 300 s (2.0/min)" in line for line in outcomes[10].log)


def test_a_counter_stuck_at_the_display_maximum_or_reset_is_no_finding() -> None:
    # The real V100 GPU 2 reads CRC 65535, "the maximum displayed": it no longer rises.
    stuck = as_gpu("GPU 2:" + V100_ERRORS.split("\n\nGPU 2:")[1], 0)
    assert parse_errors(stuck)[0]["crc"] == 65535
    assert all(nvlink_found(o) == [] for o in cycles([(None, stuck)] * 15))
    reset = cycles([(None, replays(500))] * 11 + [(None, replays(0)), (None, replays(1))])
    assert all(nvlink_found(o) == [] for o in reset)
    assert "GPU 0000:68:00 nvlink_errors:replay went down (500 -> 0): new baseline" in reset[-2].log


def test_nvlink_thresholds_are_configurable_and_checked() -> None:
    rising = [(None, replays(n)) for n in range(12)]
    off = load_config(env={"REMEDIATE_AGENT_DEGRADED_NVLINK_ERROR_THRESHOLDS": '{"replay": 0}'})
    assert all(nvlink_found(o) == [] for o in cycles(rising, off))
    with pytest.raises(ConfigError, match="degraded_nvlink_error_thresholds: unknown flit"):
        load_config(env={"REMEDIATE_AGENT_DEGRADED_NVLINK_ERROR_THRESHOLDS": '{"flit": 1}'})
    with pytest.raises(ConfigError, match="degraded_nvlink_expected_links"):
        load_config(env={"REMEDIATE_AGENT_DEGRADED_NVLINK_EXPECTED_LINKS": "65"})
