"""``gpu-degraded`` (issue 37, "slow, not dead"): degradation in real ``nvidia-smi -q`` outputs.

Every output is a real capture in fixtures/real/ (source on its first line).
Where no public capture shows a degraded state, the test changes one field of
a real output and says so (as test_real_nvidia_smi.py does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from agent.checks import gpu_degraded
from agent.checks.gpu_degraded import DegradedOutcome, evaluate
from agent.checks.nvidia_smi import CLOCK_EVENT_KEYS, parse_query
from agent.config import (
    CLOCK_EVENT_PREFIX,
    DEFAULT_DEGRADED_CHECKS,
    DEGRADED_SIGNALS,
    AgentConfig,
    ConfigError,
    load_config,
)
from agent.findings import EXIT_OK, EXIT_PROBLEM, EXIT_UNKNOWN, Problem, degraded_text, render
from agent.runner import ToolResult
from tests.agent.test_real_nvidia_smi import in_gpu, real
from tests.gpu_remediation.hostile_inputs import SIZE, fill, timed

DEFAULTS = load_config(env={})
START = 1_800_000_000.0
NPD_INTERVAL = 30.0

H100_183 = "nvsmi_q_h100x8_535_gpud.txt"  # GPU 2 (0000:75:00): HW Power Brake, SW Thermal Active
H100_161 = "nvsmi_q_h100x8_535_161_gpud.txt"  # all 8: HW Slowdown, HW Power Brake Active
RTX4090X8 = "nvsmi_q_4090x8_leading_blank_gpud.txt"  # 6 idle at P8 on Gen1 of 4, 2 busy at P2
TITAN_V = "nvsmi_q_titanv_560_gpud.txt"  # idle at P8 on Gen1 of 3
A10 = "nvsmi_q_a10_remap_pending_gpud.txt"  # idle at P8
K40M_BUSY = "nvsmi_q_346_k40m_p0_busy_xcat.txt"  # P0, 99 % busy, Gen3 of 3, 16x of 16x
POWER9_V100 = "nvsmi_q_418_v100sxm2_power9_width_2x_princeton.txt"  # P0, Link Width 2x of 16x
A10G_AWS = "nvsmi_q_535_a10g_aws_width_8x_dcgm232.txt"  # P0, Link Width 8x of 16x
RTX2080_P8 = "nvsmi_q_rtx2080_p8_width_8x_diffusionbench.txt"  # P8, Link Width 8x of 16x


def ran(stdout: bytes, status: str = "ok") -> ToolResult:
    code = {"ok": 0, "failed": 1}.get(status)
    return ToolResult(("nvidia-smi", "-q"), status, code, stdout, b"", 0.1, 10.0)  # type: ignore[arg-type]


def cycles(
    outputs: Iterable[bytes | ToolResult],
    config: AgentConfig = DEFAULTS,
    *,
    step: float = NPD_INTERVAL,
    state: dict[str, Any] | None = None,
) -> list[DegradedOutcome]:
    """One check cycle per output, ``step`` seconds apart, carrying the state as a cycle does."""
    saved: dict[str, Any] = json.loads(json.dumps(state or {}))
    outcomes = []
    for n, output in enumerate(outputs):
        result = output if isinstance(output, ToolResult) else ran(output)
        outcome = evaluate(result, config, saved, START + n * step)
        saved = json.loads(json.dumps(outcome.state()))  # through JSON, as the state file
        outcomes.append(outcome)
    return outcomes


def found(outcome: DegradedOutcome) -> list[tuple[int | None, str | None, str | None, str | None]]:
    return [(p.gpu_index, p.what, p.observed, p.expected) for p in outcome.problems]


def configured(**settings: object) -> AgentConfig:
    env = {f"REMEDIATE_AGENT_{k.upper()}": str(v) for k, v in settings.items()}
    return load_config(env=env)


# ------------------------------------------------------------------ healthy


@pytest.mark.parametrize("name", [RTX4090X8, TITAN_V, A10, K40M_BUSY])
def test_healthy_real_outputs_are_no_finding_however_many_cycles(name: str) -> None:
    *_, last = cycles([real(name)] * 30)
    assert (last.problems, last.unknowns, last.streaks) == ([], [], {})


def test_the_h100s_without_a_slowdown_reason_are_no_finding() -> None:
    # Seven of the eight GPUs of the 535.183.01 capture: P0, Gen5 of 5, 16x of 16x, idle.
    *_, last = cycles([real(H100_183)] * 30)
    assert {p.pci_bus for p in last.problems} == {"0000:75:00"}
    assert last.detail == "8 GPU(s) read; PCIe width judged on 8 (P0), generation on 0 (P0, busy)"


def test_a_healthy_outcome_renders_as_the_ok_message() -> None:
    [outcome] = cycles([real(K40M_BUSY)])
    assert render(
        outcome.problems, outcome.unknowns, ok_text=f"OK: {outcome.detail}", max_bytes=1024
    ) == (
        EXIT_OK,
        "OK: 1 GPU(s) read; PCIe width judged on 1 (P0), generation on 1 (P0, busy)",
    )


# ------------------------------------------------------------------ PCIe width


def test_a_link_narrower_than_its_max_in_p0_is_a_pcie_width_finding() -> None:
    # Real: a V100-SXM2 on an IBM Power9 node, P0, Link Width Current 2x of Max 16x.
    first, second = cycles([real(POWER9_V100)] * 2)
    assert first.problems == []  # one reading is not yet a finding
    assert found(second) == [(0, "pcie_width", "2x", "16x")]
    assert second.problems[0].pci_bus == "0004:04:00"


def test_the_output_cut_short_still_reports_the_gpu_it_shows_and_says_the_rest_is_unknown() -> None:
    # The Power9 capture shows GPU 0 of 4 ("Attached GPUs : 4", then the author's "...").
    *_, last = cycles([real(POWER9_V100)] * 2)
    assert last.unknowns == [
        "GPU degradation unknown for the GPUs not shown: nvidia-smi -q output cut short"
        " (4 attached, 1 shown)"
    ]
    code, _ = render(last.problems, last.unknowns, ok_text="ok", max_bytes=1024)
    assert code == EXIT_PROBLEM


def test_an_expected_width_set_for_the_platform_accepts_its_narrower_links() -> None:
    # Real: an AWS A10G in pass-through prints Link Width 8x of 16x in P0, as built.
    *_, default = cycles([real(A10G_AWS)] * 2)
    assert found(default) == [(0, "pcie_width", "8x", "16x")]
    *_, accepted = cycles([real(A10G_AWS)] * 2, configured(degraded_pcie_expected_width=8))
    assert (accepted.problems, accepted.streaks) == ([], {})


def test_a_narrow_link_outside_p0_is_not_judged() -> None:
    # Real: an idle RTX 2080 at P8, Link Width 8x of 16x. DCGM reads links only in P0.
    *_, last = cycles([real(RTX2080_P8)] * 5)
    assert (last.problems, last.streaks) == ([], {})
    assert last.detail == "1 GPU(s) read; PCIe width judged on 0 (P0), generation on 0 (P0, busy)"


def test_a_width_downtrained_on_one_gpu_of_eight_names_that_gpu() -> None:
    # Derived: one field of the real H100 capture, GPU 5's Link Width Current 16x -> 8x.
    text = in_gpu(
        real(H100_183),
        5,
        b"                Current                   : 16x",
        b"                Current                   : 8x",
    )
    *_, last = cycles([text] * 2)
    assert [f for f in found(last) if f[1] == "pcie_width"] == [(5, "pcie_width", "8x", "16x")]


# ------------------------------------------------------------------ PCIe generation


def test_idle_gpus_on_a_lower_pcie_generation_are_no_finding() -> None:
    # Real: six idle RTX 4090 (P8, 0 %) on Gen1 of Gen4, a Titan V on Gen1 of Gen3.
    for name in (RTX4090X8, TITAN_V):
        *_, last = cycles([real(name)] * 5)
        assert last.problems == [], name


def test_an_idle_gpu_in_p0_on_a_lower_generation_is_not_judged() -> None:
    # Derived: GPU 3 of the real H100 capture (P0, 0 % busy) printed on Gen4 of Gen5.
    text = in_gpu(
        real(H100_183),
        3,
        b"                Current                   : 5",
        b"                Current                   : 4",
    )
    *_, last = cycles([text] * 5)
    assert [p for p in last.problems if p.what == "pcie_gen"] == []


def test_a_busy_gpu_in_p0_below_its_max_generation_is_a_pcie_gen_finding() -> None:
    # Derived: the real K40m at P0 and 99 % busy, its Current generation 3 -> 2.
    text = real(K40M_BUSY).replace(
        b"                Current             : 3", b"                Current             : 2"
    )
    first, second = cycles([text] * 2)
    assert first.problems == []
    assert found(second) == [(0, "pcie_gen", "Gen2", "Gen3")]


def test_a_gpu_less_busy_than_the_threshold_is_not_judged_for_its_generation() -> None:
    text = real(K40M_BUSY).replace(
        b"                Current             : 3", b"                Current             : 2"
    )
    *_, last = cycles([text] * 3, configured(degraded_pcie_gen_min_utilization=100))
    assert last.problems == []


def test_an_unjudged_cycle_neither_extends_nor_ends_a_streak() -> None:
    # Busy on Gen2 of 3, then idle (not judged), then busy again: two readings, a finding.
    slow = real(K40M_BUSY).replace(
        b"                Current             : 3", b"                Current             : 2"
    )
    idle = slow.replace(
        b"        Gpu                         : 99 %", b"        Gpu                         : 0 %"
    )
    first, between, third = cycles([slow, idle, slow])
    assert (first.problems, between.problems) == ([], [])
    assert found(third) == [(0, "pcie_gen", "Gen2", "Gen3")]


# ------------------------------------------------------------------ clock events


def test_a_slowdown_reason_active_for_fewer_than_n_cycles_is_no_finding() -> None:
    outcomes = cycles([real(H100_183)] * (DEFAULTS.degraded_clock_event_cycles - 1))
    assert all(o.problems == [] for o in outcomes)


def test_a_slowdown_reason_active_for_n_cycles_is_a_finding_sw_power_cap_is_not() -> None:
    # Real: GPU 2 of the 535.183.01 capture prints HW Power Brake Slowdown, SW Thermal
    # Slowdown and SW Power Cap Active; the power cap is the GPU keeping to its limit.
    *_, last = cycles([real(H100_183)] * DEFAULTS.degraded_clock_event_cycles)
    assert found(last) == [
        (2, "clock_event:hw_power_brake_slowdown", "Active", "Not Active"),
        (2, "clock_event:sw_thermal_slowdown", "Active", "Not Active"),
    ]


def test_hw_slowdown_on_every_gpu_is_reported_within_npds_output_limit() -> None:
    # Real: all eight GPUs of the 535.161.08 capture, HW Slowdown and HW Power Brake Active.
    *_, last = cycles([real(H100_161)] * DEFAULTS.degraded_clock_event_cycles)
    assert len(last.problems) == 16
    code, message = render(last.problems, last.unknowns, ok_text="ok", max_bytes=1024)
    assert code == EXIT_PROBLEM
    assert len(message.encode()) <= 1024
    assert message.startswith(
        "Degraded on GPU 0 (0000:19:00) [clock_event:hw_power_brake_slowdown]: Active,"
        " expected Not Active (10+ cycles); "
    )
    assert message.endswith(" more")


def test_a_cleared_reason_clears_the_finding_and_the_condition() -> None:
    # Derived: the same capture with GPU 2's two reasons printed Not Active again.
    cleared = in_gpu(
        in_gpu(
            real(H100_183),
            2,
            b"HW Power Brake Slowdown       : Active",
            b"HW Power Brake Slowdown       : Not Active",
        ),
        2,
        b"SW Thermal Slowdown               : Active",
        b"SW Thermal Slowdown               : Not Active",
    )
    n = DEFAULTS.degraded_clock_event_cycles
    *_, reported, after = cycles([real(H100_183)] * n + [cleared])
    assert len(reported.problems) == 2
    assert (after.problems, after.streaks) == ([], {})
    assert render(after.problems, after.unknowns, ok_text="ok", max_bytes=1024) == (EXIT_OK, "ok")
    assert "GPU 2 (0000:75:00) clock_event:sw_thermal_slowdown: back to normal" in after.log


def test_one_cycle_without_the_reason_starts_the_count_again() -> None:
    cleared = in_gpu(
        real(H100_183),
        2,
        b"SW Thermal Slowdown               : Active",
        b"SW Thermal Slowdown               : Not Active",
    )
    n = DEFAULTS.degraded_clock_event_cycles
    *_, last = cycles([real(H100_183)] * (n - 1) + [cleared] + [real(H100_183)] * (n - 1))
    assert [p.what for p in last.problems] == ["clock_event:hw_power_brake_slowdown"]


def test_readings_further_apart_than_the_window_do_not_add_up() -> None:
    # Ten readings two minutes apart span 18 minutes: more than the 10-minute window.
    n = DEFAULTS.degraded_clock_event_cycles
    *_, last = cycles([real(H100_183)] * n, step=120.0)
    assert last.problems == []
    assert any("(10 of 10 cycles)" in line for line in last.log)


def test_findings_stand_while_nvidia_smi_hangs_until_the_window_forgets_them() -> None:
    n = DEFAULTS.degraded_clock_event_cycles
    *_, reported = cycles([real(H100_183)] * n)
    last_reading = START + (n - 1) * NPD_INTERVAL
    hung = ran(b"", "hung")
    later = evaluate(hung, DEFAULTS, reported.state(), last_reading + NPD_INTERVAL)
    assert len(later.problems) == 2
    assert later.unknowns == [
        "GPU degradation unknown: nvidia-smi hung: no answer within 10 s, killed"
    ]
    window = DEFAULTS.degraded_window
    gone = evaluate(hung, DEFAULTS, reported.state(), last_reading + window + 1)
    assert (gone.problems, gone.streaks) == ([], {})


def test_an_old_driver_prints_clocks_throttle_reasons_and_they_are_read() -> None:
    # Derived: the real Power9 V100 capture (driver 418.67, "Clocks Throttle Reasons")
    # with HW Slowdown printed Active.
    text = real(POWER9_V100).replace(
        b"        HW Slowdown                 : Not Active",
        b"        HW Slowdown                 : Active",
    )
    *_, last = cycles([text] * DEFAULTS.degraded_clock_event_cycles)
    assert (0, "clock_event:hw_slowdown", "Active", "Not Active") in found(last)


def test_a_reason_the_driver_does_not_print_is_not_judged() -> None:
    # The K40m's driver 346 prints no HW Thermal / Power Brake / SW Thermal Slowdown.
    [gpu] = parse_query(real(K40M_BUSY).decode()).gpus
    judged = {r.what: r.degraded for r in gpu_degraded.readings(gpu, DEFAULTS)}
    assert judged == {
        "pcie_width": False,
        "pcie_gen": False,
        "clock_event:hw_slowdown": False,
        "clock_event:hw_thermal_slowdown": None,
        "clock_event:hw_power_brake_slowdown": None,
        "clock_event:sw_thermal_slowdown": None,
    }


def test_sw_power_cap_is_reported_only_when_an_operator_asks_for_it() -> None:
    checks = ",".join([*DEFAULT_DEGRADED_CHECKS, "clock_event:sw_power_cap"])
    config = configured(degraded_checks=checks, degraded_clock_event_cycles=2)
    *_, last = cycles([real(H100_183)] * 2, config)
    assert (2, "clock_event:sw_power_cap", "Active", "Not Active") in found(last)


# ------------------------------------------------------------------ the message


def test_the_finding_is_written_in_the_degraded_grammar() -> None:
    *_, last = cycles([real(POWER9_V100)] * 2)
    code, message = render(last.problems, [], ok_text="ok", max_bytes=1024)
    assert (code, message) == (
        EXIT_PROBLEM,
        "Degraded on GPU 0 (0004:04:00) [pcie_width]: 2x, expected 16x (2+ cycles)",
    )


def test_a_degraded_problem_survives_the_state_file() -> None:
    *_, last = cycles([real(POWER9_V100)] * 2)
    [problem] = last.problems
    assert Problem.from_json(json.loads(json.dumps(problem.to_json()))) == problem
    assert problem.key == "degraded/pcie_width/0004:04:00"


def test_the_message_stays_the_same_while_the_state_does() -> None:
    # NPD updates a condition when its message changes: no counter in the words.
    outcomes = cycles([real(H100_183)] * 14)
    messages = {render(o.problems, [], ok_text="ok", max_bytes=1024)[1] for o in outcomes[9:]}
    assert len(messages) == 1


# ------------------------------------------------------------------ unknown


@pytest.mark.parametrize(
    ("result", "unknown"),
    [
        (
            ran(b"", "hung"),
            "GPU degradation unknown: nvidia-smi hung: no answer within 10 s, killed",
        ),
        (
            ran(real("nvsmi_no_driver_cheatsheet.txt"), "failed"),
            "GPU degradation unknown: nvidia-smi cannot reach the NVIDIA driver",
        ),
        (ran(b"", "ok"), "GPU degradation unknown: nvidia-smi -q lists no GPU"),
    ],
)
def test_no_reading_is_unknown_never_healthy(result: ToolResult, unknown: str) -> None:
    [outcome] = cycles([result])
    assert outcome.unknowns == [unknown]
    assert (
        render(outcome.problems, outcome.unknowns, ok_text="ok", max_bytes=1024)[0] == EXIT_UNKNOWN
    )


# ------------------------------------------------------------------ settings


def test_every_clock_event_reason_but_idle_can_be_checked() -> None:
    reasons = {CLOCK_EVENT_PREFIX + name for name in CLOCK_EVENT_KEYS.values()} - {
        CLOCK_EVENT_PREFIX + "idle"
    }
    nvlink = {"nvlink_down", "nvlink_errors:replay", "nvlink_errors:recovery", "nvlink_errors:crc"}
    assert set(DEGRADED_SIGNALS) == {"pcie_width", "pcie_gen", "ecc_correctable"} | nvlink | reasons
    assert set(DEFAULT_DEGRADED_CHECKS) <= set(DEGRADED_SIGNALS)


def test_the_checks_are_a_comma_list_in_the_environment() -> None:
    config = configured(degraded_checks="pcie_width,clock_event:hw_slowdown")
    assert config.degraded_checks == ("pcie_width", "clock_event:hw_slowdown")
    *_, last = cycles([real(K40M_BUSY)] * 3, config)
    assert last.detail == "1 GPU(s) read; PCIe width judged on 1 (P0), generation on 0 (P0, busy)"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"degraded_checks": "pcie_width,clock_event:idle"},
            "degraded_checks: unknown clock_event:idle",
        ),
        (
            {"degraded_clock_event_cycles": 0},
            "degraded_clock_event_cycles: must be between 1 and 100",
        ),
        ({"degraded_pcie_cycles": 101}, "degraded_pcie_cycles: must be between 1 and 100"),
        ({"degraded_window": 0}, "degraded_window: must be greater than 0"),
        ({"degraded_pcie_gen_min_utilization": 101}, "between 0 and 100"),
        (
            {"degraded_pcie_expected_width": 64},
            "degraded_pcie_expected_width: must be between 1 and 32",
        ),
        ({"degraded_pcie_expected_gen": 0}, "degraded_pcie_expected_gen: must be between 1 and 9"),
    ],
)
def test_bad_degradation_settings_are_refused_naming_the_setting(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        configured(**settings)


# ------------------------------------------------------------------ hostile input


def test_a_damaged_or_hostile_state_file_is_read_in_bounded_time() -> None:
    huge = {
        f"0000:{i % 256:02x}:{i // 256:02x} clock_event:hw_slowdown": {
            "times": list(range(10_000)),
            "observed": "Active",
            "expected": "Not Active",
        }
        for i in range(5_000)
    }
    state: dict[str, Any] = {"streaks": {**huge, "x": 1, "y": {"times": "no"}}, "gpu_buses": [1]}
    timed("evaluate with a hostile state", evaluate, ran(b""), DEFAULTS, state, START)
    result = evaluate(ran(real(H100_183)), DEFAULTS, state, START)
    assert len(result.streaks) <= gpu_degraded.MAX_STREAKS + 8 * len(DEFAULT_DEGRADED_CHECKS)
    assert all(
        len(s.times) <= DEFAULTS.degraded_clock_event_cycles for s in result.streaks.values()
    )


@pytest.mark.parametrize(
    "unit",
    [
        "GPU 00000000:53:00.0\n    Clocks Event Reasons\n        HW Slowdown : Active\n",
        "    PCI\n        GPU Link Info\n            Link Width\n                Current : 8x\n",
        "                Max                       : " + "9" * 200 + "x\n",
        "    Performance State : P0\n    Utilization\n        Gpu : 99 %\n",
        "            PCIe Generation\n" * 3,
    ],
)
def test_hostile_nvidia_smi_output_is_read_in_bounded_time(unit: str) -> None:
    text = "GPU 00000000:53:00.0\n" + fill(unit)
    assert len(text) > SIZE
    timed("gpu_degraded.evaluate", evaluate, ran(text.encode()), DEFAULTS, {}, START)


# ------------------------------------------------------------------ corrected ECC

A100_ECC = "nvsmi_q_a100sxm4x4_555_dram_corr353_remap_pending_thamada.txt"  # GPU 1 (9E): 353
A40_AGGREGATE = "nvsmi_q_a40x10_550_dram_corr_aggregate_only_thamada.txt"  # volatile all 0
V100_OLD_LAYOUT = "nvsmi_q_v100_580_old_ecc_layout_fabric_scuffed_excerpt.txt"  # Single Bit


def with_dram_correctable(count: int) -> bytes:
    # The A100 capture's GPU 1 with its volatile DRAM Correctable (353) set to ``count``:
    # no public series of captures of one GPU exists, so a test changes the one field.
    return in_gpu(
        real(A100_ECC),
        1,
        b"DRAM Correctable              : 353",
        b"DRAM Correctable              : %d" % count,
    )


def test_real_ecc_layouts_are_read_as_the_volatile_corrected_count() -> None:
    # Turing and later: SRAM plus DRAM Correctable under Volatile; before: Single Bit Total.
    assert [g.ecc_volatile_correctable for g in parse_query(real(A100_ECC).decode()).gpus] == [
        0,
        353,
        0,
        0,
    ]
    assert [
        g.ecc_volatile_correctable for g in parse_query(real(V100_OLD_LAYOUT).decode()).gpus
    ] == [0]
    # The A40s have thousands of aggregate (lifetime) corrections and none since the
    # driver loaded: the aggregate is never read.
    assert {g.ecc_volatile_correctable for g in parse_query(real(A40_AGGREGATE).decode()).gpus} == {
        0
    }
    # ECC off or not reported: N/A is no count.
    assert {g.ecc_volatile_correctable for g in parse_query(real(RTX4090X8).decode()).gpus} == {
        None
    }


def test_corrected_errors_rising_over_the_threshold_for_five_minutes_are_a_finding() -> None:
    # 600 a cycle (1,200 a minute, threshold 1,000): judged once the readings span 300 s.
    outcomes = cycles(with_dram_correctable(353 + 600 * n) for n in range(12))
    assert all(o.problems == [] for o in outcomes[:10])
    assert found(outcomes[10]) == [(1, "ecc_correctable", "1000+/min", "under 1000/min")]
    assert degraded_text(outcomes[10].problems[0]) == (
        "Degraded on GPU 1 (0000:9e:00) [ecc_correctable]: 1000+/min, expected under 1000/min"
        " (over 300+ s)"
    )
    assert any("+6000 in 300 s (1200.0/min)" in line for line in outcomes[10].log)


def test_a_steady_or_slowly_rising_count_is_no_finding() -> None:
    # 353 corrections since the driver loaded, then 400 a cycle (800 a minute).
    steady = cycles([real(A100_ECC)] * 20)
    slow = cycles(with_dram_correctable(353 + 400 * n) for n in range(20))
    assert all(o.problems == [] for o in steady + slow)


def test_a_count_that_went_down_is_a_new_baseline_not_a_spike() -> None:
    # Without persistence mode the volatile count restarts with every application.
    rising = [with_dram_correctable(100_000 + 10 * n) for n in range(11)]
    outcomes = cycles([*rising, with_dram_correctable(5), with_dram_correctable(900)])
    assert all(o.problems == [] for o in outcomes)
    assert (
        "GPU 0000:9e:00 ecc_correctable went down (100100 -> 5): new baseline" in outcomes[11].log
    )


def test_a_rise_clears_once_it_slides_out_of_the_window() -> None:
    burst = [with_dram_correctable(353 + 600 * n) for n in range(11)]
    quiet = [with_dram_correctable(353 + 600 * 10)] * 25
    outcomes = cycles([*burst, *quiet])
    assert found(outcomes[10])
    assert outcomes[-1].problems == []


def test_ecc_can_be_turned_off_and_its_threshold_set() -> None:
    rising = [with_dram_correctable(353 + 600 * n) for n in range(12)]
    off = configured(degraded_checks="pcie_width,pcie_gen")
    assert all(o.problems == [] for o in cycles(rising, off))
    stricter = configured(degraded_ecc_correctable_per_minute=100)
    assert found(cycles(rising, stricter)[10])[0][1:] == (
        "ecc_correctable",
        "100+/min",
        "under 100/min",
    )
    with pytest.raises(ConfigError, match="degraded_ecc_correctable_per_minute"):
        configured(degraded_ecc_correctable_per_minute=0)
    with pytest.raises(ConfigError, match="degraded_counter_min_span"):
        configured(degraded_counter_min_span=600)


def test_hostile_ecc_counts_and_saved_readings_are_bounded() -> None:
    huge = in_gpu(real(A100_ECC), 1, b": 353", b": " + b"9" * SIZE)
    timed("ECC count", parse_query, huge.decode())
    assert parse_query(huge.decode()).gpus[1].ecc_volatile_correctable is None
    saved = {
        "ecc": {
            "0000:9e:00": [[START, 1], "x", [START, -1], [True, 2], [START, 2**70]] * 1000,
            "x" * 1000: [[START, 1]],
        }
    }
    [outcome] = cycles([real(A100_ECC)], state=saved)
    assert len(outcome.state()["ecc"]["0000:9e:00"]) <= gpu_degraded.MAX_SAMPLES
    assert "x" * 1000 not in outcome.state()["ecc"]
